//! Request paths: dot segments (`.`, `..`, and their percent-encoded spellings) resolved
//! before routing, per RFC 3986 §5.2.4.

use http::Uri;
use http::uri::PathAndQuery;

/// Whether a segment is `.` (1) or `..` (2), `%2e` counting as a dot (RFC 3986 §6.2.2.2:
/// percent-encoded unreserved characters are equivalent to the characters, and servers
/// decode them).
fn dots(seg: &str) -> Option<u8> {
    let b = seg.as_bytes();
    let mut n = 0u8;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            i += 1;
        } else if b[i] == b'%'
            && b.get(i + 1) == Some(&b'2')
            && matches!(b.get(i + 2), Some(b'e' | b'E'))
        {
            i += 3;
        } else {
            return None;
        }
        n += 1;
        if n > 2 {
            return None;
        }
    }
    (n > 0).then_some(n)
}

/// Whether the path may hold a dot segment: a `.` or an encoded one right after a `/`.
/// One scan of the path; the common path has none.
#[inline]
fn may_have_dot_segment(path: &str) -> bool {
    let b = path.as_bytes();
    b.windows(2)
        .any(|w| w[0] == b'/' && (w[1] == b'.' || w[1] == b'%'))
}

/// The path (and query) with dot segments removed, or `None` when there are none (the
/// common case: nothing allocated). A path never climbs above the root: `/a/../../b` is
/// `/b`.
pub fn without_dot_segments(uri: &Uri) -> Option<PathAndQuery> {
    let path = uri.path();
    if !may_have_dot_segment(path) || !path.starts_with('/') {
        return None;
    }
    let segs: Vec<&str> = path[1..].split('/').collect();
    if !segs.iter().any(|s| dots(s).is_some()) {
        return None;
    }
    let last = segs.len() - 1;
    let mut out: Vec<&str> = Vec::with_capacity(segs.len());
    for (i, seg) in segs.iter().enumerate() {
        match dots(seg) {
            None => out.push(seg),
            Some(n) => {
                if n == 2 {
                    out.pop();
                }
                // A dot segment at the end leaves the path ending in `/` (RFC 3986 §5.2.4).
                if i == last {
                    out.push("");
                }
            }
        }
    }
    let mut s = String::with_capacity(path.len() + 1);
    for seg in &out {
        s.push('/');
        s.push_str(seg);
    }
    if s.is_empty() {
        s.push('/');
    }
    if let Some(q) = uri.query() {
        s.push('?');
        s.push_str(q);
    }
    PathAndQuery::try_from(s).ok()
}

/// `%41` → `A`; `None` when nothing was encoded or the result is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') && !s.contains('+') {
        return None;
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &str) -> String {
        let uri: Uri = p.parse().unwrap();
        match without_dot_segments(&uri) {
            Some(pq) => pq.to_string(),
            None => p.to_owned(),
        }
    }

    #[test]
    fn dot_segments_resolve_per_rfc_3986() {
        for (input, want) in [
            ("/svc/../../admin", "/admin"),
            ("/a/b/c/./../../g", "/a/g"),
            ("/a/b/..", "/a/"),
            ("/a/./", "/a/"),
            ("/..", "/"),
            ("/.", "/"),
            ("/a//../b", "/a/b"),
            ("/svc/%2e%2e/%2E%2e/admin?x=1", "/admin?x=1"),
            ("/svc/.%2e/x", "/x"),
            ("/a/.hidden/b", "/a/.hidden/b"),
            ("/a/.../b", "/a/.../b"),
            ("/file.json", "/file.json"),
            ("/a/%2fb/..", "/a/"),
            ("/v1/items?path=../x", "/v1/items?path=../x"),
        ] {
            assert_eq!(norm(input), want, "{input}");
        }
    }
}
