//! Remedy statistics (`GET /remedy-stats`): per policy, remedy and action, how many of
//! the policy's requests it acted on, overall, per endpoint and per response status.
//! Counted in parts ([`Parts`]): each data-plane worker counts the matched requests that
//! need no other diagnosis, the observer thread the rest; a read sums the parts.

use super::Acted;
use rustc_hash::FxHashMap;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

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

    /// Adds another part's counts of the same scope.
    fn absorb(&mut self, other: &Scope) {
        self.requests += other.requests;
        for &(k, n) in &other.actions {
            match self.actions.iter_mut().find(|(have, _)| same(have, &k)) {
                Some((_, m)) => *m += n,
                None => self.actions.push((k, n)),
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
    /// Where [`RemedyStats::record_keyed`] writes a request's endpoint key, kept from one
    /// request to the next.
    scratch: String,
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

    /// [`RemedyStats::record`] with the endpoint key written by `key` into a buffer these
    /// statistics keep (no allocation once it has grown to a key's length).
    pub fn record_keyed(
        &mut self,
        policy: &str,
        key: impl FnOnce(&mut String),
        status: u16,
        acted: &[Acted],
    ) {
        let mut endpoint = std::mem::take(&mut self.scratch);
        endpoint.clear();
        key(&mut endpoint);
        self.record(policy, &endpoint, status, acted);
        self.scratch = endpoint;
    }

    /// Adds another part's counts, under the same bound on keys.
    fn absorb(&mut self, other: &RemedyStats) {
        for (k, s) in &other.by_policy {
            bounded(&mut self.by_policy, k).absorb(s);
        }
        for (k, s) in &other.by_endpoint {
            bounded(&mut self.by_endpoint, k).absorb(s);
        }
        for (k, s) in &other.by_status {
            self.by_status.entry(*k).or_default().absorb(s);
        }
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

/// One part, on cache lines of its own: a worker's counting never writes a line another
/// worker's (or the observer's) counting writes.
#[repr(align(128))]
#[derive(Default)]
struct Part(Mutex<RemedyStats>);

impl Part {
    fn lock(&self) -> MutexGuard<'_, RemedyStats> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The remedy statistics in parts: one per data-plane worker, and the observer thread's
/// (last). A worker counts on its own thread the matched requests that need no other
/// diagnosis, so their records never cross to the observer's core; a read sums the parts.
pub struct Parts(Box<[Part]>);

impl Parts {
    pub fn new(workers: usize) -> Self {
        Self((0..=workers).map(|_| Part::default()).collect())
    }

    /// Worker `i`'s part (the observer's when `i` is out of range).
    pub fn worker(&self, i: usize) -> MutexGuard<'_, RemedyStats> {
        self.0.get(i).unwrap_or_else(|| self.last()).lock()
    }

    /// The observer thread's part.
    pub fn observer(&self) -> MutexGuard<'_, RemedyStats> {
        self.last().lock()
    }

    fn last(&self) -> &Part {
        self.0.last().expect("made with the observer's part")
    }

    /// Every part summed, as `GET /remedy-stats` shows it.
    pub fn to_json(&self) -> Value {
        let mut all = RemedyStats::default();
        for p in &self.0 {
            all.absorb(&p.lock());
        }
        all.to_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acted(remedy: &'static str, action: &'static str) -> Acted {
        Acted {
            remedy,
            action,
            at_unix_ns: 0,
        }
    }

    #[test]
    fn parts_sum_to_what_one_count_would_say() {
        let parts = Parts::new(2);
        let mut one = RemedyStats::default();
        let hit = [acted("cache", "hit")];
        let miss = [acted("cache", "miss"), acted("rate_limit", "allowed")];
        for (i, (status, a)) in [(200, &hit[..]), (200, &miss[..]), (429, &miss[..])]
            .into_iter()
            .cycle()
            .take(30)
            .enumerate()
        {
            let endpoint = format!("GET api.example /v{}", i % 4);
            one.record("p", &endpoint, status, a);
            match i % 3 {
                2 => parts.observer().record("p", &endpoint, status, a),
                w => parts.worker(w).record("p", &endpoint, status, a),
            }
        }
        assert_eq!(parts.to_json(), one.to_json());
        assert_eq!(parts.to_json()["policies"][0]["requests"], 30);
    }

    #[test]
    fn summed_parts_keep_the_bound_on_keys() {
        let parts = Parts::new(2);
        let a = [acted("cache", "hit")];
        for w in 0..2 {
            for i in 0..MAX_KEYS {
                parts
                    .worker(w)
                    .record("p", &format!("GET h /w{w}/{i}"), 200, &a);
            }
        }
        let json = parts.to_json();
        let endpoints = json["endpoints"].as_array().unwrap();
        assert_eq!(endpoints.len(), MAX_KEYS + 1, "the bound, and `other`");
        let other = endpoints.iter().find(|e| e["endpoint"] == "other").unwrap();
        assert_eq!(other["requests"], MAX_KEYS as u64);
    }
}
