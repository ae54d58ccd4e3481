//! Every error tollgate makes up, with when a client sees it: README's table of errors
//! ("Errors you can act on") is generated from here (by the docs generator), its status
//! and code from the same [`ProxyError::status`] and [`ProxyError::code`] the responses
//! use, so the table cannot drift from what clients get.

#[cfg(test)]
use super::Refusal;
use super::{ProxyError, Reject, Rejection, TimeoutStage};
use std::time::Duration;

impl ProxyError {
    /// When a client gets this error, in README's words.
    pub fn situation(&self) -> &'static str {
        match self {
            ProxyError::MissingTarget => {
                "no target (no header, not absolute-form, no route, no aggregated endpoint)"
            }
            ProxyError::BadTarget(_) => "malformed `x-tollgate-host` / scheme / port",
            ProxyError::BadRequest(_) => {
                "malformed request: HTTP/1.1 without exactly one `Host`, broken chunked body; a JSON body a policy must edit (`json_set`/`json_remove`) that does not parse; a header a policy's `header_guard` requires is missing"
            }
            ProxyError::Misdirected(_) => {
                "a request in a decrypted tunnel (`intercept.hosts`) for another host than the tunnel's"
            }
            ProxyError::LoopDetected(_) => {
                "the target is tollgate itself (its proxy listener, or its own `Via` came back)"
            }
            ProxyError::AddressDenied(_) => {
                "the target's address is denied by `egress` rules, or is tollgate's admin listener"
            }
            ProxyError::PortDenied { .. } => {
                "CONNECT to a port outside `egress.connect_ports` (default 443)"
            }
            ProxyError::Dns { .. } => "host not resolvable",
            ProxyError::Connect { .. } => "connection refused / reset before the response",
            ProxyError::Tls { .. } => "TLS handshake or verification failure",
            ProxyError::UpstreamTimeout { .. } => {
                "upstream too slow: connecting (`connect_timeout`), the response head (`response_timeout`), or the whole exchange (a policy's `timeouts.total`)"
            }
            ProxyError::DomainDenied(_) => "domain denied by allow/deny lists",
            ProxyError::HeadersTooLarge { .. } => "request headers too large",
            ProxyError::ShuttingDown => {
                "shutting down: a request arriving while draining, or still queued at the drain deadline"
            }
            ProxyError::Upstream(_) => "other upstream protocol failure",
            ProxyError::Internal(_) => {
                "tollgate's own state failed the request, never the provider (a bug: please report it with the request id)"
            }
            ProxyError::BackendsFailed {
                timed_out: true, ..
            } => "every backend of an aggregated endpoint timed out",
            ProxyError::BackendsFailed { .. } => {
                "every backend of an aggregated endpoint failed (the message says how each did)"
            }
            ProxyError::Rejected(r) => r.kind.situation,
            ProxyError::BodyTooLarge { .. } => {
                "request body over what tollgate must read whole: a JSON transform's `max_body`, a `json` endpoint's `max_body_bytes`"
            }
            ProxyError::Retried(r) => r.error.situation(),
        }
    }

    /// One error of each kind, in README's order, `refusals` (each remedy's, from the
    /// registry) among them.
    pub fn catalogue(refusals: &[Reject]) -> Vec<ProxyError> {
        let s = String::new;
        let mut all = vec![
            ProxyError::MissingTarget,
            ProxyError::BadTarget(s()),
            ProxyError::BadRequest(s()),
            ProxyError::Misdirected(s()),
            ProxyError::LoopDetected(s()),
            ProxyError::AddressDenied(s()),
            ProxyError::PortDenied {
                port: 0,
                allowed: s(),
            },
            ProxyError::Dns {
                host: s(),
                detail: s(),
            },
            ProxyError::Connect {
                target: s(),
                detail: s(),
                sent: false,
            },
            ProxyError::Tls {
                target: s(),
                detail: s(),
            },
            ProxyError::UpstreamTimeout {
                target: s(),
                stage: TimeoutStage::Connect,
                limit: Duration::ZERO,
            },
            ProxyError::Upstream(s()),
            ProxyError::BackendsFailed {
                endpoint: s(),
                detail: s(),
                timed_out: true,
            },
            ProxyError::BackendsFailed {
                endpoint: s(),
                detail: s(),
                timed_out: false,
            },
            ProxyError::DomainDenied(s()),
            ProxyError::HeadersTooLarge { size: 0, limit: 0 },
            ProxyError::ShuttingDown,
        ];
        all.extend(refusals.iter().map(|&kind| {
            ProxyError::Rejected(Rejection {
                kind,
                message: s(),
                retry_after: None,
                rate: None,
            })
        }));
        all.push(ProxyError::BodyTooLarge { limit: 0, what: "" });
        all.push(ProxyError::Internal(""));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind of error missing from the catalogue would be missing from README: each
    /// variant (and each refusal) must be there. The match is exhaustive, so a new
    /// variant fails to compile until it is counted here.
    #[test]
    fn the_catalogue_has_every_kind() {
        fn variant(e: &ProxyError) -> usize {
            match e {
                ProxyError::MissingTarget => 0,
                ProxyError::BadTarget(_) => 1,
                ProxyError::BadRequest(_) => 2,
                ProxyError::LoopDetected(_) => 3,
                ProxyError::AddressDenied(_) => 4,
                ProxyError::PortDenied { .. } => 5,
                ProxyError::Dns { .. } => 6,
                ProxyError::Connect { .. } => 7,
                ProxyError::Tls { .. } => 8,
                ProxyError::UpstreamTimeout { .. } => 9,
                ProxyError::DomainDenied(_) => 10,
                ProxyError::HeadersTooLarge { .. } => 11,
                ProxyError::ShuttingDown => 12,
                ProxyError::Upstream(_) => 13,
                ProxyError::Internal(_) => 14,
                ProxyError::BackendsFailed { .. } => 15,
                ProxyError::Rejected(_) => 16,
                ProxyError::BodyTooLarge { .. } => 17,
                // Retry wraps another error and answers with its code.
                ProxyError::Retried(_) => 18,
                ProxyError::Misdirected(_) => 19,
            }
        }
        static REFUSED: Refusal = Refusal {
            code: "refused",
            status: http::StatusCode::TOO_MANY_REQUESTS,
            situation: "",
        };
        let all = ProxyError::catalogue(&[&REFUSED]);
        let mut seen: Vec<usize> = all.iter().map(variant).collect();
        seen.push(18);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..=19).collect::<Vec<_>>());
        let refusals = all
            .iter()
            .filter(|e| matches!(e, ProxyError::Rejected(_)))
            .count();
        assert_eq!(refusals, 1);
    }
}
