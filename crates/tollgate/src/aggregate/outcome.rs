//! What one call of an aggregated endpoint did, for the observer thread: the endpoint's
//! result (complete, partial, failed) and each backend's (ok, failed, timeout, skipped)
//! with its time. The observer turns it into metrics (labels bounded by the config: the
//! endpoint's method and path template, the backend's name) and into the `aggregated`
//! statistics that `GET /discover` lists.

use crate::diagnosis::discovery::percentiles;
use crate::metrics::{
    AggregateBackendLabels, AggregateBackendResultLabels, AggregateLabels, AggregateResultLabels,
    Metrics, method_label,
};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The endpoint's result: every backend answered, some did, none did.
pub const COMPLETE: &str = "complete";
pub const PARTIAL: &str = "partial";
pub const FAILED: &str = "failed";

/// A backend's result: answered (JSON 2xx; a no-op backend: any status below 500), failed
/// (error, other status, not JSON, too large), no answer within its limit, or not called
/// (its URL needs an answer that is missing).
pub const OK: &str = "ok";
pub const BACKEND_FAILED: &str = "failed";
pub const TIMEOUT: &str = "timeout";
pub const SKIPPED: &str = "skipped";

/// One endpoint call.
pub struct Outcome {
    pub method: &'static str,
    /// The endpoint's path template.
    pub endpoint: Arc<str>,
    pub result: &'static str,
    pub backends: Vec<BackendOutcome>,
}

pub struct BackendOutcome {
    pub name: Arc<str>,
    pub result: &'static str,
    /// From sending to the answer read (or the failure).
    pub took: Duration,
}

impl Outcome {
    /// Counts this call in the aggregate metric families (on the observer thread).
    pub fn record_metrics(&self, m: &Metrics, total: Duration) {
        let e = AggregateLabels {
            method: self.method,
            endpoint: self.endpoint.to_string(),
        };
        m.aggregate_requests
            .get_or_create(&AggregateResultLabels {
                method: self.method,
                endpoint: e.endpoint.clone(),
                result: self.result,
            })
            .inc();
        m.aggregate_duration
            .get_or_create(&e)
            .observe(total.as_secs_f64());
        for b in &self.backends {
            let labels = AggregateBackendLabels {
                method: self.method,
                endpoint: e.endpoint.clone(),
                backend: b.name.to_string(),
            };
            if b.result != SKIPPED {
                m.aggregate_backend_duration
                    .get_or_create(&labels)
                    .observe(b.took.as_secs_f64());
            }
            m.aggregate_backend_requests
                .get_or_create(&AggregateBackendResultLabels {
                    method: labels.method,
                    endpoint: labels.endpoint,
                    backend: labels.backend,
                    result: b.result,
                })
                .inc();
        }
    }
}

/// Most endpoints kept (a reload can declare new ones); calls of others are not listed.
const MAX_ENDPOINTS: usize = 1000;

fn histogram() -> Histogram<u32> {
    Histogram::new(2).expect("2 significant figures is valid")
}

struct Counts {
    results: BTreeMap<&'static str, u64>,
    latency: Histogram<u32>,
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            results: BTreeMap::new(),
            latency: histogram(),
        }
    }
}

impl Counts {
    fn add(&mut self, result: &'static str, took: Option<Duration>) {
        *self.results.entry(result).or_default() += 1;
        if let Some(t) = took {
            crate::diagnosis::discovery::record_us(&mut self.latency, t.as_micros() as u64);
        }
    }

    fn to_json(&self) -> (u64, Value, Value) {
        (
            self.results.values().sum(),
            json!(self.results),
            percentiles(&self.latency),
        )
    }
}

#[derive(Default)]
struct EndpointStats {
    calls: Counts,
    backends: BTreeMap<Arc<str>, Counts>,
}

/// Every aggregated endpoint's calls since start: results and latency percentiles, the
/// endpoint's and each backend's (`GET /discover`, `aggregated`).
#[derive(Default)]
pub struct AggregateStats {
    endpoints: BTreeMap<(&'static str, Arc<str>), EndpointStats>,
}

impl AggregateStats {
    pub fn record(&mut self, o: &Outcome, total: Duration) {
        let key = (o.method, o.endpoint.clone());
        if !self.endpoints.contains_key(&key) && self.endpoints.len() >= MAX_ENDPOINTS {
            return;
        }
        let e = self.endpoints.entry(key).or_default();
        e.calls.add(o.result, Some(total));
        for b in &o.backends {
            e.backends
                .entry(b.name.clone())
                .or_default()
                .add(b.result, (b.result != SKIPPED).then_some(b.took));
        }
    }

    /// Every endpoint the config declares, in its order, with its calls so far (zero
    /// before the first); endpoints a reload removed are no longer listed.
    pub fn to_json(&self, declared: &super::Endpoints) -> Value {
        let none = Counts::default();
        let empty = EndpointStats::default();
        Value::Array(
            declared
                .iter()
                .map(|e| {
                    let method = method_label(&e.method);
                    let s = self
                        .endpoints
                        .get(&(method, e.label.clone()))
                        .unwrap_or(&empty);
                    let (count, results, latency) = s.calls.to_json();
                    json!({
                        "method": method, "endpoint": &*e.label, "count": count,
                        "results": results, "latency_ms": latency,
                        "backends": e.backends.iter().map(|b| {
                            let (count, results, latency) =
                                s.backends.get(&b.name).unwrap_or(&none).to_json();
                            json!({
                                "name": &*b.name, "host": b.target.authority.as_str(),
                                "count": count, "results": results, "latency_ms": latency,
                            })
                        }).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        )
    }
}
