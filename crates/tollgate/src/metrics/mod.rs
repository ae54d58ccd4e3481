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
use rustc_hash::FxHashMap;
use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

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

/// An LLM call's policy and model (the model's name bounded: `other` past 100 names).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmLabels {
    pub policy: String,
    pub model: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmTokenLabels {
    pub policy: String,
    pub model: String,
    pub kind: &'static str,
}

/// Money counted as a float.
pub type FloatCounter = Counter<f64, std::sync::atomic::AtomicU64>;
/// A gauge of a share or a fraction.
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub code: &'static str,
    /// The answer's status class (`4xx`, `5xx`): a code has one status, and the class
    /// lets a query add tollgate's refusals to the provider's 5xx without counting
    /// tollgate's own 5xx twice.
    pub status_class: &'static str,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(
        LATENCY_START,
        2.0,
        LATENCY_BUCKETS as u16,
    )
}

/// The latency buckets: 100 µs … ~105 s, doubling.
const LATENCY_START: f64 = 0.0001;
const LATENCY_BUCKETS: usize = 21;

/// A request latency, recorded by every worker into its own shard, in the latency buckets.
pub type LatencyHistogram = sharded::ShardedHistogram<LATENCY_BUCKETS>;

/// Declares tollgate's own metric families, one row each (field, type, name, help):
/// the [`Metrics`] struct and the constructor that registers them in this order. A
/// remedy's families are not here: each registers its own ([`Metrics::extension`]).
macro_rules! metrics {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $name:literal, $help:literal;)+) => {
        /// All metrics; cheap to clone (everything inside is shared).
        #[derive(Clone)]
        pub struct Metrics {
            registry: Arc<Mutex<Registry>>,
            /// Families registered by remedies, by the remedy's type.
            extensions: Arc<Mutex<FxHashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
            /// Every family shows a series at empty labels (for the docs' table).
            describe: bool,
            $($(#[$doc])* pub $field: $ty,)+
        }

        impl Metrics {
            fn new(describe: bool) -> Self {
                let mut registry = Registry::with_prefix("tollgate");
                let mut f = Families { registry: &mut registry, describe };
                $(let $field: $ty = f.add($name, $help);)+
                Metrics {
                    registry: Arc::new(Mutex::new(registry)),
                    extensions: Arc::default(),
                    describe,
                    $($field,)+
                }
            }
        }
    };
}

metrics! {
    /// These four and `hosts_folded` are counted by each request's worker, in its shard
    /// ([`sharded`]; `observe/tally.rs`).
    requests: Family<RequestLabels, sharded::ShardedCounter> = "requests", "Requests by upstream host, method and status class";
    errors: Family<ErrorLabels, sharded::ShardedCounter> = "errors", "Proxy-made error responses by x-tollgate-error code and status class";
    request_duration: Family<HostLabels, LatencyHistogram> = "request_duration_seconds", "Total time from request head to end of the response body";
    upstream_duration: Family<HostLabels, LatencyHistogram> = "upstream_duration_seconds", "Time from sending upstream to the provider's response head";
    client_connections: Gauge = "client_connections", "Open client connections on the proxy listener";
    worker_connections: Family<WorkerLabels, Counter> = "worker_connections_accepted", "Client connections accepted, by data-plane worker (how evenly the listener spreads them)";
    upstream_connections: Gauge = "upstream_connections", "Open upstream connections (pooled and in use)";
    tunnels: Gauge = "tunnels", "Open CONNECT tunnels";
    /// CONNECT tunnels to intercepted hosts: decrypted, or tunnelled after a refusal.
    intercepted: Family<KindLabels, Counter> = "intercepted_tunnels", "CONNECT tunnels to intercept.hosts: decrypted (kind=decrypted), or relayed untouched because a client refused the certificate within intercept.tunnel_refused_for (kind=tunnelled)";
    /// Decrypted tunnels that never got to HTTP, by why.
    intercept_failures: Family<KindLabels, Counter> = "intercept_failures", "Decrypted tunnels that ended before HTTP: the client refused the certificate (kind=refused: it pins, or does not trust the CA), another TLS failure (kind=handshake), no ClientHello within listen.header_read_timeout (kind=timeout), a certificate that could not be made (kind=leaf)";
    intercept_leaves: Counter = "intercept_leaf_certificates", "Leaf certificates made for intercepted hosts (each a key pair and a signature, some 50 µs of CPU on the blocking pool; a cached one is not counted)";
    /// Operations on the shared store (Redis) that failed, by why, and how long the others took.
    store_errors: Family<KindLabels, Counter> = "store_errors", "Operations on the shared store (store.backend: redis) that failed: no answer within store.timeout (kind=timeout), a connection or server error (kind=error), or not tried because a recent failure opened the circuit (kind=circuit_open); store.on_error decided each of them";
    /// Recorded on the path by every worker: sharded, not one lock ([`sharded`]).
    store_duration: sharded::ShardedHistogram<16> = "store_duration_seconds", "Round trips of the shared store's operations that succeeded (store.backend: redis)";
    /// Connections cut and HTTP/2 streams released because the client stopped reading.
    stalls: Family<KindLabels, Counter> = "stalls", "Responses the client stopped reading for listen.send_timeout: connections cut (kind=connection) and HTTP/2 streams released (kind=stream)";
    reloads: Family<ResultLabels, Counter> = "reloads", "Config reloads by result (ok, error)";
    events_dropped: Counter = "events_dropped", "Request events (access log, dashboard, diagnosis) dropped because the observer queue was full";
    ui_streams: Gauge = "ui_live_streams", "Open live-call streams of the dashboard (/ui/api/live)";
    ui_dropped: Counter = "ui_live_dropped", "Calls a dashboard live stream skipped because its browser read too slowly (the stream goes on from the newest)";
    ui_logins: Family<ResultLabels, Counter> = "ui_logins", "Dashboard logins by result: ok, error (a wrong token), throttled (refused unchecked: too many wrong tokens from the address)";
    hosts_folded: sharded::ShardedCounter = "metric_hosts_folded", "Requests counted under host=\"other\" because metrics.max_hosts distinct hosts were already labels";
    /// The four LLM families are counted by each call's worker, in its shard
    /// (`observe/llm.rs`).
    llm_calls: Family<LlmLabels, sharded::ShardedCounter> = "llm_calls", "LLM calls whose answers were read (policies with `llm`, `token_limit` or `budget`), by policy and model (the answer's; at most 100 names, then `other`)";
    llm_tokens: Family<LlmTokenLabels, sharded::ShardedCounter> = "llm_tokens", "Tokens of LLM calls as their answers' usage counts them, by policy, model and kind (input, output, cached, cache_write, reasoning; input counts cached and cache_write, output counts reasoning); a stream cut before its usage counts its estimate";
    llm_cost: Family<LlmLabels, sharded::NanoCounter> = "llm_cost_usd", "What LLM calls cost in US dollars by their policy's price table, by policy and model (unpriced models are not counted)";
    llm_first_byte: Family<NameLabels, LatencyHistogram> = "llm_time_to_first_byte_seconds", "From an LLM call's admission to the first bytes of its answer's body (time to first token on a stream), by policy";
    /// Counted on the path by the call's worker, in its shard.
    llm_prompt_strings: Family<KindLabels, sharded::ShardedCounter> = "llm_prompt_strings", "Strings of LLM prompts that a token limit or a budget counted with the model's tokenizer: by the tokenizer (kind=counted), or found in the worker's memory of the counts it made (kind=remembered)";
    /// Counted on the path by every worker: sharded per worker ([`sharded`]).
    remedy_actions: Family<ActionLabels, sharded::ShardedCounter> = "remedy_actions", "Remedy actions by policy, remedy and action (allowed, rejected, queued, dequeued, timed_out, queue_full, hit, miss, bypass, stored, revalidated, coalesced, retried, budget_exhausted, gave_up, tripped, closed, throttled, waited)";
    queue_depth: Family<NameLabels, Gauge> = "queue_depth", "Requests waiting in a rate-limit or concurrency queue, by limit name";
    queue_wait: Family<NameLabels, Histogram> = "queue_wait_seconds", "Time requests waited in a queue before going on, by limit name";
    har_entries: Family<SinkLabels, Counter> = "har_entries", "HAR entries encoded (sink=\"encoded\") and sent to the collector (sink=\"collector\")";
    har_dropped: Family<SinkLabels, Counter> = "har_dropped", "HAR entries dropped: the writer's queue was full (queue), the collector's buffer was full (collector), a file write failed (file)";
    spans_exported: Counter = "spans_exported", "Spans accepted by the OTLP endpoint";
    spans_dropped: Counter = "spans_dropped", "Spans dropped because the export buffer was full";
    endpoint_requests: Family<EndpointStatusLabels, Counter> = "endpoint_requests", "Requests by discovered endpoint (host, method, path template) and status class";
    endpoint_duration: Family<EndpointLabels, Histogram> = "endpoint_duration_seconds", "Total time by discovered endpoint";
    endpoint_upstream_duration: Family<EndpointLabels, Histogram> = "endpoint_upstream_duration_seconds", "Provider time (sending to response head) by discovered endpoint";
    endpoint_request_bytes: Family<EndpointLabels, Counter> = "endpoint_request_bytes", "Request body bytes by discovered endpoint";
    endpoint_response_bytes: Family<EndpointLabels, Counter> = "endpoint_response_bytes", "Response body bytes by discovered endpoint";
    endpoint_remedy_actions: Family<EndpointActionLabels, Counter> = "endpoint_remedy_actions", "Remedy actions by discovered endpoint, remedy and action";
    endpoints_folded: Counter = "endpoints_folded", "Requests counted under endpoint or host `other` because a discovery cap was reached";
    aggregate_requests: Family<AggregateResultLabels, Counter> = "aggregate_requests", "Calls of aggregated endpoints by method, endpoint (path template) and result (complete, partial, failed)";
    aggregate_duration: Family<AggregateLabels, Histogram> = "aggregate_duration_seconds", "Total time of aggregated endpoint calls, by method and endpoint";
    aggregate_backend_requests: Family<AggregateBackendResultLabels, Counter> = "aggregate_backend_requests", "Backend calls of aggregated endpoints by method, endpoint, backend name and result (ok, failed, timeout, skipped)";
    aggregate_backend_duration: Family<AggregateBackendLabels, Histogram> = "aggregate_backend_duration_seconds", "Time of each backend call of an aggregated endpoint, from sending to its answer read";
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Self::new(false);
        m.preset();
        m
    }
}

