//! The policies and shared limits as written, for `GET /config` and the reload diff:
//! every key of every remedy with its default filled in (the raw types' serde defaults),
//! a shared definition resolved under its name, and secrets `MASKED` unless written as
//! `${VAR}`. The raw types are the source, so a key added to them shows here without
//! more code.

use super::raw::RawConfig;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// `policies`, `rate_limits`, `quotas`, `concurrency_limits` and `breakers` as written.
pub(super) fn written(raw: &RawConfig) -> Value {
    let policies: Vec<Value> = raw
        .policies
        .iter()
        .map(|p| {
            let mut v = to_value(p);
            resolve(&mut v, "rate_limit", &raw.rate_limits);
            resolve(&mut v, "quota", &raw.quotas);
            resolve(&mut v, "concurrency", &raw.concurrency_limits);
            resolve(&mut v, "breaker", &raw.breakers);
            if let Some(c) = v.get_mut("credentials") {
                mask_credentials(c);
            }
            for transform in ["request", "response"] {
                for list in ["set_headers", "add_headers"] {
                    if let Some(h) = v.get_mut(transform).and_then(|t| t.get_mut(list)) {
                        mask_secret_headers(h);
                    }
                }
            }
            v
        })
        .collect();
    json!({
        "all": everything(raw),
        "policies": policies,
        "rate_limits": to_value(&raw.rate_limits),
        "quotas": to_value(&raw.quotas),
        "concurrency_limits": to_value(&raw.concurrency_limits),
        "breakers": to_value(&raw.breakers),
    })
}

/// The whole file as written, defaults filled in, secrets masked: what `/config` shows
/// for a key its validated sections do not spell out.
fn everything(raw: &RawConfig) -> Value {
    let mut v = to_value(raw);
    for path in [
        &["admin", "token"][..],
        &["diagnosis", "har", "obfuscate", "key"],
    ] {
        if let Some(s) = path.iter().try_fold(&mut v, |v, k| v.get_mut(*k)) {
            mask(s);
        }
    }
    // Headers sent to a collector or a trace endpoint carry its credentials.
    for path in [
        &["diagnosis", "traces", "headers"][..],
        &["diagnosis", "har", "collector", "headers"],
    ] {
        if let Some(Value::Object(m)) = path.iter().try_fold(&mut v, |v, k| v.get_mut(*k)) {
            m.values_mut().for_each(mask);
        }
    }
    v
}

/// Adds to `shown` every key of `written` it lacks (recursing into objects and into
/// lists of the same length), so the view shows every key.
pub(super) fn fill_missing(shown: &mut Value, written: &Value) {
    match (shown, written) {
        (Value::Object(s), Value::Object(w)) => {
            for (k, wv) in w {
                match s.get_mut(k) {
                    Some(sv) => fill_missing(sv, wv),
                    None => {
                        s.insert(k.clone(), wv.clone());
                    }
                }
            }
        }
        (Value::Array(s), Value::Array(w)) if s.len() == w.len() => {
            s.iter_mut()
                .zip(w)
                .for_each(|(sv, wv)| fill_missing(sv, wv));
        }
        _ => {}
    }
}

fn to_value<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// `rate_limit: github` becomes `{"name": "github", …its definition}`.
fn resolve<T: Serialize>(policy: &mut Value, key: &str, declared: &BTreeMap<String, T>) {
    let Some(name) = policy[key].as_str().map(str::to_owned) else {
        return;
    };
    let mut def = declared.get(&name).map_or(Value::Null, to_value);
    if let Value::Object(m) = &mut def {
        let mut named = Map::new();
        named.insert("name".into(), Value::String(name));
        named.append(m);
        def = Value::Object(named);
    }
    policy[key] = def;
}

/// `${VAR}` as written is shown; anything else is a literal secret.
fn mask(v: &mut Value) {
    if let Value::String(s) = v
        && !s.is_empty()
        && !is_env_reference(s)
    {
        *s = "MASKED".into();
    }
}

fn is_env_reference(s: &str) -> bool {
    s.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// A credential's values (bearer, basic username and password, key values), in the
/// policy's own credential and in each account.
fn mask_credentials(c: &mut Value) {
    fn at<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
        path.iter().try_fold(v, |v, k| v.get_mut(*k))
    }
    fn one(c: &mut Value) {
        for path in [
            &["bearer"][..],
            &["basic", "username"],
            &["basic", "password"],
            &["header", "value"],
            &["query", "value"],
        ] {
            if let Some(v) = at(c, path) {
                mask(v);
            }
        }
    }
    one(c);
    if let Some(accounts) = c.get_mut("accounts").and_then(Value::as_array_mut) {
        accounts.iter_mut().for_each(one);
    }
}

/// Header values a transform sets, when the header's name says it carries a secret.
fn mask_secret_headers(h: &mut Value) {
    let Some(m) = h.as_object_mut() else {
        return;
    };
    for (name, v) in m.iter_mut() {
        let n = name.to_ascii_lowercase();
        if [
            "auth", "cookie", "token", "secret", "key", "password", "session",
        ]
        .iter()
        .any(|w| n.contains(w))
        {
            mask(v);
        }
    }
}
