//! Per-endpoint Prometheus series (`tollgate_endpoint_*`), labelled by the host and
//! endpoint discovery counted the call under: the caps that bound discovery bound these
//! label sets too. Handles are cached so a known endpoint costs no registry lookup.

use super::Counted;
use crate::diagnosis::Acted;
use crate::metrics::{
    EndpointActionLabels, EndpointLabels, EndpointStatusLabels, Metrics, status_class,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use std::time::Duration;

struct Handles {
    requests: Counter,
    duration: Histogram,
    upstream: Histogram,
    request_bytes: Counter,
    response_bytes: Counter,
}

/// Host, method, endpoint, status class.
#[derive(Hash, PartialEq, Eq)]
struct Key<S> {
    host: S,
    method: &'static str,
    endpoint: S,
    status_class: &'static str,
}

/// A known endpoint is looked up by borrowed strings: no key is built per call.
impl hashbrown::Equivalent<Key<Box<str>>> for Key<&str> {
    fn equivalent(&self, k: &Key<Box<str>>) -> bool {
        *self.host == *k.host
            && self.method == k.method
            && *self.endpoint == *k.endpoint
            && self.status_class == k.status_class
    }
}

/// Capped by discovery's own caps (see `discovery`): Fx rather than SipHash.
#[derive(Default)]
pub struct EndpointMetrics {
    handles: hashbrown::HashMap<Key<Box<str>>, Handles, rustc_hash::FxBuildHasher>,
}

/// Bound on cached handle sets; past it the cache starts again (the registry keeps the series).
const MAX_CACHED: usize = 20_000;

pub struct Sample<'a> {
    pub method: &'static str,
    pub status: u16,
    pub total: Duration,
    pub upstream: Option<Duration>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub acted: &'a [Acted],
}

impl EndpointMetrics {
    pub fn record(&mut self, m: &Metrics, at: &Counted, s: &Sample) {
        if at.folded {
            m.endpoints_folded.inc();
        }
        let key = Key {
            host: at.host,
            method: s.method,
            endpoint: at.endpoint,
            status_class: status_class(s.status),
        };
        if !self.handles.contains_key(&key) {
            if self.handles.len() >= MAX_CACHED {
                self.handles.clear();
            }
            let owned = Key {
                host: key.host.into(),
                method: key.method,
                endpoint: key.endpoint.into(),
                status_class: key.status_class,
            };
            let handles = Self::handles(m, at, s);
            self.handles.insert(owned, handles);
        }
        let Some(h) = self.handles.get(&key) else {
            return;
        };
        h.requests.inc();
        h.duration.observe(s.total.as_secs_f64());
        if let Some(u) = s.upstream {
            h.upstream.observe(u.as_secs_f64());
        }
        h.request_bytes.inc_by(s.request_bytes);
        h.response_bytes.inc_by(s.response_bytes);
        for a in s.acted {
            m.endpoint_remedy_actions
                .get_or_create(&EndpointActionLabels {
                    host: at.host.to_owned(),
                    method: s.method,
                    endpoint: at.endpoint.to_owned(),
                    remedy: a.remedy,
                    action: a.action,
                })
                .inc();
        }
    }

    fn handles(m: &Metrics, at: &Counted, s: &Sample) -> Handles {
        let e = EndpointLabels {
            host: at.host.to_owned(),
            method: s.method,
            endpoint: at.endpoint.to_owned(),
        };
        Handles {
            requests: m
                .endpoint_requests
                .get_or_create(&EndpointStatusLabels {
                    host: at.host.to_owned(),
                    method: s.method,
                    endpoint: at.endpoint.to_owned(),
                    status_class: status_class(s.status),
                })
                .clone(),
            duration: m.endpoint_duration.get_or_create(&e).clone(),
            upstream: m.endpoint_upstream_duration.get_or_create(&e).clone(),
            request_bytes: m.endpoint_request_bytes.get_or_create(&e).clone(),
            response_bytes: m.endpoint_response_bytes.get_or_create(&e).clone(),
        }
    }
}
