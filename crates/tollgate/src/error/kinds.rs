//! Every kind of error tollgate makes up, as data (pingora's `Error { etype, esource,
//! retry }`): its code (`x-tollgate-error`), its status, whether the request may have
//! reached the provider (what retry and breakers judge), whether the target itself was
//! refused, and when a client gets it (README's table of errors). [`ProxyError::kind`] is
//! the one place a variant is mapped to its row; a remedy's refusals are rows declared
//! in its own module (`RemedyKind::REFUSALS`).

use super::{ProxyError, TimeoutStage};
use http::StatusCode;

/// How an attempt failed, as retry and breakers judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request never reached the provider: safe to send again, whatever the method.
    NotSent,
    /// No response head in time; the provider may have acted on the request.
    Timeout,
    /// Failed after it was sent (connection reset, protocol error).
    AfterSending,
    /// Refused by tollgate itself (a rule, the client's request): not the provider's fault.
    Ours,
}

/// A kind of error: one row of the table.
#[derive(Debug, PartialEq, Eq)]
pub struct ErrorKind {
    pub code: &'static str,
    pub status: StatusCode,
    pub failure: Failure,
    /// The request's target was refused or never validated: its host is client input
    /// that must not become a metric label.
    pub refuses_target: bool,
    /// When a client gets it, in README's words.
    pub situation: &'static str,
}

/// A remedy's refusal: a kind of error of tollgate's own.
pub type Refusal = ErrorKind;

impl ErrorKind {
    /// A remedy's refusal (`failure: Ours`).
    pub const fn refusal(code: &'static str, status: StatusCode, situation: &'static str) -> Self {
        Self {
            code,
            status,
            failure: Failure::Ours,
            refuses_target: false,
            situation,
        }
    }
}

/// Declares the kinds, one row each: `NAME = code, status, failure, refuses target,
/// "situation"`; and [`ALL`], in README's order.
macro_rules! kinds {
    ($($name:ident = $code:literal, $status:ident, $failure:ident, $target:literal, $situation:literal;)+) => {
        $(pub static $name: ErrorKind = ErrorKind {
            code: $code,
            status: StatusCode::$status,
            failure: Failure::$failure,
            refuses_target: $target,
            situation: $situation,
        };)+

        /// Every kind of tollgate's own (remedies' refusals apart), in README's order.
        pub static ALL: &[&ErrorKind] = &[$(&$name),+];
    };
}

kinds! {
    MISSING_TARGET = "missing_target", BAD_REQUEST, Ours, true,
        "no target (no header, not absolute-form, no route, no aggregated endpoint)";
    BAD_TARGET = "bad_target", BAD_REQUEST, Ours, true, "malformed `x-tollgate-host` / scheme / port";
    BAD_REQUEST = "bad_request", BAD_REQUEST, Ours, true,
        "malformed request: HTTP/1.1 without exactly one `Host`, broken chunked body; a JSON body a policy must edit (`json_set`/`json_remove`) that does not parse; a header a policy's `header_guard` requires is missing";
    AMBIGUOUS_PATH = "ambiguous_path", BAD_REQUEST, Ours, false,
        "a path spelled so that servers route it differently (`%2F`, `;` parameters, another case) which, read loosely, would be an LLM call or match an LLM policy of its host: refused rather than passed uncounted";
    MISDIRECTED = "misdirected_request", MISDIRECTED_REQUEST, Ours, true,
        "a request in a decrypted tunnel (`intercept.hosts`) for another host than the tunnel's";
    LOOP_DETECTED = "loop_detected", LOOP_DETECTED, Ours, true,
        "the target is tollgate itself (its proxy listener, or its own `Via` came back)";
    ADDRESS_DENIED = "address_denied", FORBIDDEN, Ours, true,
        "the target's address is denied by `egress` rules, or is tollgate's admin listener";
    PORT_DENIED = "port_denied", FORBIDDEN, Ours, true,
        "CONNECT to a port outside `egress.connect_ports` (default 443)";
    DNS = "dns_error", BAD_GATEWAY, NotSent, false, "host not resolvable";
    CONNECT_REFUSED = "connect_error", BAD_GATEWAY, NotSent, false, "connection refused (the request never left)";
    CONNECT_RESET = "connect_error", BAD_GATEWAY, AfterSending, false, "reset before the response";
    TLS = "tls_error", BAD_GATEWAY, NotSent, false, "TLS handshake or verification failure";
    CONNECT_TIMEOUT = "upstream_timeout", GATEWAY_TIMEOUT, NotSent, false,
        "upstream too slow: connecting (`connect_timeout`)";
    UPSTREAM_TIMEOUT = "upstream_timeout", GATEWAY_TIMEOUT, Timeout, false,
        "the response head (`response_timeout`), or the whole exchange (a policy's `timeouts.total`)";
    UPSTREAM = "upstream_error", BAD_GATEWAY, AfterSending, false, "other upstream protocol failure";
    BACKENDS_TIMED_OUT = "upstream_timeout", GATEWAY_TIMEOUT, Ours, false,
        "every backend of an aggregated endpoint timed out";
    BACKENDS_FAILED = "upstream_error", BAD_GATEWAY, Ours, false,
        "every backend of an aggregated endpoint failed (the message says how each did)";
    DOMAIN_DENIED = "domain_denied", FORBIDDEN, Ours, true, "domain denied by allow/deny lists";
    HEADERS_TOO_LARGE = "headers_too_large", REQUEST_HEADER_FIELDS_TOO_LARGE, Ours, true, "request headers too large";
    SHUTTING_DOWN = "shutting_down", SERVICE_UNAVAILABLE, Ours, true,
        "shutting down: a request arriving while draining, or still queued at the drain deadline";
    BODY_TOO_LARGE = "body_too_large", PAYLOAD_TOO_LARGE, Ours, false,
        "request body over what tollgate must read whole: a JSON transform's `max_body`, a `json` endpoint's `max_body_bytes`";
    INTERNAL = "internal_error", INTERNAL_SERVER_ERROR, Ours, false,
        "tollgate's own state failed the request, never the provider (a bug: please report it with the request id)";
}

