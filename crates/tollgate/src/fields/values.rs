//! Value checks shared by policy validation: sizes, shares, header names and values, methods.

use super::Errors;
use super::units::Percent;
use http::{HeaderName, HeaderValue, Method};
use std::collections::BTreeMap;

pub const MAX_COUNT: u64 = 1_000_000_000_000;

impl Errors {
    pub fn fail(&mut self, path: &str, message: String) {
        self.check::<()>(path, Err(message));
    }

    /// `"20%"` as a fraction, for a key that takes a share beside words (a field that
    /// takes only a share is a [`Percent`]).
    pub fn percent(&mut self, path: &str, s: &str) -> f64 {
        self.check(path, Percent::parse(s))
            .map_or(0.0, |p| p.fraction())
    }

    /// A request header name a remedy reads (never an `x-tollgate-*` control header,
    /// which is removed before remedies run).
    pub fn read_header(&mut self, path: &str, s: &str) -> Option<HeaderName> {
        let n = self.header_name(path, s)?;
        if n.as_str().starts_with("x-tollgate-") {
            self.fail(path, format!("`{s}`: x-tollgate-* headers are removed before policies run; choose another header"));
            return None;
        }
        Some(n)
    }

    pub fn header_name(&mut self, path: &str, s: &str) -> Option<HeaderName> {
        self.check(
            path,
            HeaderName::from_bytes(s.trim().to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("`{s}` is not a header name")),
        )
    }

    /// A header value, `${ENV}` substituted; secrets (substituted values) marked sensitive.
    pub fn header_value(&mut self, path: &str, written: &str) -> Option<HeaderValue> {
        let v = self.env_checked(path, written, |v| {
            HeaderValue::from_str(v).map_err(|_| format!("`{v}` is not a valid header value"))
        })?;
        let mut v = v;
        v.set_sensitive(written.contains("${"));
        Some(v)
    }

    pub fn headers<V: std::ops::Deref<Target = str>>(
        &mut self,
        path: &str,
        map: &BTreeMap<String, V>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        map.iter()
            .filter_map(|(k, v)| {
                let p = format!("{path}.{k}");
                Some((self.header_name(&p, k)?, self.header_value(&p, v)?))
            })
            .collect()
    }

    pub fn methods(&mut self, path: &str, list: &[String]) -> Vec<Method> {
        list.iter()
            .enumerate()
            .filter_map(|(j, m)| self.check(&format!("{path}[{j}]"), method(m)))
            .collect()
    }
}

/// The methods a config may name: RFC 9110's and PATCH (RFC 5789). Any token is a valid
/// method on the wire, but one written in a config that is none of these (`GETT`) is a
/// typo that would silently match nothing.
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// A method as a config writes it, any case.
pub fn method(m: &str) -> Result<Method, String> {
    let upper = m.to_ascii_uppercase();
    if !METHODS.contains(&upper.as_str()) {
        return Err(format!(
            "`{m}` is not an HTTP method; write one of {}",
            METHODS.join(", ")
        ));
    }
    Method::from_bytes(upper.as_bytes()).map_err(|_| format!("`{m}` is not an HTTP method"))
}
