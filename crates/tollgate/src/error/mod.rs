//! Proxy-made errors and the one place that turns them into HTTP responses
//! (status, `x-tollgate-error`, JSON body `{"error": {"type", "code", "message"}}`).
//!
//! Provider responses never pass through here: a provider's own 4xx/5xx is relayed
//! untouched and never carries `x-tollgate-error`.

mod kinds;
pub mod rpc;

pub use kinds::{ErrorKind, Failure, Refusal, catalogue};

use crate::body::{Body, full};
use crate::headers::{X_TOLLGATE_ERROR, X_TOLLGATE_GENERATED, X_TOLLGATE_REQUEST_ID};
use http::{HeaderValue, Response, header};
use std::time::Duration;

/// Every way tollgate itself can fail a request.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(
        "no upstream target: send `x-tollgate-host`, use the proxy as HTTP_PROXY (absolute-form URL), or call a declared route"
    )]
    MissingTarget,
    #[error("{0}")]
    BadTarget(String),
    /// The client's request is malformed (RFC 9112 §3.2 Host rules, a broken chunked body).
    #[error("{0}")]
    BadRequest(String),
    /// A path servers disagree on (an encoded slash, `;` parameters, its case) that would
    /// escape an LLM policy's counting (policy::path).
    #[error("{0}")]
    AmbiguousPath(String),
    /// A request in a decrypted tunnel names another host than the tunnel's.
    #[error("{0}")]
    Misdirected(String),
    /// The request came back to this tollgate (its own `Via` pseudonym, or its own proxy
    /// listener as the target): forwarding it would call itself until resources run out.
    #[error("{0}")]
    LoopDetected(String),
    /// The target's address is refused by `egress` rules or is this tollgate's admin listener.
    #[error("{0}")]
    AddressDenied(String),
    /// CONNECT to a port outside `egress.connect_ports`.
    #[error("CONNECT to port {port} is not allowed; allowed: {allowed} (egress.connect_ports)")]
    PortDenied { port: u16, allowed: String },
    #[error("cannot resolve `{host}`: {detail}")]
    Dns { host: String, detail: String },
    #[error("cannot connect to `{target}`: {detail}")]
    Connect {
        target: String,
        detail: String,
        /// Whether the request may have reached the provider (a reset on an open
        /// connection) rather than never leaving (the connection could not be made).
        sent: bool,
    },
    #[error("TLS with `{target}` failed: {detail}")]
    Tls { target: String, detail: String },
    #[error("`{target}` did not {stage} within {limit:?}")]
    UpstreamTimeout {
        target: String,
        stage: TimeoutStage,
        limit: Duration,
    },
    #[error("domain `{0}` is not allowed by the domain lists")]
    DomainDenied(String),
    #[error("request headers are {size} bytes, more than the limit of {limit} bytes")]
    HeadersTooLarge { size: usize, limit: usize },
    #[error("tollgate is shutting down; retry on another instance")]
    ShuttingDown,
    /// Another failure of the upstream exchange (a protocol error after sending).
    #[error("the upstream connection failed: `{target}`: {detail}")]
    Upstream { target: String, detail: String },
    /// tollgate's own state failed the request, never the provider: a bug to report.
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// Every backend of an aggregated endpoint failed: 504 when all timed out, else 502.
    #[error("every backend of endpoint `{endpoint}` {detail}")]
    BackendsFailed {
        endpoint: String,
        detail: String,
        timed_out: bool,
    },
    /// A remedy refused the request (a limit, a queue, a breaker, the provider's throttle).
    #[error("{}", .0.message)]
    Rejected(Rejection),
    /// A request body a remedy must read whole is larger than its cap.
    #[error("the request body is larger than {limit} bytes ({what})")]
    BodyTooLarge { limit: usize, what: &'static str },
    /// A request that retry sent again, or judged retryable and stopped, still ending in
    /// one of tollgate's own errors: that error, and what the client must know of retry.
    #[error("{}", .0.error)]
    Retried(Box<Retried>),
    /// One of the errors above on an MCP call: answered as a JSON-RPC error carrying the
    /// call's id ([`rpc`]), with the same status and headers.
    #[error("{}", .0.error)]
    Rpc(Box<Rpc>),
}

/// Where an upstream exchange ran out of time (`did not {stage} within …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutStage {
    /// Resolve, connect and TLS: the request never left.
    Connect,
    /// From sending until the response head.
    Respond,
    /// The whole exchange (`timeouts.total`).
    Total,
}

impl std::fmt::Display for TimeoutStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutStage::Connect => "connect",
            TimeoutStage::Respond => "respond",
            TimeoutStage::Total => "complete the exchange (timeouts.total)",
        })
    }
}

/// See [`ProxyError::Retried`].
#[derive(Debug)]
pub struct Retried {
    pub error: ProxyError,
    /// Attempts after the first (`x-tollgate-retries`).
    pub retries: u32,
    /// Retry stopped on a retryable failure (`x-should-retry: false`).
    pub declined: bool,
}

