//! OpenAI's chat completions (and legacy completions), the shape most providers copy.
//! A stream reports its usage only when asked (`stream_options.include_usage`), which
//! tollgate adds and takes out again (`crate::llm::request`, `crate::llm::body`).

use super::{Kind, Unit};
use crate::llm::body::count_content;
use crate::llm::sse::Event;
use crate::llm::usage::{Counts, Reported};
use crate::llm::{Api, Meter, Shape};
use memchr::memmem::Finder;
use std::sync::LazyLock;

pub const API: Api = Api::new("openai.chat", &OpenAiChat);

pub const UNIT: Unit = Unit {
    name: API.name(),
    title: "OpenAI chat completions (and legacy completions)",
    recognised_by: "`POST`, path ending `/completions`",
    answer: "`usage` and `model`; a stream's final usage chunk (asked for when the request did not)",
    policies: super::LLM_POLICIES,
    kind: Kind::Llm(API),
};

pub struct OpenAiChat;

impl Shape for OpenAiChat {
    fn recognises(&self, path: &str) -> bool {
        last_segment(path) == "completions"
    }

    fn adds_stream_usage(&self) -> bool {
        true
    }

    fn event(&self, meter: &Meter, e: &Event) -> bool {
        chunk(meter, &e.data)
    }

    fn reported(&self, c: &Counts) -> Reported {
        openai(c)
    }
}

/// The last segment of a path: after its last `/` (found by a byte search; `rsplit`'s
/// searcher cost most of recognising a call's API).
pub fn last_segment(path: &str) -> &str {
    match path.bytes().rposition(|c| c == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// A chunk of a chat (or embeddings) stream: its usage and model when it has them, else
/// a token's worth of text counted; whether it is the usage chunk `include_usage` adds.
pub fn chunk(meter: &Meter, data: &[u8]) -> bool {
    let has_usage = has_usage(data);
    let need_model = !meter.knows_model();
    if !has_usage && !need_model {
        count_content(meter, data);
        return false;
    }
    // The three members read in one checked pass over the chunk; where the pass is not
    // sure (an escaped key, a `\u` escape), the chunk is parsed whole.
    by_members(meter, data).unwrap_or_else(|| by_value(meter, data))
}

/// Whether a chunk has a `"usage"` and no `"usage":null` (OpenAI writes the null in every
/// chunk when the stream asks for its usage, and the count in the last). A chunk whose
/// last member is its null is told at once; any other is searched forward (a vectorised
/// search: a reverse one has none, and cost 1 500 instructions for the usage chunk).
/// The searcher is built once: building one costs more than searching a chunk.
fn has_usage(data: &[u8]) -> bool {
    // Its last member, as OpenAI writes every chunk but the last: told at once.
    if data.trim_ascii_end().ends_with(b"\"usage\":null}") {
        return false;
    }
    static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
    let (mut at, mut seen) = (0, false);
    while let Some(i) = USAGE.find(&data[at..]) {
        let i = at + i;
        if data[i + 7..].starts_with(b":null") {
            return false;
        }
        seen = true;
        at = i + 1;
    }
    seen
}

/// [`chunk`]'s reading of the members `model`, `usage` and `choices`, found by one pass
/// ([`crate::json::walk::members`]); `None` where the pass is not sure.
fn by_members(meter: &Meter, data: &[u8]) -> Option<bool> {
    let [model, usage, choices] = crate::json::walk::members(data, ["model", "usage", "choices"])?;
    if let Some(m) = model {
        meter.model_json(m);
    }
    Some(match usage.filter(|u| u.first() == Some(&b'{')) {
        Some(u) => {
            meter.usage_json(u, true);
            // The chunk `include_usage` adds carries no choice.
            choices
                .is_some_and(|c| c.starts_with(b"[") && c[1..].trim_ascii_start().starts_with(b"]"))
        }
        None => {
            count_content(meter, data);
            false
        }
    })
}

/// [`chunk`]'s reading of the chunk parsed whole.
fn by_value(meter: &Meter, data: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return false;
    };
    if let Some(m) = v.get("model") {
        meter.model_value(m);
    }
    let usage = v.get("usage").filter(|u| u.is_object());
    match usage {
        Some(u) => {
            // Read from its text, as the one pass and a complete answer read it (a
            // `Value`'s numbers past `u64` would fail the whole object).
            meter.usage_json(&serde_json::to_vec(u).unwrap_or_default(), true);
            v.get("choices")
                .and_then(|c| c.as_array())
                .is_some_and(|c| c.is_empty())
        }
        None => {
            count_content(meter, data);
            false
        }
    }
}

/// OpenAI's usage: `prompt_tokens`/`completion_tokens` (chat, embeddings) or
/// `input_tokens`/`output_tokens` (Responses), with their details.
pub fn openai(c: &Counts) -> Reported {
    Reported {
        input: c.prompt_tokens.or(c.input_tokens),
        output: c.completion_tokens.or(c.output_tokens),
        cached: c.prompt_cached.or(c.input_cached),
        cache_write: None,
        reasoning: c.completion_reasoning.or(c.output_reasoning),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Metered;

    /// Whether the one pass read `chunk`; when it did, the meter and the answer are what
    /// the chunk parsed whole gives.
    fn agrees(chunk: &[u8]) -> bool {
        let (hand, whole) = (
            Meter::new(API, Metered::default()),
            Meter::new(API, Metered::default()),
        );
        let Some(stripped) = by_members(&hand, chunk) else {
            return false;
        };
        let text = String::from_utf8_lossy(chunk);
        assert_eq!(stripped, by_value(&whole, chunk), "{text}");
        let (h, w) = (hand.read(), whole.read());
        assert_eq!(
            (h.answered, h.reported, h.chunks),
            (w.answered, w.reported, w.chunks),
            "{text}"
        );
        true
    }

    #[test]
    fn a_chunk_has_usage_when_it_has_the_key_and_never_its_null() {
        for (chunk, want) in [
            (&br#"{"choices":[],"usage":{"prompt_tokens":1}}"#[..], true),
            (
                br#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#,
                false,
            ),
            (
                br#"{"usage":null,"x":{"usage":{"prompt_tokens":1}}}"#,
                false,
            ),
            (
                br#"{"usage":{"prompt_tokens":1},"x":{"usage":null}}"#,
                false,
            ),
            (br#"{"usage" :null}"#, true),
            (br#"{"choices":[]}"#, false),
            (br#""usage""#, true),
        ] {
            assert_eq!(has_usage(chunk), want, "{}", String::from_utf8_lossy(chunk));
        }
    }

    #[test]
    fn a_chunk_read_in_one_pass_reads_as_the_chunk_parsed_whole() {
        const SNIPPETS: &[&str] = &[
            r#""model":"x","#,
            r#""model":7,"#,
            r#""usage":{},"#,
            r#""usage":[],"#,
            r#""choices":[],"#,
            r#""content":"more","#,
        ];
        crate::json::mutants::check_mutants(
            crate::json::mutants::CHAT_CHUNKS,
            SNIPPETS,
            40_000,
            agrees,
        );
    }
}
