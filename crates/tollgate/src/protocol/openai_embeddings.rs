//! OpenAI's embeddings: the chat shape's usage, no stream of text.

use super::openai_chat::{chunk, last_segment, openai};
use super::{Kind, Unit};
use crate::llm::sse::Event;
use crate::llm::usage::{Counts, Reported};
use crate::llm::{Api, Meter, Shape};

pub const API: Api = Api::new("openai.embeddings", &OpenAiEmbeddings);

pub const UNIT: Unit = Unit {
    name: API.name(),
    title: "OpenAI embeddings",
    recognised_by: "`POST`, path ending `/embeddings`",
    answer: "`usage` and `model`",
    policies: super::LLM_POLICIES,
    kind: Kind::Llm(API),
};

pub struct OpenAiEmbeddings;

impl Shape for OpenAiEmbeddings {
    fn recognises(&self, path: &str) -> bool {
        last_segment(path) == "embeddings"
    }

    fn event(&self, meter: &Meter, e: &Event) -> bool {
        chunk(meter, &e.data)
    }

    fn reported(&self, c: &Counts) -> Reported {
        openai(c)
    }
}
