//! Remedy statistics (`GET /remedy-stats`): per policy, remedy and action, how many of
//! the policy's requests it acted on, overall, per endpoint and per response status.
//! Counted in parts ([`Parts`]): each data-plane worker counts the matched requests that
//! need no other diagnosis, the observer thread the rest; a read sums the parts.

use super::Acted;
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

/// The counts of one endpoint under one policy with one response status. Every matched
/// request adds to exactly one; the views by policy, by endpoint and by status are sums
/// of them, made when `GET /remedy-stats` reads them (a request costs one map lookup and
/// one [`Scope::add`], not one of each per view).
struct Cell {
    policy: Box<str>,
    status: u16,
    scope: Scope,
}

#[derive(Default)]
pub struct RemedyStats {
    /// Endpoint key (`METHOD host template`) → where its cells are in `cells`.
    by_endpoint: Endpoints,
    /// Each endpoint's cells: an endpoint has a policy or two and a few statuses, so a
    /// list beats a map. Never removed, so an index stays its endpoint's.
    cells: Vec<Vec<Cell>>,
    /// Where [`RemedyStats::record_keyed`] writes a request's endpoint key, kept from one
    /// request to the next.
    scratch: String,
    /// The parts `scratch` was written from, each ended by a NUL (which no method, host
    /// or path holds).
    written_from: String,
    /// The cells of the endpoint `scratch` holds: a request of the same endpoint as the
    /// last looks nothing up.
    last: Option<usize>,
}

/// Whether two (remedy, action) names are the same: the same `&'static str`s as a rule
/// (each remedy's action names are constants), so their addresses decide before their
/// bytes are compared.
fn same(a: &(&'static str, &'static str), b: &(&'static str, &'static str)) -> bool {
    let eq = |x: &str, y: &str| std::ptr::eq(x, y) || x == y;
    eq(a.0, b.0) && eq(a.1, b.1)
}

/// Where each endpoint's cells are, by its key.
type Endpoints = hashbrown::HashMap<Box<str>, usize, rustc_hash::FxBuildHasher>;

/// Whether `joined` is `parts`, each ended by a NUL.
fn written_from(joined: &str, parts: [&str; 4]) -> bool {
    let mut rest = joined.as_bytes();
    for p in parts {
        match rest.strip_prefix(p.as_bytes()) {
            Some([0, tail @ ..]) => rest = tail,
            _ => return false,
        }
    }
    rest.is_empty()
}

/// The counts of `policy` with `status` among an endpoint's cells, made on first use.
fn cell<'a>(cells: &'a mut Vec<Cell>, policy: &str, status: u16) -> &'a mut Scope {
    let i = match cells
        .iter()
        .position(|c| c.status == status && *c.policy == *policy)
    {
        Some(i) => i,
        None => {
            cells.push(Cell {
                policy: policy.into(),
                status,
                scope: Scope::default(),
            });
            cells.len() - 1
        }
    };
    &mut cells[i].scope
}

impl RemedyStats {
    /// One request a policy matched: its policy, endpoint (`METHOD host template`),
    /// response status and the remedies' actions.
    pub fn record(&mut self, policy: &str, endpoint: &str, status: u16, acted: &[Acted]) {
        let i = self.bounded(endpoint);
        cell(&mut self.cells[i], policy, status).add(acted);
    }

    /// [`RemedyStats::record`] with the endpoint key written by `key` from the `parts`
    /// it depends on, into a buffer these statistics keep (no allocation once it has
    /// grown to a key's length). The key is written only when the parts differ from the
    /// last request's: a worker's requests mostly repeat an endpoint, and a path's
    /// templating is most of the cost.
    pub fn record_keyed(
        &mut self,
        policy: &str,
        parts: [&str; 4],
        key: impl FnOnce(&mut String),
        status: u16,
        acted: &[Acted],
    ) {
        let i = match self.last {
            Some(i) if written_from(&self.written_from, parts) => i,
            _ => {
                self.written_from.clear();
                for p in parts {
                    self.written_from.push_str(p);
                    self.written_from.push('\0');
                }
                let mut endpoint = std::mem::take(&mut self.scratch);
                endpoint.clear();
                key(&mut endpoint);
                let i = self.bounded(&endpoint);
                self.scratch = endpoint;
                self.last = Some(i);
                i
            }
        };
        cell(&mut self.cells[i], policy, status).add(acted);
    }

    /// Where the cells of endpoint `key` are, made on its first request (the only time a
    /// key is copied), or `other`'s once `MAX_KEYS` endpoints are kept. Below that bound,
    /// one lookup, by the key as borrowed.
    fn bounded(&mut self, key: &str) -> usize {
        let map = &mut self.by_endpoint;
        let key = if map.len() >= MAX_KEYS && !map.contains_key(key) {
            "other"
        } else {
            key
        };
        match map.entry_ref(key) {
            hashbrown::hash_map::EntryRef::Occupied(e) => *e.get(),
            hashbrown::hash_map::EntryRef::Vacant(e) => {
                self.cells.push(Vec::new());
                *e.insert_with_key(key.into(), self.cells.len() - 1)
            }
        }
    }

