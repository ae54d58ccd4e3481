//! The policies and the declared sections as written, for `GET /config` and the reload diff:
//! every key of every remedy with its default filled in (the raw types' serde defaults),
//! a shared definition resolved under its name, and secrets `MASKED` unless written as
//! `${VAR}` (each raw type serialises its secrets so: `SecretText`, a transform's secret
//! headers). The raw types are the source, so a key added to them shows here without more
//! code.

use super::raw::RawConfig;
use serde::Serialize;
use serde_json::{Map, Value, json};

/// `policies` and each declared section (`rate_limits`, `quotas`, …) as written.
pub(super) fn written(raw: &RawConfig) -> Value {
    let sections = raw.declared_sections();
    let policies: Vec<Value> = raw
        .policies
        .iter()
        .map(|p| {
            let mut v = to_value(p);
            for (key, _, declared) in &sections {
                resolve(&mut v, key, declared);
            }
            v
        })
        .collect();
    let mut out = json!({
        "all": everything(raw),
        "policies": policies,
    });
    for (_, section, declared) in sections {
        out[section] = declared;
    }
    out
}

/// The whole file as written, defaults filled in, secrets masked (each secret field is a
/// [`crate::fields::SecretText`]): what `/config` shows for a key its validated sections
/// do not spell out.
pub(super) fn everything(raw: &RawConfig) -> Value {
    to_value(raw)
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
fn resolve(policy: &mut Value, key: &str, declared: &Value) {
    let Some(name) = policy[key].as_str().map(str::to_owned) else {
        return;
    };
    let mut def = declared.get(&name).cloned().unwrap_or(Value::Null);
    if let Value::Object(m) = &mut def {
        let mut named = Map::new();
        named.insert("name".into(), Value::String(name));
        named.append(m);
        def = Value::Object(named);
    }
    policy[key] = def;
}
