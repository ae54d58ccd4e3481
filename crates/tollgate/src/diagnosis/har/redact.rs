//! Redaction and obfuscation of HAR entries. Safe by default: the built-in secret names,
//! every header or query parameter a credentials remedy injects, and the configured
//! names are replaced by `REDACTED`; and every credential *value* from the config is
//! replaced wherever it appears (a provider echoing a key back in its body is still
//! caught). Obfuscation replaces other values by a keyed hash: HMAC-SHA-256 (RFC 2104)
//! with the installation's key, so equal values stay correlatable while a dictionary of
//! likely values (emails, phone numbers) cannot be hashed to reverse them.

use crate::diagnosis::settings::Obfuscate;
use crate::paths::percent_decode;
use std::borrow::Cow;

pub const REDACTED: &str = "REDACTED";

/// Names redacted whatever the config says.
const BUILT_IN: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// Values shorter than this are not scrubbed as text (they would match everywhere).
pub(super) const MIN_SECRET_LEN: usize = 4;

#[derive(Default)]
pub struct Redactor {
    /// Lower-case names: headers, query parameters, JSON keys.
    names: Vec<String>,
    /// Secret values, longest first.
    values: Vec<String>,
    obfuscate: Option<Obfuscator>,
}

pub struct Obfuscator {
    key: ring::hmac::Key,
    pub settings: Obfuscate,
}

impl Redactor {
    pub fn new(given: &crate::diagnosis::Given<'_>) -> Self {
        let mut names: Vec<String> = BUILT_IN.iter().map(|s| s.to_string()).collect();
        names.extend(given.secret_names.iter().cloned());
        let mut values = given.secret_values.clone();
        let d = given.settings;
        if let Some(c) = &d.har.collector {
            values.extend(
                c.headers
                    .iter()
                    .map(|(_, v)| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            );
        }
        names.extend(d.har.redact.iter().cloned());
        names.sort();
        names.dedup();
        values.retain(|v| v.len() >= MIN_SECRET_LEN);
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        let obfuscate = d.har.obfuscate.clone().map(|settings| Obfuscator {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, settings.key.expose().as_bytes()),
            settings,
        });
        Self {
            names,
            values,
            obfuscate,
        }
    }

    /// Whether values under this header, query or JSON key name are redacted.
    pub fn is_secret(&self, name: &str) -> bool {
        self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// Replaces every secret value in `text` by `REDACTED`.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.scrub_with(text, &[])
    }

    /// [`Redactor::scrub`], with this entry's own secrets too.
    pub fn scrub_with<'a>(&self, text: &'a str, extra: &[String]) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for v in self.values.iter().chain(extra) {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), REDACTED));
            }
        }
        out
    }

    /// The values the client sent under secret names (its `Authorization`, cookies, a
    /// configured header or query parameter): scrubbed from the whole entry, so a
    /// provider echoing them back in a body does not leak them.
    pub fn request_secrets(&self, headers: &http::HeaderMap, url: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (n, v) in headers {
            if !self.is_secret(n.as_str()) {
                continue;
            }
            let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
            if n == http::header::COOKIE || n == http::header::SET_COOKIE {
                for pair in v.split(';') {
                    if let Some((_, val)) = pair.split_once('=') {
                        out.push(val.trim().to_owned());
                    }
                }
            }
            if let Some((_, token)) = v.split_once(' ') {
                out.push(token.trim().to_owned());
            }
            out.push(v);
        }
        if let Some((_, query)) = url.split_once('?') {
            for p in query.split('&') {
                if let Some((n, v)) = p.split_once('=')
                    && self.is_secret(&percent_decode(n).unwrap_or_else(|| n.to_owned()))
                {
                    out.extend(percent_decode(v));
                    out.push(v.to_owned());
                }
            }
        }
        out.retain(|v| v.len() >= MIN_SECRET_LEN);
        out.sort_by_key(|v| std::cmp::Reverse(v.len()));
        out
    }

    pub fn obfuscator(&self) -> Option<&Obfuscator> {
        self.obfuscate.as_ref()
    }

    /// Every secret value of the config, longest first.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether values of this query or form parameter are hashed.
    pub fn query_obfuscated(&self, name: &str) -> bool {
        self.obfuscate
            .as_ref()
            .is_some_and(|o| !o.settings.exclude_query.iter().any(|q| q == name))
    }

    /// Whether values of this header are hashed.
    fn header_obfuscated(&self, name: &str) -> bool {
        self.obfuscate.as_ref().is_some_and(|o| {
            !o.settings
                .exclude_headers
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name))
        })
    }

    #[cfg(test)]
    pub fn with_names(names: &[&str]) -> Self {
        Self {
            names: names.iter().map(|n| n.to_string()).collect(),
            ..Self::default()
        }
    }
}

/// What one entry redacts with: the config's redactor and this entry's own secrets (the
/// client's credentials, values found under secret names), longest first. Values found
/// on the way are added, so the writer scrubs them from the whole entry too.
pub struct Secrets<'a> {
    pub red: &'a Redactor,
    pub own: Vec<String>,
}

impl Secrets<'_> {
    /// `text` with every known secret value replaced by `REDACTED`.
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.red.scrub_with(text, &self.own)
    }

    pub fn found(&mut self, value: String) {
        if value.len() >= MIN_SECRET_LEN && !self.own.contains(&value) {
            self.own.push(value);
            self.own.sort_by_key(|v| std::cmp::Reverse(v.len()));
        }
    }

    /// A value shown obfuscated: scrubbed when it holds a secret (its hash would hide
    /// that it was one), else its keyed hash; `None` when obfuscation is off.
    pub fn hide(&self, value: &str) -> Option<String> {
        let o = self.red.obfuscator()?;
        Some(match self.scrub(value) {
            Cow::Owned(scrubbed) => scrubbed,
            Cow::Borrowed(_) => o.hash(value),
        })
    }

    /// A header value as it goes into an entry.
    pub fn header<'t>(&self, name: &str, value: &'t str) -> Cow<'t, str> {
        if self.red.is_secret(name) {
            return Cow::Borrowed(REDACTED);
        }
        if self.red.header_obfuscated(name) {
            return Cow::Owned(self.hide(value).unwrap_or_default());
        }
        self.scrub(value)
    }

    /// A query parameter value as it goes into an entry.
    pub fn query(&self, name: &str, value: &str) -> String {
        if self.red.is_secret(name) {
            return REDACTED.into();
        }
        if self.red.query_obfuscated(name) {
            return self.hide(value).unwrap_or_default();
        }
        self.scrub(value).into_owned()
    }
}

impl Obfuscator {
    /// `HMAC-SHA-256(key, value)`, first 16 bytes in hex.
    pub fn hash(&self, value: &str) -> String {
        let tag = ring::hmac::sign(&self.key, value.as_bytes());
        tag.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether the JSON leaf at `path` (keys, `*` for array items) is kept as it is.
    pub fn json_excluded(&self, path: &[&str]) -> bool {
        self.settings.exclude_json_paths.iter().any(|p| {
            p.len() == path.len()
                && p.iter()
                    .zip(path)
                    .all(|(a, b)| a == b || (a == "*" && *b == "*"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent() {
        assert_eq!(percent_decode("a%20b+c").as_deref(), Some("a b c"));
        assert_eq!(percent_decode("plain"), None);
        assert_eq!(percent_decode("bad%2"), None);
    }
}
