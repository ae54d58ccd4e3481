//! Endpoint discovery: every call aggregated by method, host and path template, on the
//! observer thread. A matched policy's template names its calls; other paths are learned
//! ([`template`]): identifier-like segments become `{id}`, and a path position that shows
//! more than `max_children` distinct values under one prefix becomes `{id}` too (its
//! endpoints so far merged into one). Memory is bounded by the caps in the settings; past
//! them calls count under host or endpoint `other`.

pub mod mcp;
pub mod metrics;
pub mod table;
pub mod template;

use crate::diagnosis::settings::Discovery;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
// Fx, not SipHash: every table here is capped (hosts, endpoints, a node's children), so a
// crafted collision costs at most a cap's worth of comparisons, and the observer thread
// hashes several keys per call.
use rustc_hash::FxHashSet as HashSet;
use std::collections::BTreeMap;

pub const OTHER: &str = "other";
const ID: &str = "{id}";

/// One finished call, as discovery sees it.
pub struct Seen<'a> {
    /// `host`, or `host:port` when the port is not the scheme's default.
    pub host: &'a str,
    pub method: &'static str,
    pub path: &'a str,
    /// The matched policy's template (no trailing `*`).
    pub template: Option<&'a str>,
    pub status: u16,
    pub total_us: u64,
    pub upstream_us: Option<u64>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub consumer: Option<&'a str>,
    /// The matched policy.
    pub policy: Option<&'a str>,
    /// Answered from the cache.
    pub cache_hit: bool,
    pub at_ms: u64,
    /// An LLM call's usage: tokens in and out, cost (nano-dollars) and time to first byte.
    pub llm: Option<LlmSeen>,
    /// Answered from the cache with an LLM answer: what the provider's answer had cost.
    pub saved: Option<&'a crate::llm::Saved>,
    /// An MCP tool call.
    pub tool: Option<mcp::ToolCall<'a>>,
}

/// What an LLM call used, as discovery counts it.
#[derive(Debug, Clone, Copy)]
pub struct LlmSeen {
    pub input: u64,
    pub output: u64,
    pub cost_nanos: Option<u64>,
    pub first_byte_us: Option<u64>,
}

/// The LLM calls of one endpoint.
pub struct LlmStats {
    pub calls: u64,
    pub input: u64,
    pub output: u64,
    pub cost_nanos: u64,
    first_byte: Histogram<u32>,
    /// Calls answered from the cache, and what their answers had cost.
    saved: Saved,
}

/// What the cache saved an endpoint's LLM calls.
#[derive(Default, Clone, Copy)]
struct Saved {
    calls: u64,
    input: u64,
    output: u64,
    cost_nanos: u64,
}

impl LlmStats {
    fn new() -> Self {
        Self {
            calls: 0,
            input: 0,
            output: 0,
            cost_nanos: 0,
            first_byte: Histogram::new(2).expect("2 significant figures is valid"),
            saved: Saved::default(),
        }
    }

    fn save(&mut self, s: &crate::llm::Saved) {
        let v = &mut self.saved;
        v.calls += 1;
        v.input = v.input.saturating_add(s.input);
        v.output = v.output.saturating_add(s.output);
        v.cost_nanos = v.cost_nanos.saturating_add(s.cost_nanos);
    }

    fn add(&mut self, l: &LlmSeen) {
        // A provider's absurd count saturates rather than wrapping (docs/llm.md).
        self.calls += 1;
        self.input = self.input.saturating_add(l.input);
        self.output = self.output.saturating_add(l.output);
        self.cost_nanos = self.cost_nanos.saturating_add(l.cost_nanos.unwrap_or(0));
        if let Some(us) = l.first_byte_us {
            record_us(&mut self.first_byte, us);
        }
    }

    fn merge(&mut self, o: LlmStats) {
        self.calls += o.calls;
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.cost_nanos = self.cost_nanos.saturating_add(o.cost_nanos);
        let _ = self.first_byte.add(&o.first_byte);
        let (v, w) = (&mut self.saved, o.saved);
        v.calls += w.calls;
        v.input = v.input.saturating_add(w.input);
        v.output = v.output.saturating_add(w.output);
        v.cost_nanos = v.cost_nanos.saturating_add(w.cost_nanos);
    }