/// See [`ProxyError::Rpc`].
#[derive(Debug)]
pub struct Rpc {
    pub error: ProxyError,
    /// The call's `id` as written (`None`: a notification, or not read).
    pub id: Option<Box<str>>,
}

/// Which refusal a remedy answered with.
pub type Reject = &'static Refusal;

/// A remedy's refusal: what the client sees.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub kind: Reject,
    pub message: String,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (seconds).
    pub rate: Option<(u64, u64, u64)>,
    /// Sending the request again cannot succeed (an estimate larger than the whole limit,
    /// a blocked group): `x-should-retry: false`, so the OpenAI and Anthropic SDKs do not
    /// retry it.
    pub permanent: bool,
}

impl ProxyError {
    /// The error itself, without what retry added (for callers that classify it).
    pub fn unretried(self) -> ProxyError {
        match self {
            ProxyError::Retried(r) => r.error,
            ProxyError::Rpc(r) => r.error.unretried(),
            e => e,
        }
    }

    /// The error answered on the MCP call whose id is `id` (a JSON-RPC error).
    pub fn on_call(self, id: Option<Box<str>>) -> ProxyError {
        match self {
            ProxyError::Rpc(_) => self,
            error => ProxyError::Rpc(Box::new(Rpc { error, id })),
        }
    }

    /// The error response's JSON body.
    pub fn body_json(&self) -> String {
        body(self.code(), &self.to_string())
    }

    /// The error as a JSON-RPC error answering the call whose id is `id` (as written).
    pub fn json_rpc(&self, id: Option<&str>) -> String {
        let mut e = self;
        loop {
            match e {
                ProxyError::Retried(r) => e = &r.error,
                ProxyError::Rpc(r) => e = &r.error,
                _ => break,
            }
        }
        let retry_after = match e {
            ProxyError::Rejected(r) => r.retry_after,
            _ => None,
        };
        rpc::body(
            id,
            self.status(),
            self.code(),
            &self.to_string(),
            retry_after,
        )
    }

    /// The error response. `request_id` is echoed like on every response.
    pub fn to_response(&self, request_id: &HeaderValue) -> Response<Body> {
        if let ProxyError::Rpc(r) = self {
            let resp = r.error.to_response(request_id);
            let retry_after = resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.parse().ok());
            let body = rpc::body(
                r.id.as_deref(),
                resp.status(),
                self.code(),
                &self.to_string(),
                retry_after,
            );
            let (mut parts, _) = resp.into_parts();
            // As MCP servers answer a JSON-RPC error (2026-07-28's table): 400 for a
            // malformed message, 200 for the rest. The TypeScript SDK raises anything
            // else as a transport error, without reading the body.
            parts.status = rpc::http_status(parts.status);
            return Response::from_parts(parts, full(body));
        }
        if let ProxyError::Retried(r) = self {
            let mut resp = r.error.to_response(request_id);
            let h = resp.headers_mut();
            if r.retries > 0 {
                h.insert(crate::headers::X_TOLLGATE_RETRIES, r.retries.into());
            }
            if r.declined {
                h.insert(
                    crate::headers::X_SHOULD_RETRY,
                    HeaderValue::from_static("false"),
                );
            }
            return resp;
        }
        let mut resp = Response::new(full(self.body_json()));
        *resp.status_mut() = self.status();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(X_TOLLGATE_ERROR, HeaderValue::from_static(self.code()));
        h.insert(X_TOLLGATE_REQUEST_ID, request_id.clone());
        h.insert(X_TOLLGATE_GENERATED, HeaderValue::from_static("true"));
        if let ProxyError::Rejected(r) = self {
            if let Some(s) = r.retry_after {
                h.insert(header::RETRY_AFTER, s.into());
            }
            if r.permanent {
                h.insert(
                    crate::headers::X_SHOULD_RETRY,
                    HeaderValue::from_static("false"),
                );
            }
            // draft-ietf-httpapi-ratelimit-headers: the limit, what is left, seconds to reset.
            if let Some((limit, remaining, reset)) = r.rate {
                h.insert("ratelimit-limit", limit.into());
                h.insert("ratelimit-remaining", remaining.into());
                h.insert("ratelimit-reset", reset.into());
            }
        }
        if matches!(self, ProxyError::ShuttingDown | ProxyError::BadRequest(_)) {
            // A malformed request may have left the connection's framing unknown.
            // RFC 9112 §9.6: tell HTTP/1.1 clients this connection is going away.
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// An error body the major SDKs parse: `{"error": {"type", "code", "message"}}`. The
/// OpenAI, Anthropic and Stripe SDKs read `error` as an object and raise their own error
/// type carrying its `code` and `message`; a string there crashed stripe-python
/// (`'str' object has no attribute 'get'`) and hid the message from openai-python.
pub fn body(code: &str, message: &str) -> String {
    serde_json::json!({
        "error": { "type": "tollgate_error", "code": code, "message": message }
    })
    .to_string()
}

/// `n` and `noun`, the noun plural unless `n` is 1 ("1 request", "5 requests"), for the
/// messages of generated errors.
pub fn count_of(n: impl Into<u64>, noun: &str) -> String {
    match n.into() {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}
