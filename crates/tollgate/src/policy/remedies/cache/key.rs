//! Cache keys: method, host, path, the query with its parameters sorted, the chosen
//! request headers, and optionally a SHA-256 of the request body (a JSON body is
//! canonicalised first: object keys sorted, no whitespace, so neither changes the key).
//! Built from the request as the application sent it (after request transforms, before
//! credentials), so no secret tollgate injects is ever part of a key.
//!
//! A client's own `Authorization` puts a SHA-256 of it in the key: a gateway serves
//! many callers, and one caller's answer (its repositories, its customers) must not be
//! served to another that sent another credential. Callers sending the same credential,
//! or none, share entries. (`authorization` says whether the request carries one, from
//! [`super::control::Carries`]: the field is looked up only then.)

use http::{HeaderMap, HeaderName, Method, Uri};
use std::fmt::Write;

pub fn key(
    method: &Method,
    authority: &str,
    uri: &Uri,
    headers: &HeaderMap,
    key_headers: &[HeaderName],
    authorization: bool,
    body: Option<&[u8]>,
) -> String {
    let mut k = String::with_capacity(128);
    for part in [method.as_str(), " ", authority, uri.path()] {
        k.push_str(part);
    }
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
    if authorization {
        let callers = headers.get_all(http::header::AUTHORIZATION);
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for v in callers {
            ctx.update(v.as_bytes());
            ctx.update(b"\n");
        }
        k.push_str("\ncaller:");
        for byte in &ctx.finish().as_ref()[..16] {
            let _ = write!(k, "{byte:02x}");
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
        let k = |u: &Uri, b: &[u8]| key(&Method::POST, "api", u, &h, &[], false, Some(b));
        assert_eq!(
            k(&u1, br#"{"model": "x", "messages": [1, 2]}"#),
            k(&u2, br#"{"messages":[1,2],"model":"x"}"#)
        );
        assert_ne!(k(&u1, br#"{"model":"x"}"#), k(&u1, br#"{"model":"y"}"#));
    }

    #[test]
    fn each_callers_credential_has_its_own_entries() {
        let u: Uri = "/user/repos".parse().unwrap();
        let with = |auth: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(a) = auth {
                h.insert(http::header::AUTHORIZATION, a.parse().unwrap());
            }
            let carries = super::super::control::Carries::of(&h);
            key(
                &Method::GET,
                "api",
                &u,
                &h,
                &[],
                carries.authorization,
                None,
            )
        };
        let alice = with(Some("Bearer ghp_alice"));
        assert_ne!(alice, with(Some("Bearer ghp_bob")));
        assert_ne!(alice, with(None));
        assert_eq!(alice, with(Some("Bearer ghp_alice")));
        assert!(
            !alice.contains("ghp_alice"),
            "the credential itself is not in the key"
        );
    }
}
