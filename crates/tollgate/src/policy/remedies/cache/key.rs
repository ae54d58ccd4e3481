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
    if let Some(digest) = body {
        k.push_str("\nbody:");
        for byte in digest {
            let _ = write!(k, "{byte:02x}");
        }
    }
    k
}

/// Members of a recognised LLM call's body that never change its answer: who asks
/// (`user`, OpenAI's `safety_identifier`) and labels for the caller's own bookkeeping
/// (`metadata`). Left out of the key, so callers asking the same share an entry.
pub const LLM_IGNORED: &[&str] = &["user", "safety_identifier", "metadata"];

/// How a request body is part of the key: `Some(digest)`, or `None` when the call must
/// not be cached (a sampled LLM call, and the policy does not cache those).
///
/// A JSON body is canonicalised first (object keys sorted, no whitespace, fractional
/// numbers spelled one way: [`canonical_numbers`]), with `ignore`'s top-level members left out (and [`LLM_IGNORED`] for an LLM
/// call); another body is hashed as it is.
pub fn body_digest(body: &[u8], ignore: &[String], llm: bool, sampled: bool) -> Option<[u8; 32]> {
    let sha = |b: &[u8]| {
        let mut out = [0; 32];
        out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, b).as_ref());
        out
    };
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Some(sha(body));
    };
    if llm && !sampled && !deterministic(&v) {
        return None;
    }
    if let Some(o) = v.as_object_mut() {
        for name in ignore
            .iter()
            .map(String::as_str)
            .chain(if llm { LLM_IGNORED } else { &[] }.iter().copied())
        {
            o.remove(name);
        }
    }
    canonical_numbers(&mut v);
    // serde_json's maps are sorted (no `preserve_order`), and `to_vec` writes no
    // whitespace: the canonical form.
    Some(sha(&serde_json::to_vec(&v).unwrap_or_default()))
}

/// Numbers with a fraction or an exponent spelled one way: as the shortest text of the
/// double they read as (`0.70`, `0.7` and `7e-1` are `0.7`; `1.00` is `1.0`), which is
/// the value a provider reads. Integers are left as written (`1` and `1.0` stay apart:
/// a typed field may take one and refuse the other), and so is a number past a double's
/// range. (serde_json keeps a number's text here: `arbitrary_precision`, for fidelity.)
fn canonical_numbers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) => {
            let text = n.to_string();
            if text.contains(['.', 'e', 'E'])
                && let Ok(f) = text.parse::<f64>()
                && let Some(c) = serde_json::Number::from_f64(f)
            {
                *n = c;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(canonical_numbers),
        serde_json::Value::Object(o) => o.values_mut().for_each(canonical_numbers),
        _ => {}
    }
}

/// Whether an LLM call asks for its most likely answer: `temperature` 0 (top level, or
/// Gemini's `generationConfig.temperature`). Unset is the provider's default, 1 for
/// OpenAI, Anthropic and Gemini: sampled, a different answer each time.
fn deterministic(v: &serde_json::Value) -> bool {
    let t = v
        .get("temperature")
        .or_else(|| v.get("generationConfig")?.get("temperature"));
    t.and_then(serde_json::Value::as_f64) == Some(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_keys() {
        let h = HeaderMap::new();
        let u1: Uri = "/s?b=2&a=1".parse().unwrap();
        let u2: Uri = "/s?a=1&b=2".parse().unwrap();
        let k = |u: &Uri, b: &[u8]| {
            let d = body_digest(b, &[], false, false).unwrap();
            key(&Method::POST, "api", u, &h, &[], false, Some(&d))
        };
        assert_eq!(
            k(&u1, br#"{"model": "x", "messages": [1, 2]}"#),
            k(&u2, br#"{"messages":[1,2],"model":"x"}"#)
        );
        assert_ne!(k(&u1, br#"{"model":"x"}"#), k(&u1, br#"{"model":"y"}"#));
        // A fractional number is the value it reads as, however spelled.
        let t = |b: &str| body_digest(b.as_bytes(), &[], false, false).unwrap();
        let point7 = t(r#"{"t":0.7,"n":[1.5]}"#);
        for same in [
            r#"{"t":0.70,"n":[1.50]}"#,
            r#"{"t":7e-1,"n":[15E-1]}"#,
            r#"{"n":[1.5000], "t":0.700}"#,
        ] {
            assert_eq!(t(same), point7, "{same}");
        }
        assert_ne!(t(r#"{"t":0.71,"n":[1.5]}"#), point7);
        assert_eq!(t(r#"{"m":1.00}"#), t(r#"{"m":1.0}"#));
        // Integers as written: `1` and `1.0` differ for a typed field; so do big ones a
        // double could not tell apart.
        assert_ne!(t(r#"{"m":1}"#), t(r#"{"m":1.0}"#));
        assert_ne!(
            t(r#"{"seed":9007199254740993}"#),
            t(r#"{"seed":9007199254740992}"#)
        );
        // Past a double's range: kept as written.
        assert_ne!(t(r#"{"x":1e400}"#), t(r#"{"x":2e400}"#));
    }

    #[test]
    fn llm_calls_leave_out_who_asks_and_are_cached_only_at_temperature_0() {
        let d = |b: &str, sampled| body_digest(b.as_bytes(), &["trace".into()], true, sampled);
        let asked = d(r#"{"model":"m","temperature":0,"messages":[1]}"#, false).unwrap();
        for same in [
            r#"{"messages":[1],"model":"m","temperature":0,"user":"u-1"}"#,
            r#"{"model":"m","temperature":0,"messages":[1],"metadata":{"run":7},"trace":"t"}"#,
        ] {
            assert_eq!(d(same, false), Some(asked), "{same}");
        }
        assert_ne!(
            d(r#"{"model":"m","temperature":0,"messages":[2]}"#, false),
            Some(asked)
        );
        // Sampled (or unset: the providers' default is 1): not cached unless the policy says.
        for sampled in [
            r#"{"model":"m","messages":[1]}"#,
            r#"{"model":"m","temperature":0.7,"messages":[1]}"#,
        ] {
            assert_eq!(d(sampled, false), None, "{sampled}");
            assert!(d(sampled, true).is_some());
        }
        let gemini = r#"{"contents":[1],"generationConfig":{"temperature":0}}"#;
        assert!(d(gemini, false).is_some());
        // Not an LLM call: `user` is part of what is asked.
        let plain = |b: &str| body_digest(b.as_bytes(), &[], false, false);
        assert_ne!(
            plain(r#"{"q":1,"user":"a"}"#),
            plain(r#"{"q":1,"user":"b"}"#)
        );
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
