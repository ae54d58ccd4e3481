//! Traces: one server span per call, a child span per provider attempt (each retry its
//! own), remedy actions as span events. W3C Trace Context (https://www.w3.org/TR/trace-context/):
//! a client's `traceparent` is continued (its sampled flag decides), otherwise a trace is
//! started at the configured rate; each attempt sends the provider a `traceparent` naming
//! its own span. Spans leave through a bounded buffer and are exported over OTLP
//! (HTTP or gRPC, [`export`]).

pub mod export;

use http::{HeaderMap, HeaderValue};

pub const TRACEPARENT: &str = "traceparent";

/// The trace of one request, recorded while it runs.
pub struct RequestTrace {
    pub trace_id: [u8; 16],
    /// The client's span, when the trace was continued.
    pub parent: Option<[u8; 8]>,
    /// The server span (this call through tollgate).
    pub span_id: [u8; 8],
    pub flags: u8,
    pub start_ns: u64,
    pub attempts: Vec<Attempt>,
}

/// One provider attempt: a client span.
#[derive(Clone)]
pub struct Attempt {
    pub span_id: [u8; 8],
    pub start_ns: u64,
    pub end_ns: u64,
    pub status: Option<u16>,
    pub error: Option<String>,
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // W3C Trace Context §3.2.2.3: all-zero ids are invalid.
    while b.iter().all(|x| *x == 0) {
        b.iter_mut().for_each(|x| *x = fastrand::u8(..));
    }
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    (!out.iter().all(|x| *x == 0)).then_some(out)
}

/// `traceparent: 00-<trace-id>-<parent-id>-<flags>` (W3C Trace Context §3.2). A future
/// version's longer value is read by its first four fields (§3.2.4).
pub fn parse(v: &HeaderValue) -> Option<([u8; 16], [u8; 8], u8)> {
    let s = v.to_str().ok()?.trim();
    let mut parts = s.split('-');
    let version = parts.next()?;
    let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let flags = unhex::<1>(flags)
        .map(|f| f[0])
        .or_else(|| (flags == "00").then_some(0))?;
    Some((unhex(trace)?, unhex(parent)?, flags))
}

impl RequestTrace {
    /// Continues the client's trace, or starts one at `rate`; `None` when this request
    /// is not sampled (its `traceparent`, if any, then passes through untouched).
    pub fn start(headers: &HeaderMap, rate: f64) -> Option<Box<Self>> {
        let (trace_id, parent, flags) = match headers.get(TRACEPARENT).and_then(parse) {
            Some((t, p, f)) => (t, Some(p), f),
            None => (random(), None, u8::from(super::sampled(rate))),
        };
        if flags & 1 == 0 {
            return None;
        }
        Some(Box::new(Self {
            trace_id,
            parent,
            span_id: random(),
            flags,
            start_ns: super::unix_ns(),
            attempts: Vec::new(),
        }))
    }

    /// Starts an attempt's span; the `traceparent` to send the provider.
    pub fn attempt(&mut self) -> HeaderValue {
        let span_id = random();
        self.attempts.push(Attempt {
            span_id,
            start_ns: super::unix_ns(),
            end_ns: 0,
            status: None,
            error: None,
        });
        let v = format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&span_id),
            self.flags
        );
        HeaderValue::from_str(&v).expect("hex is a valid header value")
    }

    /// Ends the last attempt's span with the provider's status or the error.
    pub fn attempt_done(&mut self, outcome: Result<u16, String>) {
        if let Some(a) = self.attempts.last_mut()
            && a.end_ns == 0
        {
            a.end_ns = super::unix_ns();
            match outcome {
                Ok(s) => a.status = Some(s),
                Err(e) => a.error = Some(e),
            }
        }
    }
}

/// A finished request's spans, on their way to the exporter.
#[derive(Clone)]
pub struct Finished {
    pub trace_id: [u8; 16],
    pub parent: Option<[u8; 8]>,
    pub span_id: [u8; 8],
    pub start_ns: u64,
    pub end_ns: u64,
    pub method: &'static str,
    pub host: Option<std::sync::Arc<str>>,
    pub path: String,
    pub status: u16,
    pub error: Option<&'static str>,
    pub policy: Option<std::sync::Arc<str>>,
    pub attempts: Vec<Attempt>,
    pub events: Vec<super::Acted>,
    pub request_id: String,
    /// An MCP call: the server span is named for it (`tools/call create_issue`).
    pub mcp: Option<std::sync::Arc<crate::mcp::Call>>,
}

impl Finished {
    /// Spans it exports as ([`export`]): the server span and one per attempt.
    pub fn spans(&self) -> u64 {
        1 + self.attempts.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent() {
        let v = HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let (t, p, f) = parse(&v).unwrap();
        assert_eq!(hex(&t), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&p), "00f067aa0ba902b7");
        assert_eq!(f, 1);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "garbage",
        ] {
            assert!(parse(&HeaderValue::from_static(bad)).is_none(), "{bad}");
        }
        // A later version may carry more fields.
        assert!(
            parse(&HeaderValue::from_static(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"
            ))
            .is_some()
        );
    }

    #[test]
    fn not_sampled_passes_through() {
        let mut h = HeaderMap::new();
        h.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        );
        assert!(RequestTrace::start(&h, 1.0).is_none());
        let mut t = RequestTrace::start(&HeaderMap::new(), 1.0).unwrap();
        let v = t.attempt();
        let (tid, span, flags) = parse(&v).unwrap();
        assert_eq!(tid, t.trace_id);
        assert_eq!(span, t.attempts[0].span_id);
        assert_eq!(flags, 1);
        assert!(RequestTrace::start(&HeaderMap::new(), 0.0).is_none());
    }
}