    /// Adds another part's counts, under the same bound on endpoints.
    fn absorb(&mut self, other: &RemedyStats) {
        for (k, &theirs) in &other.by_endpoint {
            let mine = self.bounded(k);
            for c in &other.cells[theirs] {
                cell(&mut self.cells[mine], &c.policy, c.status).absorb(&c.scope);
            }
        }
    }

    pub fn to_json(&self) -> Value {
        // Each view summed from the cells, sorted by key, as the output always was.
        let mut by_policy: BTreeMap<&str, Scope> = BTreeMap::new();
        let mut by_endpoint: BTreeMap<&str, Scope> = BTreeMap::new();
        let mut by_status: BTreeMap<u16, Scope> = BTreeMap::new();
        for (endpoint, &i) in &self.by_endpoint {
            let e = by_endpoint.entry(endpoint).or_default();
            for c in &self.cells[i] {
                e.absorb(&c.scope);
                by_policy.entry(&c.policy).or_default().absorb(&c.scope);
                by_status.entry(c.status).or_default().absorb(&c.scope);
            }
        }
        fn scopes<K: ToString>(m: &BTreeMap<K, Scope>, key: &str) -> Vec<Value> {
            m.iter()
                .map(|(k, s)| json!({ key: k.to_string(), "requests": s.requests, "actions": s.to_json() }))
                .collect()
        }
        json!({
            "policies": scopes(&by_policy, "policy"),
            "endpoints": scopes(&by_endpoint, "endpoint"),
            "statuses": scopes(&by_status, "status"),
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
    fn a_key_is_written_again_only_when_its_parts_change() {
        let mut stats = RemedyStats::default();
        let mut written = 0;
        let a = [acted("cache", "hit")];
        for parts in [
            ["GET", "h", "", "/x/1"],
            ["GET", "h", "", "/x/1"],
            ["GET", "h", "", "/x/2"],
            ["GET", "h", "", "/x/2"],
            ["GET", "h", "/x/{id}", ""],
            ["GET", "h", "/x/{id}", ""],
            // Each part's boundary counts: not the same as the one before.
            ["GET", "h", "/x/{id", "}"],
            ["GET", "h", "", "/x/1"],
        ] {
            stats.record_keyed(
                "p",
                parts,
                |k| {
                    written += 1;
                    k.push_str(&parts.concat());
                },
                200,
                &a,
            );
        }
        assert_eq!(written, 5);
        let keys: Vec<_> = stats.to_json()["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["endpoint"].as_str().unwrap().to_owned(),
                    e["requests"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("GETh/x/1".to_owned(), 3),
                ("GETh/x/2".to_owned(), 2),
                ("GETh/x/{id}".to_owned(), 3),
            ]
        );
    }

    /// A view's rows: key, requests, and (remedy/action, count) per action.
    type View = Vec<(String, u64, Vec<(String, u64)>)>;

    #[test]
    fn each_view_sums_the_requests_it_holds() {
        let mut stats = RemedyStats::default();
        let hit = [acted("cache", "hit")];
        let miss = [acted("cache", "miss"), acted("rate_limit", "allowed")];
        stats.record("a", "GET h /x", 200, &hit);
        stats.record("b", "GET h /x", 200, &miss);
        stats.record("a", "GET h /y", 429, &miss);
        stats.record("a", "GET h /y", 429, &miss);
        let json = stats.to_json();
        let view = |name: &str, key: &str| -> View {
            json[name]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    let actions = v["actions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|a| {
                            let name = format!(
                                "{}/{}",
                                a["remedy"].as_str().unwrap(),
                                a["action"].as_str().unwrap()
                            );
                            (name, a["count"].as_u64().unwrap())
                        })
                        .collect();
                    (
                        v[key].as_str().unwrap().to_owned(),
                        v["requests"].as_u64().unwrap(),
                        actions,
                    )
                })
                .collect()
        };
        let a = |s: &str, n| (s.to_owned(), n);
        assert_eq!(
            view("policies", "policy"),
            [
                (
                    "a".into(),
                    3,
                    vec![
                        a("cache/hit", 1),
                        a("cache/miss", 2),
                        a("rate_limit/allowed", 2)
                    ]
                ),
                (
                    "b".into(),
                    1,
                    vec![a("cache/miss", 1), a("rate_limit/allowed", 1)]
                ),
            ]
        );
        assert_eq!(
            view("endpoints", "endpoint"),
            [
                (
                    "GET h /x".into(),
                    2,
                    vec![
                        a("cache/hit", 1),
                        a("cache/miss", 1),
                        a("rate_limit/allowed", 1)
                    ]
                ),
                (
                    "GET h /y".into(),
                    2,
                    vec![a("cache/miss", 2), a("rate_limit/allowed", 2)]
                ),
            ]
        );
        assert_eq!(
            view("statuses", "status"),
            [
                (
                    "200".into(),
                    2,
                    vec![
                        a("cache/hit", 1),
                        a("cache/miss", 1),
                        a("rate_limit/allowed", 1)
                    ]
                ),
                (
                    "429".into(),
                    2,
                    vec![a("cache/miss", 2), a("rate_limit/allowed", 2)]
                ),
            ]
        );
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
