//! Prometheus metrics (prometheus-client). Gauges are atomics updated in place; per-request
//! counters and histograms are updated by the observer thread from request events, and the
//! shared store's round trips, timed on the path, go into a histogram sharded per thread
//! ([`sharded`]), so the request path never takes a metrics lock.

pub mod sharded;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub host: String,
    pub method: &'static str,
    pub status_class: &'static str,
}

/// A data-plane worker's index: bounded by `--threads`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabels {
    pub worker: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub host: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub policy: String,
    pub remedy: &'static str,
    pub action: &'static str,
}

/// A configured name (policy, limit, breaker): bounded by the config.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabels {
    pub name: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: &'static str,
}

/// An endpoint of discovery: host and template bounded by its caps.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub host: String,
    pub method: &'static str,
    pub endpoint: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointStatusLabels {
    pub host: String,
    pub method: &'static str,
    pub endpoint: String,
    pub status_class: &'static str,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointActionLabels {
    pub host: String,
    pub method: &'static str,
    pub endpoint: String,
    pub remedy: &'static str,
    pub action: &'static str,
}

/// An aggregated endpoint (`endpoints:`): method and path template, bounded by the config.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AggregateLabels {
    pub method: &'static str,
    pub endpoint: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AggregateResultLabels {
    pub method: &'static str,
    pub endpoint: String,
    pub result: &'static str,
}

/// A backend of an aggregated endpoint, by its configured name.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AggregateBackendLabels {
    pub method: &'static str,
    pub endpoint: String,
    pub backend: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AggregateBackendResultLabels {
    pub method: &'static str,
    pub endpoint: String,
    pub backend: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub code: &'static str,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    // 100 µs … ~105 s, doubling.
    prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 21)
}

