//! HAR capture: what one captured call carried, handed through a bounded queue to the
//! writer thread, which encodes HAR 1.2 entries (redacted, obfuscated when configured)
//! and writes them to every sink. A full queue drops the entry and counts it; the call
//! never waits.

mod body;
pub mod collector;
pub mod entry;
pub mod file;
mod json_edit;
mod json_out;
pub mod publish;
pub mod read;
pub mod recent;
pub mod redact;
mod writer;

use super::Acted;
use super::tap::Copy;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Version};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use writer::{HarWriter, Sinks, channel as writer_channel};

/// A call being captured: filled in as the request goes.
pub struct Capture {
    pub started: SystemTime,
    pub method: Method,
    /// The URL sent upstream.
    pub url: String,
    pub request_headers: HeaderMap,
    /// From the request's start until the (last) attempt was sent: queues, limits.
    pub sent_after: Option<Duration>,
    pub response: Option<ResponseHead>,
    pub response_body: Copy,
    /// Redaction of the config the request started on (a reload may change credentials).
    pub redactor: Arc<redact::Redactor>,
}

pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
}

impl Capture {
    pub fn new(
        method: Method,
        url: String,
        request_headers: HeaderMap,
        max_body: usize,
        budget: Option<super::tap::Budget>,
        redactor: Arc<redact::Redactor>,
    ) -> Box<Self> {
        Box::new(Self {
            started: SystemTime::now(),
            method,
            url,
            request_headers,
            sent_after: None,
            response: None,
            response_body: Copy::new(max_body, budget),
            redactor,
        })
    }

    pub fn respond(&mut self, status: StatusCode, version: Version, headers: &HeaderMap) {
        self.response = Some(ResponseHead {
            status,
            version,
            headers: headers.clone(),
        });
    }
}

/// A finished capture, on its way to the writer.
pub struct Record {
    pub capture: Box<Capture>,
    /// The request body's copy and full size.
    pub request_body: Option<(Bytes, u64)>,
    pub request_id: String,
    pub policy: Option<Arc<str>>,
    /// The matched policy's path template (its literal segments are never obfuscated).
    pub template: Option<Arc<str>>,
    pub acted: Vec<Acted>,
    pub retries: u32,
    pub error: Option<&'static str>,
    pub total: Duration,
    /// From sending to the response head.
    pub wait: Option<Duration>,
    /// Whether the response body was delivered whole.
    pub completed: bool,
    /// An LLM call's usage.
    pub llm: Option<Arc<crate::llm::Meter>>,
    /// Answered from the cache with an LLM answer: what the provider's answer had cost.
    pub saved: Option<Box<crate::llm::Saved>>,
    /// An MCP call's method, name and id.
    pub mcp: Option<Arc<crate::mcp::Call>>,
}

impl Record {
    /// About the memory this record holds: its bodies, heads and URL (what it counts for
    /// in the writer's queue bound; a queued record never changes, so sender and writer
    /// compute the same).
    pub fn size(&self) -> usize {
        let c = &self.capture;
        let head = |h: &http::HeaderMap| {
            h.iter()
                .map(|(n, v)| n.as_str().len() + v.len() + 32)
                .sum::<usize>()
        };
        std::mem::size_of::<Self>()
            + std::mem::size_of::<Capture>()
            + c.url.len()
            + head(&c.request_headers)
            + c.response.as_ref().map_or(0, |r| head(&r.headers))
            + c.response_body.data.capacity()
            + self.request_body.as_ref().map_or(0, |(b, _)| b.len())
    }
}