    fn to_json(&self) -> Value {
        let s = &self.saved;
        json!({
            "calls": self.calls, "input_tokens": self.input, "output_tokens": self.output,
            "cost_usd": self.cost_nanos as f64 / 1e9,
            "time_to_first_byte_ms": percentiles(&self.first_byte),
            "saved": {
                "calls": s.calls, "input_tokens": s.input, "output_tokens": s.output,
                "cost_usd": s.cost_nanos as f64 / 1e9,
            },
        })
    }
}

/// The aggregate of one endpoint.
pub struct Stats {
    pub count: u64,
    pub statuses: BTreeMap<u16, u64>,
    total: Histogram<u32>,
    upstream: Histogram<u32>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
    pub consumers: BTreeMap<String, u64>,
    /// The policy its last matched call ran (`None`: no policy matched yet).
    pub policy: Option<Box<str>>,
    pub cache_hits: u64,
    /// Its LLM calls' usage, once it had one.
    pub llm: Option<Box<LlmStats>>,
    /// Its MCP tool calls, once it had one.
    pub mcp: Option<Box<mcp::McpStats>>,
    recent: Recent,
}

/// Seconds each of [`Recent`]'s steps covers, and how many steps it keeps (5 minutes).
const STEP_S: u64 = 15;
const STEPS: usize = 20;

/// An endpoint's calls over the last minutes, in steps of [`STEP_S`] seconds: how many and
/// their summed time, for the mean per step (the dashboard's sparkline).
#[derive(Default)]
struct Recent {
    /// Per slot: the step it counts (unix seconds / `STEP_S`), calls, summed microseconds.
    slots: Box<[(u32, u32, u64); STEPS]>,
}

impl Recent {
    fn add(&mut self, at_ms: u64, us: u64) {
        let step = (at_ms / 1000 / STEP_S) as u32;
        let slot = &mut self.slots[step as usize % STEPS];
        if slot.0 > step {
            // A call of a step already past the ring (a clock set back): not shown.
            return;
        }
        if slot.0 != step {
            *slot = (step, 0, 0);
        }
        slot.1 += 1;
        slot.2 += us;
    }

    fn merge(&mut self, o: &Recent) {
        for (mine, theirs) in self.slots.iter_mut().zip(o.slots.iter()) {
            if theirs.0 > mine.0 {
                *mine = *theirs;
            } else if theirs.0 == mine.0 {
                mine.1 += theirs.1;
                mine.2 += theirs.2;
            }
        }
    }

    /// Mean milliseconds per step, oldest first, ending with the step of `now_ms` (null
    /// for a step without calls).
    fn to_json(&self, now_ms: u64) -> Value {
        let now = (now_ms / 1000 / STEP_S) as u32;
        let steps = (0..STEPS as u32).rev().map(|back| {
            let step = now.saturating_sub(back);
            let s = self.slots[step as usize % STEPS];
            if s.0 == step && s.1 > 0 {
                json!((s.2 as f64 / s.1 as f64).round() / 1e3)
            } else {
                Value::Null
            }
        });
        json!({ "step_s": STEP_S, "mean_ms": steps.collect::<Vec<_>>() })
    }
}

impl Stats {
    fn new(at: u64) -> Self {
        let h = || Histogram::new(2).expect("2 significant figures is valid");
        Self {
            count: 0,
            statuses: BTreeMap::new(),
            total: h(),
            upstream: h(),
            request_bytes: 0,
            response_bytes: 0,
            first_seen_ms: at,
            last_seen_ms: at,
            consumers: BTreeMap::new(),
            policy: None,
            cache_hits: 0,
            llm: None,
            mcp: None,
            recent: Recent::default(),
        }
    }