/// All metrics; cheap to clone (everything inside is shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub requests: Family<RequestLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub request_duration: Family<HostLabels, Histogram>,
    pub upstream_duration: Family<HostLabels, Histogram>,
    pub client_connections: Gauge,
    pub worker_connections: Family<WorkerLabels, Counter>,
    pub upstream_connections: Gauge,
    pub tunnels: Gauge,
    /// CONNECT tunnels to intercepted hosts: decrypted, or tunnelled after a refusal.
    pub intercepted: Family<KindLabels, Counter>,
    /// Decrypted tunnels that never got to HTTP, by why.
    pub intercept_failures: Family<KindLabels, Counter>,
    pub intercept_leaves: Counter,
    /// Operations on the shared store (Redis) that failed, by why, and how long the others took.
    pub store_errors: Family<KindLabels, Counter>,
    /// Recorded on the path by every worker: sharded, not one lock ([`sharded`]).
    pub store_duration: sharded::ShardedHistogram<16>,
    /// Connections cut and HTTP/2 streams released because the client stopped reading.
    pub stalls: Family<KindLabels, Counter>,
    pub reloads: Family<ResultLabels, Counter>,
    pub events_dropped: Counter,
    pub hosts_folded: Counter,
    pub remedy_actions: Family<ActionLabels, Counter>,
    pub queue_depth: Family<NameLabels, Gauge>,
    pub queue_wait: Family<NameLabels, Histogram>,
    pub cache_entries: Family<NameLabels, Gauge>,
    pub cache_bytes: Family<NameLabels, Gauge>,
    pub breaker_state: Family<NameLabels, Gauge>,
    pub quota_remaining: Family<NameLabels, Gauge>,
    pub har_entries: Family<SinkLabels, Counter>,
    pub har_dropped: Family<SinkLabels, Counter>,
    pub spans_exported: Counter,
    pub spans_dropped: Counter,
    pub endpoint_requests: Family<EndpointStatusLabels, Counter>,
    pub endpoint_duration: Family<EndpointLabels, Histogram>,
    pub endpoint_upstream_duration: Family<EndpointLabels, Histogram>,
    pub endpoint_request_bytes: Family<EndpointLabels, Counter>,
    pub endpoint_response_bytes: Family<EndpointLabels, Counter>,
    pub endpoint_remedy_actions: Family<EndpointActionLabels, Counter>,
    pub endpoints_folded: Counter,
    pub aggregate_requests: Family<AggregateResultLabels, Counter>,
    pub aggregate_duration: Family<AggregateLabels, Histogram>,
    pub aggregate_backend_requests: Family<AggregateBackendResultLabels, Counter>,
    pub aggregate_backend_duration: Family<AggregateBackendLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("tollgate");
        let hist = || Histogram::new(latency_buckets());
        let m = Metrics {
            registry: Arc::default(),
            requests: Family::default(),
            errors: Family::default(),
            request_duration: Family::new_with_constructor(hist),
            upstream_duration: Family::new_with_constructor(hist),
            client_connections: Gauge::default(),
            worker_connections: Family::default(),
            upstream_connections: Gauge::default(),
            tunnels: Gauge::default(),
            intercepted: Family::default(),
            intercept_failures: Family::default(),
            intercept_leaves: Counter::default(),
            store_errors: Family::default(),
            store_duration: sharded::ShardedHistogram::exponential(0.00005, 2.0),
            stalls: Family::default(),
            reloads: Family::default(),
            events_dropped: Counter::default(),
            hosts_folded: Counter::default(),
            remedy_actions: Family::default(),
            queue_depth: Family::default(),
            queue_wait: Family::new_with_constructor(hist),
            cache_entries: Family::default(),
            cache_bytes: Family::default(),
            breaker_state: Family::default(),
            quota_remaining: Family::default(),
            har_entries: Family::default(),
            har_dropped: Family::default(),
            spans_exported: Counter::default(),
            spans_dropped: Counter::default(),
            endpoint_requests: Family::default(),
            endpoint_duration: Family::new_with_constructor(hist),
            endpoint_upstream_duration: Family::new_with_constructor(hist),
            endpoint_request_bytes: Family::default(),
            endpoint_response_bytes: Family::default(),
            endpoint_remedy_actions: Family::default(),
            endpoints_folded: Counter::default(),
            aggregate_requests: Family::default(),
            aggregate_duration: Family::new_with_constructor(hist),
            aggregate_backend_requests: Family::default(),
            aggregate_backend_duration: Family::new_with_constructor(hist),
        };
        r.register(
            "requests",
            "Requests by upstream host, method and status class",
            m.requests.clone(),
        );
        r.register(
            "errors",
            "Proxy-made error responses by x-tollgate-error code",
            m.errors.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Total time from request head to end of the response body",
            m.request_duration.clone(),
        );
        r.register(
            "upstream_duration_seconds",
            "Time from sending upstream to the provider's response head",
            m.upstream_duration.clone(),
        );
        r.register(
            "client_connections",
            "Open client connections on the proxy listener",
            m.client_connections.clone(),
        );
        r.register(
            "worker_connections_accepted",
            "Client connections accepted, by data-plane worker (how evenly the listener spreads them)",
            m.worker_connections.clone(),
        );
        r.register(
            "upstream_connections",
            "Open upstream connections (pooled and in use)",
            m.upstream_connections.clone(),
        );
        r.register("tunnels", "Open CONNECT tunnels", m.tunnels.clone());
        r.register(
            "intercepted_tunnels",
            "CONNECT tunnels to intercept.hosts: decrypted (kind=decrypted), or relayed untouched because a client refused the certificate within intercept.tunnel_refused_for (kind=tunnelled)",
            m.intercepted.clone(),
        );
        r.register(
            "intercept_failures",
            "Decrypted tunnels that ended before HTTP: the client refused the certificate (kind=refused: it pins, or does not trust the CA), another TLS failure (kind=handshake), no ClientHello within listen.header_read_timeout (kind=timeout), a certificate that could not be made (kind=leaf)",
            m.intercept_failures.clone(),
        );
        r.register(
            "intercept_leaf_certificates",
            "Leaf certificates made for intercepted hosts (each a key pair and a signature, some 50 µs of CPU on the blocking pool; a cached one is not counted)",
            m.intercept_leaves.clone(),
        );
        r.register(
            "store_errors",
            "Operations on the shared store (store.backend: redis) that failed: no answer within store.timeout (kind=timeout), a connection or server error (kind=error), or not tried because a recent failure opened the circuit (kind=circuit_open); store.on_error decided each of them",
            m.store_errors.clone(),
        );
        r.register(
            "store_duration_seconds",
            "Round trips of the shared store's operations that succeeded (store.backend: redis)",
            m.store_duration.clone(),
        );
        r.register(
            "stalls",
            "Responses the client stopped reading for listen.send_timeout: connections cut (kind=connection) and HTTP/2 streams released (kind=stream)",
            m.stalls.clone(),
        );
        r.register(
            "reloads",
            "Config reloads by result (ok, error)",
            m.reloads.clone(),
        );
        r.register(
            "events_dropped",
            "Request events (metrics, access log) dropped because the observer queue was full",
            m.events_dropped.clone(),
        );
        r.register(
            "metric_hosts_folded",
            "Requests counted under host=\"other\" because metrics.max_hosts distinct hosts were already labels",
            m.hosts_folded.clone(),
        );
        r.register(
            "remedy_actions",
            "Remedy actions by policy, remedy and action (allowed, rejected, queued, dequeued, timed_out, queue_full, hit, miss, bypass, stored, revalidated, coalesced, retried, budget_exhausted, gave_up, tripped, closed, throttled, waited)",
            m.remedy_actions.clone(),
        );
        r.register(
            "queue_depth",
            "Requests waiting in a rate-limit or concurrency queue, by limit name",
            m.queue_depth.clone(),
        );
        r.register(
            "queue_wait_seconds",
            "Time requests waited in a queue before going on, by limit name",
            m.queue_wait.clone(),
        );
        r.register(
            "cache_entries",
            "Cached responses, by policy",
            m.cache_entries.clone(),
        );
        r.register(
            "cache_bytes",
            "Bytes held by a policy's cache",
            m.cache_bytes.clone(),
        );
        r.register(
            "breaker_state",
            "Circuit breaker state by breaker name: 0 closed, 1 open, 2 half-open",
            m.breaker_state.clone(),
        );
        r.register(
            "quota_remaining",
            "Requests left in a quota's current period, by quota name",
            m.quota_remaining.clone(),
        );
        r.register(
            "har_entries",
            "HAR entries encoded (sink=\"encoded\") and sent to the collector (sink=\"collector\")",
            m.har_entries.clone(),
        );
        r.register(
            "har_dropped",
            "HAR entries dropped: the writer's queue was full (queue), the collector's buffer was full (collector), a file write failed (file)",
            m.har_dropped.clone(),
        );
        r.register(
            "spans_exported",
            "Spans accepted by the OTLP endpoint",
            m.spans_exported.clone(),
        );
        r.register(
            "spans_dropped",
            "Spans dropped because the export buffer was full",
            m.spans_dropped.clone(),
        );
        r.register(
            "endpoint_requests",
            "Requests by discovered endpoint (host, method, path template) and status class",
            m.endpoint_requests.clone(),
        );
        r.register(
            "endpoint_duration_seconds",
            "Total time by discovered endpoint",
            m.endpoint_duration.clone(),
        );
        r.register(
            "endpoint_upstream_duration_seconds",
            "Provider time (sending to response head) by discovered endpoint",
            m.endpoint_upstream_duration.clone(),
        );
        r.register(
            "endpoint_request_bytes",
            "Request body bytes by discovered endpoint",
            m.endpoint_request_bytes.clone(),
        );
        r.register(
            "endpoint_response_bytes",
            "Response body bytes by discovered endpoint",
            m.endpoint_response_bytes.clone(),
        );
        r.register(
            "endpoint_remedy_actions",
            "Remedy actions by discovered endpoint, remedy and action",
            m.endpoint_remedy_actions.clone(),
        );
        r.register(
            "endpoints_folded",
            "Requests counted under endpoint or host `other` because a discovery cap was reached",
            m.endpoints_folded.clone(),
        );
        r.register(
            "aggregate_requests",
            "Calls of aggregated endpoints by method, endpoint (path template) and result (complete, partial, failed)",
            m.aggregate_requests.clone(),
        );
        r.register(
            "aggregate_duration_seconds",
            "Total time of aggregated endpoint calls, by method and endpoint",
            m.aggregate_duration.clone(),
        );
        r.register(
            "aggregate_backend_requests",
            "Backend calls of aggregated endpoints by method, endpoint, backend name and result (ok, failed, timeout, skipped)",
            m.aggregate_backend_requests.clone(),
        );
        r.register(
            "aggregate_backend_duration_seconds",
            "Time of each backend call of an aggregated endpoint, from sending to its answer read",
            m.aggregate_backend_duration.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            ..m
        }
    }
}

