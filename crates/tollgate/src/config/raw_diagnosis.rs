//! Raw types of the `diagnosis` section: HAR capture, endpoint discovery, traces. The
//! YAML as written, unknown keys rejected; validated by `validate_diagnosis.rs`.

use crate::fields::units::{DAY_MS, Dur, HOUR_MS, Int, SEC_MS, Size};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawDiagnosis {
    /// Endpoint discovery: every call aggregated by method, host and path template (`GET /discover`, `tollgate discover`), and optional per-endpoint metrics.
    pub discovery: RawDiscovery,
    /// HAR capture: HAR 1.2 entries of the calls selected, redacted, written off the request path to files, an HTTP collector or standard output.
    pub har: RawHar,
    /// OpenTelemetry traces exported over OTLP/HTTP (protobuf), with W3C `traceparent` continued and propagated to providers.
    pub traces: RawTraces,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawDiscovery {
    /// Aggregate every call by method, host and path template.
    pub enabled: bool,
    /// Also export per-endpoint Prometheus series (`tollgate_endpoint_*`), bounded by the caps below.
    pub metrics: bool,
    /// Most distinct hosts tracked; calls to further hosts are counted under host `other`.
    pub max_hosts: Int<1, 10_000>,
    /// Most endpoints tracked per host; further templates of that host fold into endpoint `other`.
    pub max_endpoints_per_host: Int<1, 10_000>,
    /// Most endpoints tracked in all; each costs about 12 KB at most (two latency histograms).
    pub max_endpoints: Int<1, 100_000>,
    /// Distinct literal values seen at one path position (under the same prefix) before that position becomes a `{param}`.
    pub max_children: Int<2, 10_000>,
    /// A request header naming the calling application or tenant; its values are counted per endpoint (by digest when the header carries secrets, such as `authorization`). Absent: no consumer counts.
    pub consumer_header: Option<String>,
    /// Most consumer values counted per endpoint; the rest under `other`.
    pub max_consumers: Int<1, 1000>,
}

impl Default for RawDiscovery {
    fn default() -> Self {
        Self {
            enabled: false,
            metrics: false,
            max_hosts: Int::of(100),
            max_endpoints_per_host: Int::of(200),
            max_endpoints: Int::of(2000),
            max_children: Int::of(50),
            consumer_header: None,
            max_consumers: Int::of(20),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawHar {
    /// Capture HAR entries (needs at least one sink: `file`, `collector` or `stdout`).
    pub enabled: bool,
    /// Fraction of the selected calls captured, from 0 to 1.
    pub sample: f64,
    /// Capture only the calls these policies matched. Empty: every call.
    pub policies: Vec<String>,
    /// Bytes of each request and response body kept; past it the entry says the content was truncated and how large it was. The body itself is streamed, never held back.
    pub max_body_bytes: Size<0, { 16 << 20 }>,
    /// Entries waiting for the writer; when it cannot keep up, entries are dropped and counted in `tollgate_har_dropped_total`.
    pub queue_capacity: Int<1, { 1 << 20 }>,
    /// Bytes of captured calls (bodies, heads) waiting for the writer: past it new calls are not captured and are counted as dropped, so memory stays bounded under sustained load whatever the bodies' size. The body copies of calls still in flight share a budget of the same size: once it is spent, copies stop growing and their entries say the body was truncated, however many large uploads are captured at once. Resident memory at saturation grows by about 3x this (allocator slack included).
    pub max_queue_bytes: Size<{ 1 << 20 }, { 4 << 30 }>,
    /// Header, query-parameter and JSON-key names replaced by `REDACTED`, in addition to `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie` and every name a credentials remedy injects (case-insensitive).
    pub redact: Vec<String>,
    /// Replace values by a keyed hash instead of keeping them (equal values stay equal, so calls can still be correlated).
    pub obfuscate: RawObfuscate,
    /// HAR files in a directory, rotated by size and age.
    pub file: Option<RawHarFile>,
    /// An HTTP collector: batches of entries POSTed as a JSON array.
    pub collector: Option<RawCollector>,
    /// One JSON line per entry on standard output.
    pub stdout: bool,
}

impl Default for RawHar {
    fn default() -> Self {
        Self {
            enabled: false,
            sample: 1.0,
            policies: Vec::new(),
            max_body_bytes: Size::bytes(64 << 10),
            queue_capacity: Int::of(4096),
            max_queue_bytes: Size::bytes(32 << 20),
            redact: Vec::new(),
            obfuscate: RawObfuscate::default(),
            file: None,
            collector: None,
            stdout: false,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawObfuscate {
    /// Replace header values, query values, JSON leaves (strings and numbers) and the path segments that are not literal parts of the matched template by `HMAC-SHA-256(key, value)` (hex, first 16 bytes).
    pub enabled: bool,
    /// The per-installation key, at least 16 characters; `${ENV_VAR}` is substituted. Required when `enabled`.
    pub key: Option<crate::fields::SecretText>,
    /// Header names kept as they are.
    pub exclude_headers: Vec<String>,
    /// Query-parameter names kept as they are.
    pub exclude_query: Vec<String>,
    /// Path parameter names (of the matched policy's template, or `id` for learned ones) kept as they are.
    pub exclude_path_params: Vec<String>,
    /// JSON paths kept as they are: `$.field.sub`, `$.items[*].name`.
    pub exclude_json_paths: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHarFile {
    /// Directory the HAR files are written to (created if missing).
    pub dir: String,
    /// A file is closed and a new one started past this size.
    #[serde(default = "default_file_max_bytes")]
    pub max_bytes: Size<1024, { 1 << 30 }>,
    /// A file is closed and a new one started after this long.
    #[serde(default = "default_file_max_age")]
    pub max_age: Dur<SEC_MS, { 7 * DAY_MS }>,
    /// Closed files kept; older ones are deleted.
    #[serde(default = "default_retain")]
    pub retain: Int<1, 10_000>,
}

fn default_file_max_bytes() -> Size<1024, { 1 << 30 }> {
    Size::bytes(64 << 20)
}
fn default_file_max_age() -> Dur<SEC_MS, { 7 * DAY_MS }> {
    Dur::secs(3600)
}
fn default_retain() -> Int<1, 10_000> {
    Int::of(10)
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCollector {
    /// `http://` or `https://` URL the batches are POSTed to. `${ENV_VAR}` is substituted.
    pub url: String,
    /// Headers sent with every batch (an API key for the collector). `${ENV_VAR}` is substituted; values are masked in `/config`.
    #[serde(default)]
    pub headers: BTreeMap<String, crate::fields::SecretText>,
    /// Most entries per POST.
    #[serde(default = "default_batch")]
    pub batch_size: Int<1, 10_000>,
    /// A batch is sent at least this often when entries are waiting.
    #[serde(default = "default_interval")]
    pub interval: Dur<10, HOUR_MS>,
    /// Entries held while the collector is slow or down; past it the oldest are dropped and counted in `tollgate_har_dropped_total{sink="collector"}`.
    #[serde(default = "default_buffer")]
    pub buffer: Int<1, { 1 << 20 }>,
    /// Time allowed for one POST.
    #[serde(default = "default_timeout")]
    pub timeout: Dur<100, { 300 * SEC_MS }>,
    /// Longest wait between retries of a failed batch; waits double from 100ms up to it.
    #[serde(default = "default_max_backoff")]
    pub max_backoff: Dur<100, HOUR_MS>,
}

fn default_batch() -> Int<1, 10_000> {
    Int::of(100)
}
fn default_interval() -> Dur<10, HOUR_MS> {
    Dur::secs(1)
}
fn default_buffer() -> Int<1, { 1 << 20 }> {
    Int::of(10_000)
}
fn default_timeout() -> Dur<100, { 300 * SEC_MS }> {
    Dur::secs(10)
}
fn default_max_backoff() -> Dur<100, HOUR_MS> {
    Dur::secs(30)
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawTraces {
    /// Export spans.
    pub enabled: bool,
    /// The OTLP endpoint: for `http/protobuf` the whole URL spans are POSTed to (`http://collector:4318/v1/traces`), for `grpc` the collector's address (`http://collector:4317`). `${ENV_VAR}` is substituted. Absent: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` (with `/v1/traces` added for HTTP), else `http://localhost:4318/v1/traces` or `http://localhost:4317`.
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`. Absent: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
    pub protocol: Option<crate::fields::words::Word<crate::diagnosis::settings::OtlpProtocol>>,
    /// Headers (gRPC metadata) sent with every export, besides those of `OTEL_EXPORTER_OTLP_HEADERS`. `${ENV_VAR}` is substituted; values are masked in `/config`.
    pub headers: BTreeMap<String, crate::fields::SecretText>,
    /// Fraction of new traces sampled, from 0 to 1. A client's `traceparent` decides for the traces it continues.
    pub sample: f64,
    /// `service.name` of the exported resource. Absent: `OTEL_SERVICE_NAME`, else `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (whose other attributes are exported too), else `tollgate`.
    pub service_name: Option<String>,
    /// Spans waiting for export; past it spans are dropped and counted in `tollgate_spans_dropped_total`.
    pub queue_capacity: Int<1, { 1 << 20 }>,
    /// Most spans per export request.
    pub batch_size: Int<1, 100_000>,
    /// Spans are exported at least this often when waiting.
    pub interval: Dur<10, HOUR_MS>,
    /// Time allowed for one export.
    pub timeout: Dur<100, { 300 * SEC_MS }>,
}

impl Default for RawTraces {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: None,
            protocol: None,
            headers: BTreeMap::new(),
            sample: 1.0,
            service_name: None,
            queue_capacity: Int::of(4096),
            batch_size: Int::of(512),
            interval: Dur::secs(1),
            timeout: Dur::secs(10),
        }
    }
}
