//! Header rules of a proxy: hop-by-hop removal (RFC 9110 §7.6.1) and tollgate's own
//! `x-tollgate-*` control headers, which never leave tollgate.

use http::header::{
    CONNECTION, CONTENT_LENGTH, EXPECT, HOST, HeaderName, PROXY_AUTHORIZATION, TE,
    TRANSFER_ENCODING, UPGRADE, VIA,
};
use http::{HeaderMap, HeaderValue};

pub const X_TOLLGATE_HOST: HeaderName = HeaderName::from_static("x-tollgate-host");
pub const X_TOLLGATE_SCHEME: HeaderName = HeaderName::from_static("x-tollgate-scheme");
pub const X_TOLLGATE_REQUEST_ID: HeaderName = HeaderName::from_static("x-tollgate-request-id");
pub const X_TOLLGATE_ERROR: HeaderName = HeaderName::from_static("x-tollgate-error");
/// On every response tollgate made up (errors, mocks): `true`.
pub const X_TOLLGATE_GENERATED: HeaderName = HeaderName::from_static("x-tollgate-generated");
/// `hit`, `miss` or `bypass` on responses of a policy with a cache.
pub const X_TOLLGATE_CACHE: HeaderName = HeaderName::from_static("x-tollgate-cache");
/// Attempts after the first, on responses of a policy that retried.
pub const X_TOLLGATE_RETRIES: HeaderName = HeaderName::from_static("x-tollgate-retries");
/// `x-should-retry: false` (honoured by the OpenAI and Anthropic SDKs) on an answer
/// tollgate already retried or declined to retry: the SDK's own retries would multiply
/// tollgate's (4 attempts × 3 became 12 provider calls).
pub const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const CONTROL_PREFIX: &str = "x-tollgate-";

fn is_hop_by_hop(n: &HeaderName) -> bool {
    n == CONNECTION
        || n == KEEP_ALIVE
        || n == PROXY_CONNECTION
        || n == TRANSFER_ENCODING
        || n == UPGRADE
        || n == TE
}

/// Removes every field whose name `drop` selects, keeping the others in their order.
/// `HeaderMap::remove` moves the last field into the removed one's slot, so a provider
/// would receive `x-e, x-a, x-d` as `x-d, x-e, x-a`: the README promises end-to-end
/// headers in order.
pub fn remove_in_order(h: &mut HeaderMap, drop: impl Fn(&HeaderName) -> bool) {
    if !h.keys().any(&drop) {
        return;
    }
    let old = std::mem::take(h);
    h.reserve(old.len());
    let mut name: Option<HeaderName> = None;
    // A name is given with its first value only; the values after it share it.
    for (n, v) in old {
        if let Some(n) = n {
            name = Some(n);
        }
        if let Some(n) = &name
            && !drop(n)
        {
            h.append(n.clone(), v);
        }
    }
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1): `Connection` and every header it
/// names, plus `Keep-Alive`, `Proxy-Connection`, `TE`, `Transfer-Encoding` and `Upgrade`.
/// `TE: trailers` is kept: it is the one TE value HTTP/2 allows end to end
/// (RFC 9113 §8.2.2) and gRPC needs it. The other fields keep their order.
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    strip(h, false);
}

/// What an upstream request loses, in one order-keeping pass: hop-by-hop headers, and
/// what is addressed to tollgate itself: every `x-tollgate-*` header and
/// `Proxy-Authorization` (credentials for the proxy, RFC 9110 §11.7.2).
pub fn strip_for_upstream(h: &mut HeaderMap) {
    strip(h, true);
}

fn strip(h: &mut HeaderMap, control: bool) {
    // Fast path: cheap name comparisons; most messages carry none of these.
    let hop = h.keys().any(is_hop_by_hop);
    let control = control && h.keys().any(is_control);
    strip_found(h, hop, control);
}

/// [`strip`] once it is known whether hop-by-hop (`hop`) and control (`control`) fields
/// are there.
fn strip_found(h: &mut HeaderMap, hop: bool, control: bool) {
    if !(hop || control) {
        return;
    }
    // Names the Connection field lists (lower-cased, as header names are); `close` and
    // `keep-alive` name no field, and `te` is judged below.
    let named: Vec<String> = connection_tokens(h)
        .filter(|t| {
            !t.eq_ignore_ascii_case("close")
                && !t.eq_ignore_ascii_case("keep-alive")
                && !t.eq_ignore_ascii_case("te")
        })
        .map(str::to_ascii_lowercase)
        .collect();
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and a proxy must remove
    // the Content-Length of such a message: left in, it would frame the relayed body and
    // silently cut it short.
    let chunked = h.contains_key(TRANSFER_ENCODING);
    let te_dropped = h
        .get(TE)
        .is_some_and(|te| !te.as_bytes().eq_ignore_ascii_case(b"trailers"));
    remove_in_order(h, |n| {
        (hop && ((is_hop_by_hop(n) && (n != TE || te_dropped))
            || (chunked && n == CONTENT_LENGTH)
            || named.iter().any(|t| t == n.as_str())))
            || (control && is_control(n))
    });
}

