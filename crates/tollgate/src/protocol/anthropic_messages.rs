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

pub struct AnthropicMessages;

impl Shape for AnthropicMessages {
    fn recognises(&self, path: &str) -> bool {
        last_segment(path) == "messages"
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
            b"message_start" => {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&e.data)
                    && let Some(msg) = v.get("message")
                {
                    if let Some(m) = msg.get("model") {
                        meter.model_value(m);
                    }
                    if let Some(u) = msg.get("usage") {
                        meter.usage_value(u, false);
                    }
                }
            }
            b"message_delta" => {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&e.data)
                    && let Some(u) = v.get("usage")
                {
                    // The final output count (and, lately, the input again).
                    meter.usage_value(u, true);
                }
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
