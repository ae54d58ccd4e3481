//! What a worker counts of its own requests as each one ends: the request metrics (by
//! host, method and status class; latencies by host; proxy-made errors by code), each
//! into the worker's shard of the metric (`metrics/sharded.rs`), and the dashboard's last
//! minute, into the worker's own. Nothing of it crosses to another core per request;
//! `/metrics` and the dashboard sum the workers' parts when read.

use super::{Ended, MAX_CACHED};
use crate::metrics::{
    ErrorLabels, HostLabels, LatencyHistogram, Metrics, RequestLabels, method_label,
    sharded::ShardedCounter, status_class,
};
use crate::ui::Dashboard;
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Arc, Mutex};

/// A worker's tally. Its lock is taken by its worker alone, once per request.
pub struct Tally {
    /// Also the observer's, for the events it drops (`Observer::send`).
    pub(super) metrics: Metrics,
    hosts: Arc<Hosts>,
    ui: Arc<Dashboard>,
    worker: usize,
    handles: Mutex<Handles>,
}

/// The hosts that are metric labels, shared by the workers: read on a worker's first
/// request of a label set only (then its handles are cached).
pub struct Hosts {
    admitted: Mutex<FxHashSet<Arc<str>>>,
    /// At most this many; never evicted (a series, once exported, stays in the registry
    /// anyway).
    max: usize,
}

impl Hosts {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            admitted: Mutex::default(),
            max,
        })
    }

    /// The label of `host`: itself while there is room, `other` past `max` (folded).
    fn label(&self, host: &Arc<str>) -> (String, bool) {
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        if admitted.contains(host) {
            return (host.to_string(), false);
        }
        if admitted.len() < self.max {
            admitted.insert(host.clone());
            return (host.to_string(), false);
        }
        ("other".to_owned(), true)
    }
}

/// Host (validated only), method label, status class: every part bounded.
type Key = (Option<Arc<str>>, &'static str, &'static str);

/// The metric handles of one label set, looked up in the families once and then reused:
/// no label hashing or `String` per request.
#[derive(Clone)]
struct Counted {
    requests: ShardedCounter,
    duration: LatencyHistogram,
    upstream: LatencyHistogram,
    /// The host was past `metrics.max_hosts`: counted under `other`.
    folded: Option<ShardedCounter>,
}

/// A worker's handles: the last label set's (most requests repeat it: the same route's
/// host, compared by pointer), then a map.
#[derive(Default)]
struct Handles {
    last: Option<(Key, Counted)>,
    by_key: FxHashMap<Key, Counted>,
    errors: FxHashMap<&'static str, ShardedCounter>,
}

impl Tally {
    pub fn new(metrics: Metrics, hosts: Arc<Hosts>, ui: Arc<Dashboard>, worker: usize) -> Self {
        Self {
            metrics,
            hosts,
            ui,
            worker,
            handles: Mutex::default(),
        }
    }

    /// Counts a finished request (`failed`: a tollgate error or a provider's 5xx).
    pub fn count(&self, ev: &Ended<'_>, failed: bool) {
        let host = ev.host;
        let (method, class) = (method_label(ev.method), status_class(ev.status));
        let mut h = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        let h = &mut *h;
        let hit = matches!(&h.last, Some((last, _)) if same(last, host, method, class));
        if !hit {
            let key: Key = (host.cloned(), method, class);
            let c = match h.by_key.get(&key) {
                Some(c) => c.clone(),
                None => self.handles_of(&mut h.by_key, key.clone()),
            };
            h.last = Some((key, c));
        }
        if let Some((_, counted)) = &h.last {
            counted.requests.inc();
            if let Some(f) = &counted.folded {
                f.inc();
            }
            counted.duration.observe(ev.total);
            if let Some(u) = ev.upstream {
                counted.upstream.observe(u);
            }
        }
        if let Some(code) = ev.error {
            let status = ev.status;
            h.errors
                .entry(code)
                .or_insert_with(|| {
                    self.metrics
                        .errors
                        .get_or_create(&ErrorLabels {
                            code,
                            status_class: crate::metrics::status_class(status),
                        })
                        .clone()
                })
                .inc();
        }
        self.ui.count(self.worker, ev.at, ev.total, failed);
    }

    /// Looks a label set up in the families (a worker's first request of its kind) and
    /// caches it.
    fn handles_of(&self, by_key: &mut FxHashMap<Key, Counted>, key: Key) -> Counted {
        if by_key.len() >= MAX_CACHED {
            by_key.clear();
        }
        let m = &self.metrics;
        let (host, folded) = match &key.0 {
            None => ("-".to_owned(), false),
            Some(host) => self.hosts.label(host),
        };
        let labels = RequestLabels {
            host: host.clone(),
            method: key.1,
            status_class: key.2,
        };
        let host_labels = HostLabels { host };
        let counted = Counted {
            requests: m.requests.get_or_create(&labels).clone(),
            duration: m.request_duration.get_or_create(&host_labels).clone(),
            upstream: m.upstream_duration.get_or_create(&host_labels).clone(),
            folded: folded.then(|| m.hosts_folded.clone()),
        };
        by_key.insert(key, counted.clone());
        counted
    }
}

/// Whether `key` is this label set, by pointers: a route's host is one `Arc` per
/// worker, and the labels are static strings (a miss here only costs the map's lookup).
fn same(key: &Key, host: Option<&Arc<str>>, method: &'static str, class: &'static str) -> bool {
    let same_host = match (&key.0, host) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        (None, None) => true,
        _ => false,
    };
    same_host && std::ptr::eq(key.1, method) && std::ptr::eq(key.2, class)
}