impl ProxyError {
    /// The error's kind: its row of the table.
    pub fn kind(&self) -> &'static ErrorKind {
        match self {
            ProxyError::MissingTarget => &MISSING_TARGET,
            ProxyError::BadTarget(_) => &BAD_TARGET,
            ProxyError::BadRequest(_) => &BAD_REQUEST,
            ProxyError::AmbiguousPath(_) => &AMBIGUOUS_PATH,
            ProxyError::Misdirected(_) => &MISDIRECTED,
            ProxyError::LoopDetected(_) => &LOOP_DETECTED,
            ProxyError::AddressDenied(_) => &ADDRESS_DENIED,
            ProxyError::PortDenied { .. } => &PORT_DENIED,
            ProxyError::Dns { .. } => &DNS,
            // A connection that could not be made never carried the request; a reset on
            // an open one may have.
            ProxyError::Connect { sent: false, .. } => &CONNECT_REFUSED,
            ProxyError::Connect { .. } => &CONNECT_RESET,
            ProxyError::Tls { .. } => &TLS,
            ProxyError::UpstreamTimeout {
                stage: TimeoutStage::Connect,
                ..
            } => &CONNECT_TIMEOUT,
            ProxyError::UpstreamTimeout { .. } => &UPSTREAM_TIMEOUT,
            ProxyError::DomainDenied(_) => &DOMAIN_DENIED,
            ProxyError::HeadersTooLarge { .. } => &HEADERS_TOO_LARGE,
            ProxyError::ShuttingDown => &SHUTTING_DOWN,
            ProxyError::Upstream { .. } => &UPSTREAM,
            ProxyError::Internal(_) => &INTERNAL,
            ProxyError::BackendsFailed {
                timed_out: true, ..
            } => &BACKENDS_TIMED_OUT,
            ProxyError::BackendsFailed { .. } => &BACKENDS_FAILED,
            ProxyError::Rejected(r) => r.kind,
            ProxyError::BodyTooLarge { .. } => &BODY_TOO_LARGE,
            ProxyError::Retried(r) => r.error.kind(),
            ProxyError::Rpc(r) => r.error.kind(),
        }
    }

    /// The stable machine-readable code sent in `x-tollgate-error`.
    pub fn code(&self) -> &'static str {
        self.kind().code
    }

    pub fn status(&self) -> StatusCode {
        self.kind().status
    }

    /// Whether the request's target was refused or never validated: its host is then
    /// client input that must not become a metric label (it could be anything).
    pub fn target_rejected(&self) -> bool {
        self.kind().refuses_target
    }
}

/// Every kind a client can get, in README's order: tollgate's own, with `refusals` (each
/// remedy's, from the registry) after the requests' own refusals.
pub fn catalogue(refusals: &[&'static ErrorKind]) -> Vec<&'static ErrorKind> {
    let mut all: Vec<&'static ErrorKind> = ALL.to_vec();
    let at = all.len() - 2; // before the body limit and the internal error
    all.splice(at..at, refusals.iter().copied());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kinds that share a code share its status (README shows one row per code), and a
    /// code is a word clients can match.
    #[test]
    fn a_code_has_one_status() {
        for a in ALL {
            assert!(a.code.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            for b in ALL {
                assert!(a.code != b.code || a.status == b.status, "{}", a.code);
            }
        }
    }
}
