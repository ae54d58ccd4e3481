//! OpenAI's Responses API: a stream of named events, the usage in the final
//! `response.completed` (or `incomplete`, `failed`) event's `response`.

use super::openai_chat::{last_segment, openai};
use super::{Kind, Unit};
use crate::llm::sse::Event;
use crate::llm::usage::{Counts, Reported};
use crate::llm::{Api, Meter, Shape};

pub const API: Api = Api::new("openai.responses", &OpenAiResponses);

pub const UNIT: Unit = Unit {
    name: API.name(),
    title: "OpenAI Responses",
    recognised_by: "`POST`, path ending `/responses`",
    answer: "`usage` and `model`; a stream's `response.completed` event",
    policies: super::LLM_POLICIES,
    kind: Kind::Llm(API),
};

pub struct OpenAiResponses;

impl Shape for OpenAiResponses {
    fn recognises(&self, path: &str) -> bool {
        last_segment(path) == "responses"
    }

    fn nested_event(&self, name: &[u8]) -> bool {
        name.starts_with(b"response.")
    }

    fn final_usage(&self, event: Option<&[u8]>) -> bool {
        event != Some(b"response.created")
    }

    fn event(&self, meter: &Meter, e: &Event) -> bool {
        match &e.name[..] {
            b"response.output_text.delta"
            | b"response.function_call_arguments.delta"
            | b"response.reasoning_summary_text.delta" => meter.update(|m| m.chunks += 1),
            b"response.created"
            | b"response.completed"
            | b"response.incomplete"
            | b"response.failed" => {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&e.data)
                    && let Some(r) = v.get("response")
                {
                    if let Some(m) = r.get("model") {
                        meter.model_value(m);
                    }
                    if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
                        meter.usage_value(u, true);
                    }
                }
            }
            _ => {}
        }
        false
    }

    fn reported(&self, c: &Counts) -> Reported {
        openai(c)
    }
}
