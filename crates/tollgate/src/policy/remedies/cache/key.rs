//! Cache keys: method, host, path, the query with its parameters sorted, the chosen
//! request headers, and optionally a SHA-256 of the request body (a JSON body is
//! canonicalised first: object keys sorted, no whitespace, so neither changes the key).
//! Built from the request as the application sent it (after request transforms, before
//! credentials), so no secret tollgate injects is ever part of a key.

use http::{HeaderMap, HeaderName, Method, Uri};
use std::fmt::Write;

pub fn key(
    method: &Method,
    authority: &str,
    uri: &Uri,
    headers: &HeaderMap,
    key_headers: &[HeaderName],
    body: Option<&[u8]>,
) -> String {
    let mut k = String::with_capacity(128);
    let _ = write!(k, "{method} {authority}{}", uri.path());
    if let Some(q) = uri.query() {
        let mut pairs: Vec<&str> = q.split('&').filter(|p| !p.is_empty()).collect();
        pairs.sort_unstable();
        k.push('?');
        k.push_str(&pairs.join("&"));
    }
    for name in key_headers {
        let _ = write!(k, "\n{name}:");
        for v in headers.get_all(name) {
            k.push_str(&String::from_utf8_lossy(v.as_bytes()));
            k.push(',');
        }
    }
    if let Some(b) = body {
        let digest = match serde_json::from_slice::<serde_json::Value>(b) {
            // serde_json's maps are sorted (no `preserve_order`), and `to_vec` writes no
            // whitespace: the canonical form.
            Ok(v) => ring::digest::digest(
                &ring::digest::SHA256,
                &serde_json::to_vec(&v).unwrap_or_default(),
            ),
            Err(_) => ring::digest::digest(&ring::digest::SHA256, b),
        };
        k.push_str("\nbody:");
        for byte in digest.as_ref() {
            let _ = write!(k, "{byte:02x}");
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_keys() {
        let h = HeaderMap::new();
        let u1: Uri = "/s?b=2&a=1".parse().unwrap();
        let u2: Uri = "/s?a=1&b=2".parse().unwrap();
        let k = |u: &Uri, b: &[u8]| key(&Method::POST, "api", u, &h, &[], Some(b));
        assert_eq!(
            k(&u1, br#"{"model": "x", "messages": [1, 2]}"#),
            k(&u2, br#"{"messages":[1,2],"model":"x"}"#)
        );
        assert_ne!(k(&u1, br#"{"model":"x"}"#), k(&u1, br#"{"model":"y"}"#));
    }
}
