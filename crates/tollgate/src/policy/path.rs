//! A request's path as origin servers route it, for matching policies and recognising LLM
//! calls: percent-encoded unreserved characters decoded (RFC 3986 §6.2.2.2: `%63` is `c`
//! to Python's ASGI servers and Go's `net/http` alike; dot segments are removed before
//! this). What servers disagree on — an encoded slash (`%2F`), `;` parameters (RFC 3986
//! §3.3), the case of a path — is ambiguous: on a host with an LLM policy, a spelling that
//! would only be recognised or matched once loosened is refused rather than passed free.
//! The request itself is forwarded as it was written.

use std::borrow::Cow;

/// `path` with its percent-encoded unreserved characters (ALPHA, DIGIT, `-._~`)
/// decoded; borrowed when it has none (the common case: one `memchr`).
pub fn normalized(path: &str) -> Cow<'_, str> {
    let b = path.as_bytes();
    let Some(first) = memchr::memchr(b'%', b) else {
        return Cow::Borrowed(path);
    };
    let mut out = String::with_capacity(path.len());
    out.push_str(&path[..first]);
    let mut i = first;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(c) = decoded(b.get(i + 1..i + 3))
        {
            out.push(c as char);
            i += 3;
            continue;
        }
        // A byte that starts no decoded escape: copied as is, whole characters at a time.
        let next = memchr::memchr(b'%', &b[i + 1..]).map_or(b.len(), |j| i + 1 + j);
        out.push_str(&path[i..next]);
        i = next;
    }
    match out.len() == path.len() {
        true => Cow::Borrowed(path),
        false => Cow::Owned(out),
    }
}

/// The unreserved character `%XX` stands for.
fn decoded(hex: Option<&[u8]>) -> Option<u8> {
    let hex = std::str::from_utf8(hex?).ok()?;
    let c = u8::from_str_radix(hex, 16).ok()?;
    unreserved(c).then_some(c)
}

/// RFC 3986 §2.3: ALPHA, DIGIT, `-._~`.
fn unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-._~".contains(&c)
}

/// `s` with every byte but the unreserved ones percent-encoded (RFC 3986 §2.1): safe as
/// a query parameter's value or a path segment.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match unreserved(b) {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect()
}

/// `path` as the loosest origin server would route it — encoded slashes decoded, `;`
/// parameters dropped from each segment, lower case — when that differs from `path`
/// (`None`: nothing ambiguous in it). Called only on hosts that have an LLM policy.
pub fn loosened(path: &str) -> Option<String> {
    let b = path.as_bytes();
    // One pass over the bytes (every request on a host with an LLM policy comes here):
    // `%2F` is caught by its capital, `%2f` by its `%`.
    let ambiguous = b.iter().enumerate().any(|(i, &c)| {
        c == b';' || c.is_ascii_uppercase() || (c == b'%' && b[i + 1..].starts_with(b"2f"))
    });
    if !ambiguous {
        return None;
    }
    let lower = path.to_ascii_lowercase().replace("%2f", "/");
    let out = lower
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_escapes_are_decoded_and_the_rest_kept() {
        assert_eq!(normalized("/v1/chat/%63ompletions"), "/v1/chat/completions");
        assert_eq!(normalized("/v1/%7Euser/%41%2d"), "/v1/~user/A-");
        assert_eq!(
            normalized("/v1/chat%2Fcompletions"),
            "/v1/chat%2Fcompletions"
        );
        assert_eq!(normalized("/a%20b/%zz/%"), "/a%20b/%zz/%");
        assert_eq!(normalized("/caf%C3%A9"), "/caf%C3%A9");
        assert!(matches!(
            normalized("/v1/chat/completions"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn what_servers_disagree_on_is_loosened() {
        assert_eq!(
            loosened("/v1/chat%2Fcompletions").as_deref(),
            Some("/v1/chat/completions")
        );
        assert_eq!(
            loosened("/v1/chat/completions;a=b").as_deref(),
            Some("/v1/chat/completions")
        );
        assert_eq!(
            loosened("/V1/chat/Completions").as_deref(),
            Some("/v1/chat/completions")
        );
        assert_eq!(
            loosened("/v1/chat%2fcompletions").as_deref(),
            Some("/v1/chat/completions")
        );
        assert_eq!(loosened("/v1/chat/completions"), None);
        assert_eq!(loosened("/v1/chat/completions/"), None);
        // A `%` that is no encoded slash, at the end or before other digits.
        assert_eq!(loosened("/v1/a%20b%2"), None);
        assert_eq!(loosened("/v1/a%"), None);
    }
}
