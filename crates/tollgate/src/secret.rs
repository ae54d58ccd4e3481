//! Secrets: values whose `Debug`, `Display` and serialisation print `MASKED`.

use std::fmt;

/// A secret string. Only [`Secret::expose`] shows the value; logs, `/config` and HAR see `MASKED`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MASKED")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MASKED")
    }
}

impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::fields::masked(&self.0))
    }
}

/// Masks the secret parts of a URL for display: user-info and the query string.
pub fn mask_url(url: &str) -> String {
    use crate::fields::masked;
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{}", masked(q))),
        None => (url, String::new()),
    };
    let shown = match base.split_once("://") {
        Some((scheme, rest)) => {
            // The user-info ends at the last `@` before the path; a password may hold
            // `/` or `#` (a mistyped URL), so an `@` after a `/` still ends it when what
            // precedes it has a `:` (user:password).
            let end = rest.find('/').unwrap_or(rest.len());
            let at = rest[..end]
                .rfind('@')
                .or_else(|| rest.rfind('@').filter(|&at| rest[..at].contains(':')));
            match at {
                Some(at) => {
                    let (info, host) = (&rest[..at], &rest[at + 1..]);
                    format!("{scheme}://{}@{host}", masked(info))
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    shown + &query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_everywhere() {
        let s = Secret::new("hunter2".into());
        assert_eq!(format!("{s:?} {s}"), "MASKED MASKED");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"MASKED\"");
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(
            mask_url("https://u:p@api.x.com/v1?key=abc"),
            "https://MASKED@api.x.com/v1?MASKED"
        );
        assert_eq!(mask_url("https://api.x.com/v1"), "https://api.x.com/v1");
    }
}
