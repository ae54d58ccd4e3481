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
use std::collections::HashMap;
use std::time::Duration;

struct Handles {
    requests: Counter,
    duration: Histogram,
    upstream: Histogram,
    request_bytes: Counter,
    response_bytes: Counter,
}

type Key = (String, &'static str, String, &'static str);

#[derive(Default)]
pub struct EndpointMetrics {
    handles: HashMap<Key, Handles>,
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
        let key: Key = (
            at.host.clone(),
            s.method,
            at.endpoint.clone(),
            status_class(s.status),
        );
        if self.handles.len() >= MAX_CACHED && !self.handles.contains_key(&key) {
            self.handles.clear();
        }
        let h = self.handles.entry(key).or_insert_with(|| {
            let e = EndpointLabels {
                host: at.host.clone(),
                method: s.method,
                endpoint: at.endpoint.clone(),
            };
            Handles {
                requests: m
                    .endpoint_requests
                    .get_or_create(&EndpointStatusLabels {
                        host: at.host.clone(),
                        method: s.method,
                        endpoint: at.endpoint.clone(),
                        status_class: status_class(s.status),
                    })
                    .clone(),
                duration: m.endpoint_duration.get_or_create(&e).clone(),
                upstream: m.endpoint_upstream_duration.get_or_create(&e).clone(),
                request_bytes: m.endpoint_request_bytes.get_or_create(&e).clone(),
                response_bytes: m.endpoint_response_bytes.get_or_create(&e).clone(),
            }
        });
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
                    host: at.host.clone(),
                    method: s.method,
                    endpoint: at.endpoint.clone(),
                    remedy: a.remedy,
                    action: a.action,
                })
                .inc();
        }
    }
}
