//! What differs between the LLM APIs tollgate reads, as one trait ([`Shape`]): how a
//! request is recognised and read, where its answer tells usage, how its errors and its
//! model are spelt. Each API implements it in its own module of `protocol`, the
//! registry of recognised protocols; the reading itself (the request's one pass, the
//! answer relayed as it is read, the meter) is this module's, the same for all.

use super::meter::Meter;
use super::request::Head;
use super::sse::Event;
use super::usage::{Counts, Reported};

/// One LLM API's differences from the others. The defaults are OpenAI's chat shape,
/// which most providers copy.
pub trait Shape: Sync + 'static {
    /// Whether a `POST` to `path` (normalised, without a trailing `/`) calls this API.
    fn recognises(&self, path: &str) -> bool;

    /// The model a request asks for: its body's top-level `model`.
    fn model<'a>(&self, _path: &'a str, head: &'a Head) -> Option<&'a str> {
        head.model.as_deref()
    }

    /// Whether the request asks for a stream: its body's `stream`.
    fn streams(&self, _path: &str, head: &Head) -> bool {
        head.stream.unwrap_or(false)
    }

    /// Answers generated per call: `n`, or `best_of`, which generates that many
    /// server-side (billed) whatever `n` returns.
    fn choices(&self, head: &Head) -> Option<u64> {
        head.n.into_iter().chain(head.best_of).max()
    }

    /// Whether the API's models may have a public tokenizer (OpenAI's encodings): a
    /// request to an API whose models have none keeps no prompt text for an exact count.
    fn public_tokenizer(&self) -> bool {
        true
    }

    /// Whether tollgate may add `stream_options.include_usage` to a stream lacking it
    /// (an API that reports a stream's usage only when asked).
    fn adds_stream_usage(&self) -> bool {
        false
    }

    /// The top-level keys of a complete answer that tell its usage (first) and model.
    fn answer_keys(&self) -> &'static [&'static str] {
        &["usage", "model"]
    }

    /// Whether the usage and model of a stream's event named `name` lie one level down
    /// (`response.usage`, `message.usage`), for the scan of an event longer than the cap.
    fn nested_event(&self, _name: &[u8]) -> bool {
        false
    }

    /// Whether a usage found is the answer's final count: in a complete answer (`None`)
    /// or in a long event named `name`.
    fn final_usage(&self, _event: Option<&[u8]>) -> bool {
        true
    }

    /// Reads one event of a stream (not empty, not `[DONE]`, within the cap) into
    /// `meter`; whether it is the usage chunk tollgate asked for, which the client does
    /// not get.
    fn event(&self, meter: &Meter, e: &Event) -> bool;

    /// What a usage object says, as this API writes it.
    fn reported(&self, c: &Counts) -> Reported;

    /// Whether an error body says the prompt is longer than the model's context.
    fn too_long(&self, body: &[u8]) -> bool {
        memchr::memmem::find(body, b"context_length_exceeded").is_some()
    }

    /// The request's path and query asking for `model` instead, for an API that names
    /// the model in its path; `None`: the model is the body's `model`.
    fn path_with_model(&self, _pq: &str, _model: &str) -> Option<String> {
        None
    }
}

/// An LLM API: its name (as diagnosis shows it) and its [`Shape`].
#[derive(Clone, Copy)]
pub struct Api {
    name: &'static str,
    shape: &'static dyn Shape,
}

impl Api {
    pub const fn new(name: &'static str, shape: &'static dyn Shape) -> Self {
        Self { name, shape }
    }

    /// `openai.chat`, `anthropic.messages`, …
    pub const fn name(self) -> &'static str {
        self.name
    }
}

impl std::ops::Deref for Api {
    type Target = dyn Shape;
    fn deref(&self) -> &(dyn Shape + 'static) {
        self.shape
    }
}

impl PartialEq for Api {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Api {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}