impl Metrics {
    /// Every label set of the rare events that is known in advance, exported at 0 from
    /// the start: a series that appeared only with its first event would start at 1,
    /// and Prometheus's `increase()` and `rate()` would never see that event.
    fn preset(&self) {
        for kind in ["connection", "stream"] {
            drop(self.stalls.get_or_create(&KindLabels { kind }));
        }
        for result in ["ok", "error"] {
            drop(self.reloads.get_or_create(&ResultLabels { result }));
        }
        for result in ["ok", "error", "throttled"] {
            drop(self.ui_logins.get_or_create(&ResultLabels { result }));
        }
        for sink in ["queue", "collector", "file"] {
            drop(self.har_dropped.get_or_create(&SinkLabels { sink }));
        }
        for kind in ["timeout", "error", "circuit_open"] {
            drop(self.store_errors.get_or_create(&KindLabels { kind }));
        }
        for kind in ["counted", "remembered"] {
            drop(self.llm_prompt_strings.get_or_create(&KindLabels { kind }));
        }
        for kind in ["decrypted", "tunnelled"] {
            drop(self.intercepted.get_or_create(&KindLabels { kind }));
        }
        for kind in ["refused", "handshake", "timeout", "leaf"] {
            drop(self.intercept_failures.get_or_create(&KindLabels { kind }));
        }
    }
}

