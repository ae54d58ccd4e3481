//! `GET /policies`: each compiled policy, what it matches, its remedies in chain order,
//! and the live state of each (window counts and what is left, queue depths, breaker
//! state, cache entries, bytes and hit ratio, throttles, credentials masked).

use super::compile::{Engine, View};
use super::remedies::breaker::State;
use super::remedies::{cache, retry};
use super::{Policy, clock};
use crate::config::Config;
use serde_json::{Value, json};

pub async fn describe(config: &Config, engine: &Engine) -> Value {
    let mut out = Vec::new();
    for (p, view) in config.policies.policies.iter().zip(&engine.views) {
        out.push(policy(p, view).await);
    }
    json!({ "policies": out })
}

fn secs_left(ms: u64) -> u64 {
    ms.saturating_sub(clock::now_ms()).div_ceil(1000)
}

async fn policy(p: &Policy, v: &View) -> Value {
    let m = &p.matcher;
    let mut state = serde_json::Map::new();
    if let Some(r) = &v.rate_limit {
        let (used, end) = r.limit.used().await;
        state.insert(
            "rate_limit".into(),
            json!({
                "name": &*r.name,
                "limit": r.limit.spec.limit,
                "used": used,
                "remaining": r.limit.spec.limit.saturating_sub(used),
                "resets_in_s": secs_left(end),
                "queued": r.queue.as_ref().map(|q| q.len()),
            }),
        );
    }
    if let Some(q) = &v.quota {
        let (used, end) = q.limit.used().await;
        state.insert(
            "quota".into(),
            json!({
                "name": &*q.name,
                "limit": q.limit.spec.limit,
                "used": used,
                "remaining": q.limit.spec.limit.saturating_sub(used),
                "renews_in_s": secs_left(end),
                "parent": q.limit.parent.as_ref().map(|p| p.resource.to_string()),
            }),
        );
    }
    if let Some(c) = &v.concurrency {
        state.insert(
            "concurrency".into(),
            json!({
                "name": &*c.name,
                "max": c.spec.max,
                "in_flight": if c.spec.group_by.is_none() { Some(c.in_flight().await) } else { None },
                "queued": c.queue.as_ref().map(|q| q.len()),
            }),
        );
    }
    if let Some(b) = &v.breaker {
        let s = match b.state().await {
            State::Closed => json!({"state": "closed"}),
            State::Open { until } => json!({"state": "open", "retry_in_s": secs_left(until)}),
            State::HalfOpen { .. } => json!({"state": "half_open"}),
        };
        state.insert("breaker".into(), json!({"name": &*b.name, "state": s}));
    }
    if let Some(c) = &v.cache {
        let (entries, bytes) = c.store.size();
        let (hits, misses) = (
            c.actions.get(cache::Action::Hit),
            c.actions.get(cache::Action::Miss),
        );
        state.insert(
            "cache".into(),
            json!({
                "entries": entries,
                "bytes": bytes,
                "hits": hits,
                "misses": misses,
                "bypassed": c.actions.get(cache::Action::Bypass),
                "revalidated": c.actions.get(cache::Action::Revalidated),
                "hit_ratio": if hits + misses > 0 { hits as f64 / (hits + misses) as f64 } else { 0.0 },
            }),
        );
    }
    if let Some(t) = &v.throttle {
        let until = t.until().await;
        state.insert(
            "provider_throttling".into(),
            json!({"throttled": until > 0, "retry_in_s": (until > 0).then(|| secs_left(until))}),
        );
    }
    if let Some(c) = &v.credentials {
        state.insert("credentials".into(), json!({"accounts": c.state()}));
    }
    if let Some(r) = &v.retry {
        state.insert(
            "retry".into(),
            json!({
                "retried": r.actions.get(retry::Action::Retried),
                "budget_exhausted": r.actions.get(retry::Action::BudgetExhausted),
            }),
        );
    }
    if let Some(t) = v.tunnelled.to_json() {
        state.insert("tunnelled".into(), t);
    }
    json!({
        "name": p.name,
        "match": m.to_json(),
        "remedies": p.spec.remedies(),
        "state": state,
    })
}