    fn add(&mut self, c: &Seen, max_consumers: usize) {
        self.count += 1;
        *self.statuses.entry(c.status).or_default() += 1;
        record_us(&mut self.total, c.total_us);
        self.recent.add(c.at_ms, c.total_us);
        if let Some(u) = c.upstream_us {
            record_us(&mut self.upstream, u);
        }
        self.request_bytes += c.request_bytes;
        self.response_bytes += c.response_bytes;
        self.first_seen_ms = self.first_seen_ms.min(c.at_ms);
        self.last_seen_ms = self.last_seen_ms.max(c.at_ms);
        self.cache_hits += u64::from(c.cache_hit);
        if let Some(p) = c.policy
            && self.policy.as_deref() != Some(p)
        {
            self.policy = Some(p.into());
        }
        if let Some(l) = &c.llm {
            self.llm
                .get_or_insert_with(|| Box::new(LlmStats::new()))
                .add(l);
        }
        if let Some(t) = &c.tool {
            self.mcp.get_or_insert_default().add(t);
        }
        if let Some(s) = c.saved {
            self.llm
                .get_or_insert_with(|| Box::new(LlmStats::new()))
                .save(s);
        }
        if let Some(who) = c.consumer {
            let key = if self.consumers.contains_key(who) || self.consumers.len() < max_consumers {
                who
            } else {
                OTHER
            };
            *self.consumers.entry(key.to_owned()).or_default() += 1;
        }
    }

    fn merge(&mut self, o: Stats, max_consumers: usize) {
        self.count += o.count;
        for (s, n) in o.statuses {
            *self.statuses.entry(s).or_default() += n;
        }
        let _ = self.total.add(&o.total);
        let _ = self.upstream.add(&o.upstream);
        self.recent.merge(&o.recent);
        self.request_bytes += o.request_bytes;
        self.response_bytes += o.response_bytes;
        self.first_seen_ms = self.first_seen_ms.min(o.first_seen_ms);
        self.last_seen_ms = self.last_seen_ms.max(o.last_seen_ms);
        self.cache_hits += o.cache_hits;
        if o.policy.is_some() {
            self.policy = o.policy;
        }
        if let Some(m) = o.mcp {
            match &mut self.mcp {
                Some(mine) => mine.merge(*m),
                None => self.mcp = Some(m),
            }
        }
        if let Some(l) = o.llm {
            match &mut self.llm {
                Some(mine) => mine.merge(*l),
                None => self.llm = Some(l),
            }
        }
        for (k, n) in o.consumers {
            let key = if self.consumers.contains_key(&k) || self.consumers.len() < max_consumers {
                k
            } else {
                OTHER.to_owned()
            };
            *self.consumers.entry(key).or_default() += n;
        }
    }
}

/// Longest duration a latency histogram tracks: an hour, in microseconds (longer ones are
/// counted as an hour), so one call cannot grow a histogram past ~12 KB.
const MAX_US: u64 = 3_600_000_000;