impl Metrics {
    /// Prometheus text exposition format.
    /// Every metric in Prometheus text, each family with one series at empty labels so
    /// that its label names show: what the docs' table of metrics is generated from. The
    /// destructuring names every field, so a metric cannot be left out of it.
    pub fn described() -> String {
        fn touch<L, M, C>(f: &Family<L, M, C>)
        where
            L: Clone + std::hash::Hash + Eq + Default,
            C: prometheus_client::metrics::family::MetricConstructor<M>,
        {
            let _ = f.get_or_create(&L::default());
        }
        let m = Metrics::default();
        let Metrics {
            registry: _,
            requests,
            errors,
            request_duration,
            upstream_duration,
            worker_connections,
            stalls,
            intercepted,
            intercept_failures,
            store_errors,
            reloads,
            remedy_actions,
            queue_depth,
            queue_wait,
            cache_entries,
            cache_bytes,
            breaker_state,
            quota_remaining,
            har_entries,
            har_dropped,
            endpoint_requests,
            endpoint_duration,
            endpoint_upstream_duration,
            endpoint_request_bytes,
            endpoint_response_bytes,
            endpoint_remedy_actions,
            aggregate_requests,
            aggregate_duration,
            aggregate_backend_requests,
            aggregate_backend_duration,
            client_connections: _,
            upstream_connections: _,
            tunnels: _,
            intercept_leaves: _,
            store_duration: _,
            events_dropped: _,
            hosts_folded: _,
            spans_exported: _,
            spans_dropped: _,
            endpoints_folded: _,
        } = &m;
        touch(requests);
        touch(errors);
        touch(request_duration);
        touch(upstream_duration);
        touch(worker_connections);
        touch(stalls);
        touch(intercepted);
        touch(intercept_failures);
        touch(store_errors);
        touch(reloads);
        touch(remedy_actions);
        touch(queue_depth);
        touch(queue_wait);
        touch(cache_entries);
        touch(cache_bytes);
        touch(breaker_state);
        touch(quota_remaining);
        touch(har_entries);
        touch(har_dropped);
        touch(endpoint_requests);
        touch(endpoint_duration);
        touch(endpoint_upstream_duration);
        touch(endpoint_request_bytes);
        touch(endpoint_response_bytes);
        touch(endpoint_remedy_actions);
        touch(aggregate_requests);
        touch(aggregate_duration);
        touch(aggregate_backend_requests);
        touch(aggregate_backend_duration);
        m.encode()
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// The method as a label: the methods of RFC 9110 §9 and PATCH (RFC 5789) by name, any
/// other (client input of any length) as `other`, so the label set stays bounded.
pub fn method_label(m: &http::Method) -> &'static str {
    use http::Method as M;
    match *m {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::DELETE => "DELETE",
        M::CONNECT => "CONNECT",
        M::OPTIONS => "OPTIONS",
        M::TRACE => "TRACE",
        M::PATCH => "PATCH",
        _ => "other",
    }
}

pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
