//! Path templates learned from traffic: segments that look like identifiers (numbers,
//! UUIDs, hex strings, long tokens) become `{id}`; the rest stay literal until a path
//! position has too many distinct values (see [`super::Discovered`]).

/// Whether a path segment looks like an identifier rather than a name.
pub fn id_like(seg: &str) -> bool {
    let b = seg.as_bytes();
    // A number (`42`, `-1`, `3.14`).
    if b.iter()
        .all(|c| c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && b.iter().any(u8::is_ascii_digit)
    {
        return true;
    }
    // Every other kind below is 8 characters or more: a name (`users`, `v1`) is settled
    // at its first letter.
    if b.len() < 8 {
        return false;
    }
    // A UUID (RFC 9562 text form).
    if b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
    {
        return true;
    }
    // A hex string (commit SHA, object id): 8+ hex digits with at least one digit.
    if b.len() >= 8 && b.iter().all(u8::is_ascii_hexdigit) && b.iter().any(u8::is_ascii_digit) {
        return true;
    }
    // A long token (`cus_9s6XKzkNRiz8i3`, base64 ids): 16+ characters mixing letters and
    // digits, or any segment of 32+ characters.
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    let letters = b.iter().filter(|c| c.is_ascii_alphabetic()).count();
    (b.len() >= 16 && digits > 0 && letters > 0 && digits + letters + 2 >= b.len()) || b.len() >= 32
}

/// The path's segments as a template reads them: identifier-like ones as `{id}`.
pub(super) fn pieces(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| if id_like(s) { "{id}" } else { s })
}

/// The path's segments, with identifier-like ones as `{id}`.
pub fn segments(path: &str) -> Vec<String> {
    pieces(path).map(str::to_owned).collect()
}

/// `join(&segments(path))` appended to `out`, with no allocation of its own (the
/// observer does this per matched request).
pub fn push_template(out: &mut String, path: &str) {
    push_joined(out, pieces(path));
}

pub fn join(segments: &[String]) -> String {
    let mut out = String::new();
    push_joined(&mut out, segments.iter().map(String::as_str));
    out
}

/// `/a/b` for the pieces `a`, `b`; `/` for none.
pub(super) fn push_joined<'a>(out: &mut String, pieces: impl Iterator<Item = &'a str>) {
    let start = out.len();
    for s in pieces {
        out.push('/');
        out.push_str(s);
    }
    if out.len() == start {
        out.push('/');
    }
}

/// Which path positions are parameters in `template` (`{name}` segments), by name.
pub fn params(template: &str) -> Vec<Option<&str>> {
    template
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_written_in_place_is_the_joined_segments() {
        for path in [
            "/",
            "",
            "/repos/42/pulls",
            "//a//b/",
            "/v1/customers/cus_9s6XKzkNRiz8i3",
        ] {
            let mut out = String::from("GET h ");
            push_template(&mut out, path);
            assert_eq!(out, format!("GET h {}", join(&segments(path))), "{path}");
        }
    }

    #[test]
    fn ids() {
        for id in [
            "42",
            "0",
            "-1",
            "3.14",
            // 32 characters or more, whatever they are.
            "--------------------------------",
            "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            "deadbeef12",
            "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3",
            "cus_9s6XKzkNRiz8i3",
            "ch_3MmlLrLkdIwHu7ix0snN0B15",
        ] {
            assert!(id_like(id), "{id}");
        }
        for name in [
            "users",
            "v1",
            "repos",
            "issues",
            "chat",
            "completions",
            "deadbeef",
            "rust-lang",
            "api.github.com",
            "",
            "---",
            // Hex with a digit, but under 8 characters.
            "abc1234",
        ] {
            assert!(!id_like(name), "{name}");
        }
    }

    #[test]
    fn learned() {
        assert_eq!(
            join(&segments("/v1/customers/cus_9s6XKzkNRiz8i3/charges")),
            "/v1/customers/{id}/charges"
        );
        assert_eq!(
            join(&segments("/repos/rust-lang/rust/issues/123")),
            "/repos/rust-lang/rust/issues/{id}"
        );
        assert_eq!(join(&segments("/")), "/");
        assert_eq!(params("/users/{user}/x"), [None, Some("user"), None]);
    }
}
