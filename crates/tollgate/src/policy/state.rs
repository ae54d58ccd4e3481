//! `GET /policies`: each compiled policy, what it matches, its remedies in chain order,
//! and the live state each remedy reports ([`super::chain::Remedy::state`]: window
//! counts and what is left, queue depths, breaker state, cache entries, bytes and hit
//! ratio, throttles, credentials masked).

use super::PolicySet;
use super::compile::Engine;
use serde_json::{Value, json};

pub async fn describe(policies: &PolicySet, engine: &Engine) -> Value {
    let mut out = Vec::new();
    for ((p, chain), tunnelled) in policies
        .policies
        .iter()
        .zip(&engine.chains)
        .zip(engine.tunnelled.iter())
    {
        let mut state = serde_json::Map::new();
        for (r, name) in chain.remedies.iter().zip(&chain.names) {
            if let Some(s) = r.state() {
                state.insert((*name).into(), s.await);
            }
        }
        if let Some(t) = tunnelled.to_json() {
            state.insert("tunnelled".into(), t);
        }
        out.push(json!({
            "name": p.name,
            "match": p.matcher.to_json(),
            "remedies": chain.names,
            "state": state,
        }));
    }
    json!({ "policies": out })
}

/// `POST /cache/purge`: every remedy that keeps answers (the caches) of the policy named
/// `only`, or of every policy, drops them; what each did, by policy. `None` when `only`
/// names no policy with a cache.
pub async fn purge(policies: &PolicySet, engine: &Engine, only: Option<&str>) -> Option<Value> {
    let mut out = Vec::new();
    for (p, chain) in policies.policies.iter().zip(&engine.chains) {
        if only.is_some_and(|o| o != p.name) {
            continue;
        }
        for (r, name) in chain.remedies.iter().zip(&chain.names) {
            if let Some(done) = r.purge() {
                out.push(json!({"policy": p.name, "remedy": name, "purged": done.await}));
            }
        }
    }
    (only.is_none() || !out.is_empty()).then(|| json!({ "purged": out }))
}
