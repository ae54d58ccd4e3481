//! What one call of an aggregated endpoint did, for the observer thread: the endpoint's
//! result (complete, partial, failed) and each backend's (ok, failed, timeout, skipped)
//! with its time. The observer turns it into metrics (labels bounded by the config: the
//! endpoint's method and path template, the backend's name) and into the `aggregated`
//! statistics that `GET /discover` lists (`diagnosis::aggregated`).

use crate::metrics::{
    AggregateBackendLabels, AggregateBackendResultLabels, AggregateLabels, AggregateResultLabels,
    Metrics,
};
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
