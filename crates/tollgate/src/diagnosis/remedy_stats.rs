//! Remedy statistics (`GET /remedy-stats`): per policy, remedy and action, how many of
//! the policy's requests it acted on, overall, per endpoint and per response status.
//! Aggregated on the observer thread from each matched request's actions.

use super::Acted;
use rustc_hash::FxHashMap;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Most endpoints and statuses kept apart; the rest count under `other`.
const MAX_KEYS: usize = 1000;

#[derive(Default)]
struct Scope {
    requests: u64,
    /// (remedy, action) → count; a policy has a handful, so a list beats a map.
    actions: Vec<((&'static str, &'static str), u64)>,
}

impl Scope {
    fn add(&mut self, acted: &[Acted]) {
        self.requests += 1;
        // An action counted once per request (a retried request may be refused twice);
        // a request has a handful of actions, so looking back costs less than a set.
        for (i, a) in acted.iter().enumerate() {
            let k = (a.remedy, a.action);
            if acted[..i].iter().any(|b| same(&(b.remedy, b.action), &k)) {
                continue;
            }
            match self.actions.iter_mut().find(|(have, _)| same(have, &k)) {
                Some((_, n)) => *n += 1,
                None => self.actions.push((k, 1)),
            }
        }
    }

    fn to_json(&self) -> Vec<Value> {
        let mut sorted = self.actions.clone();
        sorted.sort_unstable();
        sorted
            .iter()
            .map(|((remedy, action), n)| {
                json!({
                    "remedy": remedy, "action": action, "count": n,
                    "ratio": *n as f64 / self.requests.max(1) as f64,
                })
            })
            .collect()
    }
}

#[derive(Default)]
pub struct RemedyStats {
    by_policy: FxHashMap<Box<str>, Scope>,
    by_endpoint: FxHashMap<Box<str>, Scope>,
    by_status: FxHashMap<u16, Scope>,
}

/// Whether two (remedy, action) names are the same: the same `&'static str`s as a rule
/// (each remedy's action names are constants), so their addresses decide before their
/// bytes are compared.
fn same(a: &(&'static str, &'static str), b: &(&'static str, &'static str)) -> bool {
    let eq = |x: &str, y: &str| std::ptr::eq(x, y) || x == y;
    eq(a.0, b.0) && eq(a.1, b.1)
}

/// The scope of `key`, made on its first request (the only time a key is copied), or
/// `other` once `MAX_KEYS` are kept. A key seen before costs two lookups.
fn bounded<'a>(map: &'a mut FxHashMap<Box<str>, Scope>, key: &str) -> &'a mut Scope {
    if map.contains_key(key) {
        return map.get_mut(key).expect("looked up above");
    }
    let key = if map.len() < MAX_KEYS { key } else { "other" };
    if !map.contains_key(key) {
        map.insert(key.into(), Scope::default());
    }
    map.get_mut(key).expect("inserted above")
}

impl RemedyStats {
    /// One request a policy matched: its policy, endpoint (`METHOD host template`),
    /// response status and the remedies' actions.
    pub fn record(&mut self, policy: &str, endpoint: &str, status: u16, acted: &[Acted]) {
        bounded(&mut self.by_policy, policy).add(acted);
        bounded(&mut self.by_endpoint, endpoint).add(acted);
        // Statuses are three digits: at most 900 keys, under the bound by construction.
        self.by_status.entry(status).or_default().add(acted);
    }

    pub fn to_json(&self) -> Value {
        // Sorted by key, as the output always was.
        fn scopes<K: Ord + ToString>(m: &FxHashMap<K, Scope>, key: &str) -> Vec<Value> {
            let sorted: BTreeMap<&K, &Scope> = m.iter().collect();
            sorted
                .into_iter()
                .map(|(k, s)| json!({ key: k.to_string(), "requests": s.requests, "actions": s.to_json() }))
                .collect()
        }
        json!({
            "policies": scopes(&self.by_policy, "policy"),
            "endpoints": scopes(&self.by_endpoint, "endpoint"),
            "statuses": scopes(&self.by_status, "status"),
        })
    }
}
