//! Diagnosis: what tollgate shows about the calls it carries — HAR capture, endpoint
//! discovery, per-endpoint metrics, remedy statistics and traces — without slowing them.
//!
//! On the request path only cheap things happen, and only for what is switched on: a
//! request body is counted (and, when captured, teed into a capped buffer), the response
//! body likewise, and one record leaves through a bounded queue when the request ends.
//! Everything else (templating, aggregation, redaction, HAR encoding, writing, export)
//! runs on the observer and diagnosis threads (docs/diagnosis.md).

pub mod aggregated;
pub mod discovery;
pub mod har;
pub mod remedy_stats;
pub mod settings;
pub mod tap;
pub mod trace;
pub mod worker;

use http::{HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;

/// Whether a browser watches the dashboard's live calls: read on the request path (one
/// relaxed load) and by the HAR writer, written when a live stream opens or closes.
#[derive(Debug, Clone, Default)]
pub struct Watching(Arc<std::sync::atomic::AtomicUsize>);

impl Watching {
    #[inline]
    pub fn any(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    pub fn opened(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn closed(&self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// An action a remedy took on one request (`cache`/`hit`, `rate_limit`/`queued`…), for HAR
/// entries, remedy statistics and span events; when it happened (unix ns) is read for a
/// traced request only (a span event's time), 0 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acted {
    pub remedy: &'static str,
    pub action: &'static str,
    pub at_unix_ns: u64,
}

/// Per config: what diagnosis does for each request. Built with the runtime.
#[derive(Clone)]
pub struct Plan {
    pub discovery: bool,
    pub consumer_header: Option<HeaderName>,
    /// The consumer header carries secrets (a redacted name such as `authorization`):
    /// its values are counted by digest, never shown.
    pub consumer_secret: bool,
    pub har: Option<HarPlan>,
    /// Sampling of new traces, when traces are on.
    pub traces: Option<f64>,
    /// Redaction and obfuscation of HAR entries (names and values from this config).
    pub redactor: Arc<har::redact::Redactor>,
    /// The path template of each policy, by index (for discovery and obfuscation).
    pub templates: Vec<Arc<str>>,
}

#[derive(Clone)]
pub struct HarPlan {
    pub sample: f64,
    /// Per policy index: whether its calls are captured. `None`: every call.
    pub policies: Option<Vec<bool>>,
    pub max_body: usize,
}

/// What diagnosis needs to know of the rest of the config (the config builds it:
/// diagnosis does not read the config).
pub struct Given<'a> {
    pub settings: &'a settings::Diagnosis,
    /// Each policy's name and its path template, in order.
    pub policies: Vec<(&'a str, Option<&'a str>)>,
    /// Header and query names whose values are secret (credentials), lower case.
    pub secret_names: Vec<String>,
    /// Secret values the config holds (credentials, the admin token).
    pub secret_values: Vec<String>,
}

impl Plan {
    pub fn new(given: &Given<'_>) -> Self {
        let d = given.settings;
        let har = d.har.enabled.then(|| HarPlan {
            sample: d.har.sample,
            policies: (!d.har.policies.is_empty()).then(|| {
                given
                    .policies
                    .iter()
                    .map(|(name, _)| d.har.policies.iter().any(|p| p == name))
                    .collect()
            }),
            max_body: d.har.max_body_bytes,
        });
        let redactor = Arc::new(har::redact::Redactor::new(given));
        Self {
            discovery: d.discovery.enabled,
            consumer_secret: d
                .discovery
                .consumer_header
                .as_ref()
                .is_some_and(|h| redactor.is_secret(h.as_str())),
            consumer_header: d.discovery.consumer_header.clone(),
            har,
            traces: d.traces.enabled.then_some(d.traces.sample),
            redactor,
            templates: given
                .policies
                .iter()
                .map(|(_, t)| {
                    // A template ending in `*` covers many endpoints: learn those instead.
                    Arc::from(t.filter(|t| !t.ends_with('*')).unwrap_or(""))
                })
                .collect(),
        }
    }

    /// Whether any per-request diagnosis is on (otherwise requests take today's path).
    #[inline]
    pub fn any(&self) -> bool {
        self.discovery || self.har.is_some() || self.traces.is_some()
    }

    /// Whether this call is captured: selected (all calls, or its policy's) and sampled.
    pub fn captures(&self, policy: Option<usize>) -> bool {
        let Some(h) = &self.har else {
            return false;
        };
        let selected = match (&h.policies, policy) {
            (None, _) => true,
            (Some(list), Some(i)) => list.get(i).copied().unwrap_or(false),
            (Some(_), None) => false,
        };
        selected && sampled(h.sample)
    }
}

/// A sampling decision at `rate` (0 to 1).
pub fn sampled(rate: f64) -> bool {
    rate >= 1.0 || (rate > 0.0 && fastrand::f64() < rate)
}

/// What diagnosis keeps about one request while it runs (boxed in the request's context
/// only when a diagnosis feature is on).
#[derive(Default)]
pub struct RequestDiag {
    /// The upstream path (after a route's prefix), for discovery.
    pub path: Option<String>,
    /// The target's port when it is not its scheme's default: discovery tells
    /// `host:port` apart from `host`.
    pub port: Option<u16>,
    /// The path template of the matched policy.
    pub template: Option<Arc<str>>,
    /// The consumer header's value.
    pub consumer: Option<HeaderValue>,
    /// The request body: bytes counted, and a capped copy when captured.
    pub tap: Option<Arc<tap::Tap>>,
    /// The HAR entry being captured.
    pub har: Option<Box<har::Capture>>,
    /// The trace this request's spans belong to.
    pub trace: Option<Box<trace::RequestTrace>>,
    /// What the remedies did: a chain's few inline (no allocation of their own).
    pub acted: smallvec::SmallVec<[Acted; 4]>,
    /// Attempts after the first.
    pub retries: u32,
    /// The matched policy.
    pub policy: Option<Arc<str>>,
    /// When the (last) attempt was sent.
    pub sent_at: Option<tokio::time::Instant>,
    /// An LLM call's usage, as its answer tells it.
    pub llm: Option<std::sync::Arc<crate::llm::Meter>>,
    /// Answered from the cache with an LLM answer: what the provider's answer had cost.
    pub saved: Option<Box<crate::llm::Saved>>,
    /// An MCP call: its method and the tool, prompt or resource it names.
    pub mcp: Option<std::sync::Arc<crate::mcp::Call>>,
    /// Its HAR entry was handed to the writer.
    pub captured: bool,
}

impl RequestDiag {
    /// Starts diagnosis for a request: the consumer, and the trace context.
    pub fn start(plan: &Plan, headers: &HeaderMap) -> Box<Self> {
        Box::new(Self {
            consumer: plan
                .consumer_header
                .as_ref()
                .and_then(|h| headers.get(h))
                .map(|v| match plan.consumer_secret {
                    true => consumer_digest(v),
                    false => v.clone(),
                }),
            trace: plan
                .traces
                .and_then(|rate| trace::RequestTrace::start(headers, rate)),
            ..Default::default()
        })
    }

    pub fn request_bytes(&self) -> Option<u64> {
        self.tap.as_ref().map(|t| t.bytes())
    }
}

/// A secret consumer value as it is counted: its scheme (`Bearer`, `Basic`) kept, the
/// rest as the first 12 hex digits of its SHA-256 — one token stays one consumer, and
/// nothing in `/discover` can be used as a credential.
fn consumer_digest(v: &HeaderValue) -> HeaderValue {
    let b = v.as_bytes();
    let (scheme, secret) = match b.iter().position(|&c| c == b' ') {
        Some(i) => (std::str::from_utf8(&b[..i]).ok(), &b[i + 1..]),
        None => (None, b),
    };
    let d = ring::digest::digest(&ring::digest::SHA256, secret);
    let hex: String = d.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect();
    let shown = match scheme {
        Some(s) if s.bytes().all(|c| c.is_ascii_alphanumeric()) => format!("{s} sha256:{hex}"),
        _ => format!("sha256:{hex}"),
    };
    HeaderValue::try_from(shown).unwrap_or(HeaderValue::from_static("sha256"))
}

/// Now as unix nanoseconds.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What `tollgate check` builds besides the config: the plan, and the sinks' clients
/// (TLS settings, URLs), without starting anything.
pub fn check(given: &Given<'_>, upstream: &crate::upstream::Settings) -> Result<(), String> {
    let _ = Plan::new(given);
    worker::check(given.settings, upstream)
}