/// The tokens of one `Connection` field line, a comma-separated list (RFC 9110 §5.6.1);
/// empty elements are skipped.
fn tokens(v: &HeaderValue) -> impl Iterator<Item = &str> {
    v.to_str()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Whether a message says its connection closes after it: a `close` token in any
/// `Connection` field line (RFC 9112 §9.6).
pub fn says_close(h: &HeaderMap) -> bool {
    connection_tokens(h).any(|t| t.eq_ignore_ascii_case("close"))
}

/// Every token of every `Connection` field line.
pub fn connection_tokens(h: &HeaderMap) -> impl Iterator<Item = &str> {
    h.get_all(CONNECTION).iter().flat_map(tokens)
}

fn is_control(n: &HeaderName) -> bool {
    n == PROXY_AUTHORIZATION || n.as_str().starts_with(CONTROL_PREFIX)
}

/// What one pass over a request's header fields found: the header section's size as the
/// client sent it (approximately: names, values and `": "` plus CRLF per field), and which
/// of the fields the request's phases read are there at all. A phase looks its field up
/// (hashing the name) only when the pass saw it: most requests carry none of them, and a
/// pass over a handful of fields costs less than one lookup.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub size: usize,
    /// `Host` field lines (counted up to 255).
    pub hosts: u8,
    pub via: bool,
    pub upgrade: bool,
    pub expect: bool,
    /// A hop-by-hop field ([`strip_hop_by_hop`]'s list).
    pub hop: bool,
    /// A field addressed to tollgate: `x-tollgate-*` or `Proxy-Authorization`.
    pub control: bool,
}

impl Seen {
    pub fn of(h: &HeaderMap) -> Self {
        let mut s = Self::default();
        // Every field line, repeated names included (a `&HeaderMap` yields each value).
        for (n, v) in h {
            s.size += n.as_str().len() + v.len() + 4;
            if n == HOST {
                s.hosts = s.hosts.saturating_add(1);
            } else if n == VIA {
                s.via = true;
            } else if n == EXPECT {
                s.expect = true;
            } else if is_hop_by_hop(n) {
                s.hop = true;
                s.upgrade |= n == UPGRADE;
            } else if is_control(n) {
                s.control = true;
            }
        }
        s
    }

    /// [`strip_for_upstream`] on the fields this pass looked at.
    pub fn strip_for_upstream(&self, h: &mut HeaderMap) {
        strip_found(h, self.hop, self.control);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            CONNECTION,
            HeaderValue::from_static("keep-alive, X-Private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(TE, HeaderValue::from_static("gzip"));
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-kept", HeaderValue::from_static("yes"));
        h.append("x-kept", HeaderValue::from_static("twice"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h.get_all("x-kept").iter().count(), 2);
        let mut h = HeaderMap::new();
        h.insert(TE, HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut h);
        assert!(h.contains_key(TE));
    }

    #[test]
    fn every_connection_field_line_counts() {
        // RFC 9110 §5.3: several field lines are one comma-separated list.
        let mut h = HeaderMap::new();
        h.append(CONNECTION, HeaderValue::from_static("close"));
        h.append(CONNECTION, HeaderValue::from_static("X-One , ,x-two"));
        h.append(CONNECTION, HeaderValue::from_static("TE"));
        for n in ["x-one", "x-two", "x-three"] {
            h.insert(n, HeaderValue::from_static("v"));
        }
        h.insert(TE, HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["te", "x-three"], "{h:?}");
    }

    #[test]
    fn close_is_found_in_any_connection_line() {
        let mut h = HeaderMap::new();
        assert!(!says_close(&h));
        h.append(CONNECTION, HeaderValue::from_static("keep-alive"));
        assert!(!says_close(&h));
        h.append(CONNECTION, HeaderValue::from_static("x-one, Close"));
        assert!(says_close(&h));
    }

    #[test]
    fn one_pass_sees_what_the_lookups_would() {
        let plain = [("host", "a"), ("accept", "*/*"), ("user-agent", "x")];
        let mut h = HeaderMap::new();
        for (n, v) in plain {
            h.append(n, HeaderValue::from_static(v));
        }
        let s = Seen::of(&h);
        assert_eq!(
            s,
            Seen {
                size: h.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum(),
                hosts: 1,
                ..Seen::default()
            }
        );
        h.append("host", HeaderValue::from_static("b"));
        h.append("via", HeaderValue::from_static("1.1 x"));
        h.append("expect", HeaderValue::from_static("100-continue"));
        h.append("upgrade", HeaderValue::from_static("websocket"));
        let s = Seen::of(&h);
        assert_eq!(s.hosts, 2);
        assert!(
            s.via && s.expect && s.upgrade && s.hop && !s.control,
            "{s:?}"
        );
        for control in [
            "x-tollgate-host",
            "X-Tollgate-Request-Id",
            "proxy-authorization",
        ] {
            let mut h = HeaderMap::new();
            h.append(control, HeaderValue::from_static("v"));
            let s = Seen::of(&h);
            assert!(s.control && !s.hop, "{control}: {s:?}");
        }
        let mut h = HeaderMap::new();
        h.append("x-tollgatekeeper", HeaderValue::from_static("v"));
        h.append("te", HeaderValue::from_static("trailers"));
        let s = Seen::of(&h);
        assert!(!s.control && s.hop && !s.upgrade, "{s:?}");
    }

    #[test]
    fn control_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(X_TOLLGATE_HOST, HeaderValue::from_static("a"));
        h.insert("x-tollgate-anything", HeaderValue::from_static("a"));
        h.insert(PROXY_AUTHORIZATION, HeaderValue::from_static("Basic x"));
        h.insert("x-tollgatekeeper", HeaderValue::from_static("stays"));
        strip_for_upstream(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-tollgatekeeper"));
    }
}