/// Records a duration in microseconds, growing the histogram to hold it.
/// `saturating_record` would never grow it: an auto-resizing histogram starts at 2 048,
/// so every call over 2 ms was counted as 2 ms.
pub fn record_us(h: &mut Histogram<u32>, us: u64) {
    let v = us.clamp(1, MAX_US);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// p50, p95, p99 and max in milliseconds of a histogram in microseconds (null when empty).
pub fn percentiles(h: &Histogram<u32>) -> Value {
    if h.is_empty() {
        return Value::Null;
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    json!({ "p50": ms(0.5), "p95": ms(0.95), "p99": ms(0.99), "max": h.max() as f64 / 1e3 })
}

/// A learned-path trie node: literal children until there are too many, then one `{id}`.
#[derive(Default)]
struct Node {
    /// Walked by `&str`: a known segment is not copied per call.
    children: hashbrown::HashMap<String, Node, rustc_hash::FxBuildHasher>,
    collapsed: bool,
}

impl Node {
    fn merge(&mut self, other: Node) {
        self.collapsed |= other.collapsed;
        for (k, v) in other.children {
            self.children.entry(k).or_default().merge(v);
        }
    }
}

#[derive(Default)]
struct Host {
    /// Looked up by [`Ep`]: a known endpoint's name is not copied per call.
    endpoints: hashbrown::HashMap<(&'static str, String), Stats, rustc_hash::FxBuildHasher>,
    trie: Node,
    /// Endpoints named by a policy's template: a collapse never rewrites them.
    named: HashSet<String>,
}

/// Every endpoint seen, within the caps.
pub struct Discovered {
    settings: Discovery,
    /// Looked up by `&str`: a known host's name is not copied per call.
    hosts: hashbrown::HashMap<String, Host, rustc_hash::FxBuildHasher>,
    count: usize,
    pub folded: u64,
}

/// Where a call was counted: host and endpoint labels (either may be `other`).
pub struct Counted<'a> {
    pub host: &'a str,
    pub endpoint: &'a str,
    pub folded: bool,
}

/// An endpoint's key borrowed: hashes as the `(method, template)` tuple it stands for.
#[derive(Hash)]
struct Ep<'a>(&'static str, &'a str);

impl hashbrown::Equivalent<(&'static str, String)> for Ep<'_> {
    fn equivalent(&self, k: &(&'static str, String)) -> bool {
        self.0 == k.0 && self.1 == k.1
    }
}

impl Discovered {
    pub fn new(settings: Discovery) -> Self {
        Self {
            settings,
            hosts: Default::default(),
            count: 0,
            folded: 0,
        }
    }

    pub fn record(&mut self, c: &Seen) -> Counted<'_> {
        let mut folded = false;
        let host_key =
            if self.hosts.contains_key(c.host) || self.hosts.len() < self.settings.max_hosts {
                c.host
            } else {
                folded = true;
                OTHER
            };
        let max_children = self.settings.max_children;
        if !self.hosts.contains_key(host_key) {
            self.hosts.insert(host_key.to_owned(), Host::default());
        }
        let Some((host_name, host)) = self.hosts.get_key_value_mut(host_key) else {
            // Inserted just above.
            return Counted {
                host: OTHER,
                endpoint: OTHER,
                folded: true,
            };
        };
        let learned;
        let endpoint = match c.template {
            Some(t) => {
                if !host.named.contains(t) {
                    host.named.insert(t.to_owned());
                }
                t
            }
            None => {
                learned = learn(host, c.path, max_children);
                learned.as_str()
            }
        };
        let mut ep = Ep(c.method, endpoint);
        if !host.endpoints.contains_key(&ep) {
            if host.endpoints.len() >= self.settings.max_endpoints_per_host
                || self.count >= self.settings.max_endpoints
            {
                folded = true;
                ep = Ep(c.method, OTHER);
            }
            if !host.endpoints.contains_key(&ep) {
                self.count += 1;
                host.endpoints
                    .insert((ep.0, ep.1.to_owned()), Stats::new(c.at_ms));
            }
        }
        if folded {
            self.folded += 1;
        }
        let max_consumers = self.settings.max_consumers;
        let endpoint = match host.endpoints.get_key_value_mut(&ep) {
            Some((k, stats)) => {
                stats.add(c, max_consumers);
                k.1.as_str()
            }
            None => OTHER,
        };
        Counted {
            host: host_name,
            endpoint,
            folded,
        }
    }

    /// Every endpoint, most called first; with `recent` (now, unix ms) each endpoint's
    /// mean latency over the last minutes too.
    pub fn to_json(&self, recent: Option<u64>) -> Value {
        let mut rows: Vec<(&str, &'static str, &str, &Stats)> = self
            .hosts
            .iter()
            .flat_map(|(h, host)| {
                host.endpoints
                    .iter()
                    .map(move |((m, e), s)| (h.as_str(), *m, e.as_str(), s))
            })
            .collect();
        rows.sort_by(|a, b| {
            b.3.count
                .cmp(&a.3.count)
                .then(a.0.cmp(b.0))
                .then(a.2.cmp(b.2))
        });
        // Fixed millisecond precision, so the strings also sort as the times do.
        let ts = |ms: u64| {
            jiff::Timestamp::from_millisecond(ms as i64)
                .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
                .unwrap_or_default()
        };
        json!({
            "enabled": true,
            "endpoints": rows.iter().map(|(h, m, e, s)| {
                let mut row = json!({
                    "host": h, "method": m, "endpoint": e, "count": s.count,
                    "status": s.statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
                    "latency_ms": percentiles(&s.total),
                    "provider_ms": percentiles(&s.upstream),
                    "request_bytes": s.request_bytes, "response_bytes": s.response_bytes,
                    "first_seen": ts(s.first_seen_ms), "last_seen": ts(s.last_seen_ms),
                    "consumers": s.consumers,
                    "policy": s.policy.as_deref(),
                    "cache_hits": s.cache_hits,
                });
                if let Some(l) = &s.llm {
                    row["llm"] = l.to_json();
                }
                if let Some(m) = &s.mcp {
                    row["mcp"] = m.to_json();
                }
                if let Some(now) = recent {
                    row["recent"] = s.recent.to_json(now);
                }
                row
            }).collect::<Vec<_>>(),
            "folded": self.folded,
            "caps": {
                "max_hosts": self.settings.max_hosts,
                "max_endpoints_per_host": self.settings.max_endpoints_per_host,
                "max_endpoints": self.settings.max_endpoints,
                "max_children": self.settings.max_children,
            },
        })
    }
}

/// The learned template of `path` on `host`, collapsing a position (and merging its
/// endpoints) when it has too many distinct values.
fn learn(host: &mut Host, path: &str, max_children: usize) -> String {
    let mut walked: smallvec::SmallVec<[&str; 8]> = smallvec::SmallVec::new();
    let mut node = &mut host.trie;
    let mut collapse_at = None;
    for seg in template::pieces(path) {
        let key = if node.collapsed {
            ID
        } else if node.children.contains_key(seg) || node.children.len() < max_children || seg == ID
        {
            seg
        } else {
            collapse_at = Some(walked.len());
            break;
        };
        walked.push(key);
        node = node.children.entry_ref(key).or_default();
    }
    let Some(at) = collapse_at else {
        let mut out = String::with_capacity(path.len() + 8);
        template::push_joined(&mut out, walked.into_iter());
        return out;
    };
    let out: Vec<String> = walked.iter().map(|s| (*s).to_owned()).collect();
    // Collapse the node at `out` (prefix): its literal children merge into `{id}`.
    let mut node = &mut host.trie;
    for s in &out {
        node = node.children.get_mut(s).expect("walked above");
    }
    node.collapsed = true;
    let mut merged = node.children.remove(ID).unwrap_or_default();
    for (_, child) in node.children.drain() {
        merged.merge(child);
    }
    node.children.insert(ID.to_owned(), merged);
    let prefix = out.clone();
    let old: Vec<(&'static str, String)> = host
        .endpoints
        .keys()
        .filter(|(_, t)| !host.named.contains(t))
        .filter(|(_, t)| {
            let s: Vec<&str> = t.split('/').filter(|s| !s.is_empty()).collect();
            s.len() > at
                && s[..at] == prefix.iter().map(String::as_str).collect::<Vec<_>>()[..]
                && s[at] != ID
        })
        .cloned()
        .collect();
    for (m, t) in old {
        let stats = host
            .endpoints
            .remove(&(m, t.clone()))
            .expect("listed above");
        let mut s: Vec<String> = t
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        s[at] = ID.to_owned();
        let key = (m, template::join(&s));
        match host.endpoints.get_mut(&key) {
            Some(existing) => existing.merge(stats, usize::MAX),
            None => {
                host.endpoints.insert(key, stats);
            }
        }
    }
    // The call itself, through the collapsed node.
    learn(host, path, max_children)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(host: &'a str, path: &'a str) -> Seen<'a> {
        Seen {
            host,
            method: "GET",
            path,
            template: None,
            status: 200,
            total_us: 1000,
            upstream_us: Some(800),
            request_bytes: 0,
            response_bytes: 10,
            consumer: None,
            policy: None,
            cache_hit: false,
            at_ms: 1,
            llm: None,
            saved: None,
            tool: None,
        }
    }

    fn settings() -> Discovery {
        Discovery {
            enabled: true,
            max_children: 3,
            max_endpoints_per_host: 10,
            max_hosts: 2,
            ..crate::Config::default().diagnosis.discovery
        }
    }

    #[test]
    fn collapses_names_past_max_children() {
        let mut e = Discovered::new(settings());
        for u in ["alice", "bob", "carol"] {
            assert_eq!(
                e.record(&call("gh", &format!("/users/{u}/repos"))).endpoint,
                format!("/users/{u}/repos")
            );
        }
        // The fourth distinct name collapses the position; the three merge into it.
        assert_eq!(
            e.record(&call("gh", "/users/dave/repos")).endpoint,
            "/users/{id}/repos"
        );
        assert_eq!(
            e.record(&call("gh", "/users/alice/repos")).endpoint,
            "/users/{id}/repos"
        );
        let j = e.to_json(None);
        let eps = j["endpoints"].as_array().unwrap();
        assert_eq!(eps.len(), 1, "{j}");
        assert_eq!(eps[0]["count"], 5);
    }

    #[test]
    fn a_collapse_leaves_policy_templates_alone() {
        let mut e = Discovered::new(Discovery {
            max_children: 2,
            ..settings()
        });
        let named = "/gh/repos/{owner}/{repo}/issues/{number}";
        let policy = |path| Seen {
            template: Some(named),
            ..call("api", path)
        };
        assert_eq!(e.record(&policy("/gh/repos/a/b/issues/1")).endpoint, named);
        for p in ["/x/one", "/y/two", "/z/three"] {
            e.record(&call("api", p));
        }
        assert_eq!(e.record(&policy("/gh/repos/a/b/issues/2")).endpoint, named);
        let j = e.to_json(None);
        let eps = j["endpoints"].as_array().unwrap();
        let (ours, learned): (Vec<_>, Vec<_>) = eps.iter().partition(|e| e["endpoint"] == named);
        assert_eq!(ours.len(), 1, "{j}");
        assert_eq!(ours[0]["count"], 2, "{j}");
        assert!(learned.iter().all(|e| e["endpoint"] == "/{id}/{id}"), "{j}");
    }

    #[test]
    fn recent_latency_is_a_mean_per_step_ending_now() {
        let mut r = Recent::default();
        let step_ms = STEP_S * 1000;
        let now = 1_000 * step_ms;
        r.add(now - 2 * step_ms, 1_000);
        r.add(now - 2 * step_ms + 5, 3_000);
        r.add(now, 500);
        r.add(now, 500);
        // A step as old as the ring is long, late: it would land in `now`'s slot.
        r.add(now - STEPS as u64 * step_ms, 9_000_000);
        let j = r.to_json(now);
        let means = j["mean_ms"].as_array().unwrap();
        assert_eq!(means.len(), STEPS);
        assert_eq!(means[STEPS - 1], 0.5);
        assert_eq!(means[STEPS - 3], 2.0);
        assert!(means[STEPS - 2].is_null());
        // Long past: nothing shown.
        assert!(
            r.to_json(now + STEPS as u64 * step_ms)["mean_ms"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v.is_null())
        );
        let mut other = Recent::default();
        other.add(now, 2_000);
        r.merge(&other);
        assert_eq!(r.to_json(now)["mean_ms"][STEPS - 1], 1.0);
    }

    #[test]
    fn caps_fold_into_other() {
        let mut e = Discovered::new(settings());
        e.record(&call("a", "/x"));
        e.record(&call("b", "/x"));
        let c = e.record(&call("c", "/x"));
        assert_eq!(c.host, OTHER);
        assert!(c.folded);
        assert_eq!(e.folded, 1);
    }
}