/// Where a capability registers its metric families (prefixed `tollgate_`).
pub struct Families<'a> {
    registry: &'a mut Registry,
    describe: bool,
}

impl Families<'_> {
    /// Makes a metric of type `M` (a histogram with the latency buckets), registers it
    /// as `name` with `help`, and returns it.
    pub fn add<M: Registered + Make + Clone>(&mut self, name: &str, help: &str) -> M {
        let metric = M::make();
        if self.describe {
            metric.describe();
        }
        self.registry.register(name, help, metric.clone());
        metric
    }
}

/// A metric a [`Families`] registers.
pub trait Registered: prometheus_client::registry::Metric {
    /// Shows its label names (a family gets a series at empty labels).
    fn describe(&self) {}
}

impl Registered for Counter {}
impl Registered for Gauge {}
impl<const N: usize> Registered for sharded::ShardedHistogram<N> {}

impl<L, M, C> Registered for Family<L, M, C>
where
    L: Clone
        + std::hash::Hash
        + Eq
        + Default
        + prometheus_client::encoding::EncodeLabelSet
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    M: prometheus_client::encoding::EncodeMetric
        + prometheus_client::metrics::TypedMetric
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    C: prometheus_client::metrics::family::MetricConstructor<M>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn describe(&self) {
        let _ = self.get_or_create(&L::default());
    }
}

