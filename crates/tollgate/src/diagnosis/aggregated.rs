//! Every aggregated endpoint's calls since start, from their outcomes: results and
//! latency percentiles, the endpoint's and each backend's (`GET /discover`, `aggregated`).

use crate::aggregate::Endpoints;
use crate::aggregate::outcome::{Outcome, SKIPPED};
use crate::diagnosis::discovery::percentiles;
use crate::metrics::method_label;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
    pub fn to_json(&self, declared: &Endpoints) -> Value {
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
