//! Anthropic's Messages API: the input counted in a stream's `message_start`, the output
//! in its `message_delta`; the cache's reads and writes counted beside `input_tokens`.

use super::openai_chat::last_segment;
use super::{Kind, Unit};
use crate::llm::sse::Event;
use crate::llm::usage::{Counts, Reported};
use crate::llm::{Api, Meter, Shape};

pub const API: Api = Api::new("anthropic.messages", &AnthropicMessages);

pub const UNIT: Unit = Unit {
    name: API.name(),
    title: "Anthropic Messages",
    recognised_by: "`POST`, path ending `/messages`",
    answer: "`usage` and `model`; a stream's `message_start` (input) and `message_delta` (output)",
    policies: super::LLM_POLICIES,
    kind: Kind::Llm(API),
};

/// A `message_start`'s model and input (its `message`'s `model` and `usage`), a
/// `message_delta`'s final usage, found by one pass
/// ([`crate::json::walk::members`]); `None` where the pass is not sure.
fn by_members(meter: &Meter, name: &[u8], data: &[u8]) -> Option<()> {
    use crate::json::walk::members;
    let [model, usage] = match name {
        b"message_start" => match members(data, ["message"])? {
            [Some(m)] if m.starts_with(b"{") => members(m, ["model", "usage"])?,
            _ => [None, None],
        },
        _ => [None, members(data, ["usage"])?[0]],
    };
    if let Some(m) = model {
        meter.model_json(m);
    }
    if let Some(u) = usage {
        // The final output count (and, lately, the input again) is `message_delta`'s.
        meter.usage_json(u, name == b"message_delta");
    }
    Some(())
}

/// [`by_members`] of the event parsed whole, the usage read from its text as everywhere.
fn by_value(meter: &Meter, name: &[u8], data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let start = name == b"message_start";
    let Some(at) = (if start { v.get("message") } else { Some(&v) }) else {
        return;
    };
    if start && let Some(m) = at.get("model") {
        meter.model_value(m);
    }
    if let Some(u) = at.get("usage") {
        meter.usage_json(&serde_json::to_vec(u).unwrap_or_default(), !start);
    }
}

pub struct AnthropicMessages;

impl Shape for AnthropicMessages {
    fn recognises(&self, path: &str) -> bool {
        last_segment(path) == "messages"
    }

    /// Its models' tokenizers are not public: prompts are estimated.
    fn public_tokenizer(&self) -> bool {
        false
    }

    fn nested_event(&self, name: &[u8]) -> bool {
        name == b"message_start"
    }

    fn final_usage(&self, event: Option<&[u8]>) -> bool {
        event.is_none_or(|name| name == b"message_delta")
    }

    fn event(&self, meter: &Meter, e: &Event) -> bool {
        match &e.name[..] {
            b"content_block_delta" => meter.update(|m| m.chunks += 1),
            // One checked pass for the members read; the event parsed whole where the
            // pass is not sure.
            b"message_start" | b"message_delta"
                if by_members(meter, &e.name, &e.data).is_none() =>
            {
                by_value(meter, &e.name, &e.data)
            }
            _ => {}
        }
        false
    }

    fn reported(&self, c: &Counts) -> Reported {
        let read = c.cache_read_input_tokens;
        let write = c.cache_creation_input_tokens;
        Reported {
            // Anthropic's `input_tokens` leaves out the cache's reads and writes.
            input: c.input_tokens.map(|i| {
                i.saturating_add(read.unwrap_or(0))
                    .saturating_add(write.unwrap_or(0))
            }),
            output: c.output_tokens,
            cached: read,
            cache_write: write,
            reasoning: None,
        }
    }

    fn too_long(&self, body: &[u8]) -> bool {
        memchr::memmem::find(body, b"prompt is too long").is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Metered;

    #[test]
    fn an_event_read_in_one_pass_reads_as_the_event_parsed_whole() {
        const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":3,"output_tokens":1}}}"#;
        const DELTA: &str = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#;
        const SNIPPETS: &[&str] = &[
            r#""usage":{"output_tokens":2},"#,
            r#""model":"x","#,
            r#""message":"m","#,
            r#""us\u0061ge":{},"#,
        ];
        for (name, base) in [(&b"message_start"[..], START), (b"message_delta", DELTA)] {
            crate::json::mutants::check_mutants(&[base], SNIPPETS, 20_000, |event| {
                let (hand, whole) = (
                    Meter::new(API, Metered::default()),
                    Meter::new(API, Metered::default()),
                );
                if by_members(&hand, name, event).is_none() {
                    return false;
                }
                by_value(&whole, name, event);
                let (h, w) = (hand.read(), whole.read());
                assert_eq!(
                    (h.answered, h.reported, h.whole),
                    (w.answered, w.reported, w.whole),
                    "{}",
                    String::from_utf8_lossy(event)
                );
                true
            });
        }
    }
}