/// How each kind of metric is made: histograms with the latency buckets.
pub trait Make {
    fn make() -> Self;
}

impl Make for Counter {
    fn make() -> Self {
        Counter::default()
    }
}

impl Make for Gauge {
    fn make() -> Self {
        Gauge::default()
    }
}

impl<const N: usize> Make for sharded::ShardedHistogram<N> {
    fn make() -> Self {
        sharded::ShardedHistogram::exponential(0.00005, 2.0)
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, Counter> {
    fn make() -> Self {
        Family::default()
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, sharded::ShardedCounter> {
    fn make() -> Self {
        Family::default()
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, sharded::NanoCounter> {
    fn make() -> Self {
        Family::default()
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, FloatCounter> {
    fn make() -> Self {
        Family::default()
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, FloatGauge> {
    fn make() -> Self {
        Family::default()
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, Gauge> {
    fn make() -> Self {
        Family::default()
    }
}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, LatencyHistogram> {
    fn make() -> Self {
        Family::new_with_constructor(|| LatencyHistogram::exponential(LATENCY_START, 2.0))
    }
}

impl Make for sharded::ShardedCounter {
    fn make() -> Self {
        Self::default()
    }
}

impl Registered for sharded::ShardedCounter {}

impl<L: Clone + std::hash::Hash + Eq> Make for Family<L, Histogram> {
    fn make() -> Self {
        Family::new_with_constructor(|| Histogram::new(latency_buckets()))
    }
}

impl Metrics {
    /// The families a capability registered under `key` (a remedy's type): registered by
    /// `register` the first time, the same ones after that. Called when a config is
    /// built, never per request.
    pub fn extension<T: Send + Sync + 'static>(
        &self,
        key: TypeId,
        register: impl FnOnce(&mut Families<'_>) -> T,
    ) -> Arc<T> {
        let mut ext = self.extensions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = ext.get(&key).and_then(|e| e.clone().downcast::<T>().ok()) {
            return found;
        }
        let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut f = Families {
            registry: &mut registry,
            describe: self.describe,
        };
        let made = Arc::new(register(&mut f));
        ext.insert(key, made.clone());
        made
    }

    /// Every family of tollgate's own with one series at empty labels, so that its label
    /// names show: with `extend` registering the remedies' families (the policy engine's
    /// list), what the docs' table of metrics is generated from.
    pub fn described(extend: impl FnOnce(&Metrics)) -> String {
        let m = Metrics::new(true);
        extend(&m);
        m.encode()
    }

    /// Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut out, &registry)
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

#[cfg(test)]
mod tests {
    /// A rare event's first occurrence is an increase from 0, not a new series at 1.
    #[test]
    fn the_rare_events_label_sets_are_exported_at_zero_from_the_start() {
        let m = super::Metrics::default();
        crate::policy::register_metrics(&m);
        let text = m.encode();
        for line in [
            "tollgate_reloads_total{result=\"ok\"} 0",
            "tollgate_reloads_total{result=\"error\"} 0",
            "tollgate_stalls_total{kind=\"connection\"} 0",
            "tollgate_stalls_total{kind=\"stream\"} 0",
            "tollgate_ui_logins_total{result=\"error\"} 0",
            "tollgate_har_dropped_total{sink=\"queue\"} 0",
            "tollgate_errors_total{code=\"rate_limited\",status_class=\"4xx\"} 0",
            "tollgate_errors_total{code=\"upstream_timeout\",status_class=\"5xx\"} 0",
            "tollgate_errors_total{code=\"ambiguous_path\",status_class=\"4xx\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }
}
