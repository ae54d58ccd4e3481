//! The validated `diagnosis` section (config/raw_diagnosis.rs documents each value).

use crate::secret::Secret;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Diagnosis {
    pub discovery: Discovery,
    pub har: Har,
    pub traces: Traces,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    pub enabled: bool,
    pub metrics: bool,
    pub max_hosts: usize,
    pub max_endpoints_per_host: usize,
    pub max_endpoints: usize,
    pub max_children: usize,
    pub consumer_header: Option<http::HeaderName>,
    pub max_consumers: usize,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Har {
    pub enabled: bool,
    pub sample: f64,
    /// Empty: every call.
    pub policies: Vec<String>,
    pub max_body_bytes: usize,
    pub queue_capacity: usize,
    pub max_queue_bytes: usize,
    /// Lower-case names redacted besides the built-in ones and the injected credentials.
    pub redact: Vec<String>,
    pub obfuscate: Option<Obfuscate>,
    pub file: Option<HarFile>,
    pub collector: Option<Collector>,
    pub stdout: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Obfuscate {
    pub key: Secret,
    /// Lower-case.
    pub exclude_headers: Vec<String>,
    /// As written (query names are case-sensitive).
    pub exclude_query: Vec<String>,
    pub exclude_path_params: Vec<String>,
    /// Parsed `$.a.b[*].c` paths: keys, `*` for any array index.
    pub exclude_json_paths: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HarFile {
    pub dir: PathBuf,
    pub max_bytes: usize,
    pub max_age: Duration,
    pub retain: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Collector {
    pub url: crate::target::Target,
    /// Path and query the batches are POSTed to.
    pub path: http::uri::PathAndQuery,
    /// The URL as written (for `/config`; secrets masked).
    pub display: String,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub batch_size: usize,
    pub interval: Duration,
    pub buffer: usize,
    pub timeout: Duration,
    pub max_backoff: Duration,
}

/// How a sink sends its batches: their size, how long a short one waits, the longest
/// wait between retries, and its address as written (for logs).
#[derive(Debug, Clone, PartialEq)]
pub struct Batching {
    pub batch_size: usize,
    pub interval: Duration,
    pub max_backoff: Duration,
    pub display: String,
}

impl Collector {
    pub fn batching(&self) -> Batching {
        Batching {
            batch_size: self.batch_size,
            interval: self.interval,
            max_backoff: self.max_backoff,
            display: self.display.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traces {
    pub enabled: bool,
    /// Present when enabled.
    pub export: Option<TraceExport>,
    pub sample: f64,
    pub queue_capacity: usize,
}

crate::fields::words::words! {
    /// How spans travel to the collector (`diagnosis.traces.protocol`), OTLP's names.
    pub enum OtlpProtocol {
        /// OTLP/HTTP with protobuf bodies.
        HttpProtobuf = "http/protobuf",
        /// OTLP/gRPC.
        Grpc = "grpc",
    }
}

/// Where and how spans are exported (through opentelemetry-otlp).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceExport {
    /// The endpoint as written, `${VARS}` substituted; `None`: the OTEL_ variables'.
    pub endpoint: Option<String>,
    /// `None`: `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`, else `http/protobuf`.
    pub protocol: Option<OtlpProtocol>,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// `None`: `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`),
    /// else `tollgate`.
    pub service_name: Option<String>,
    pub batching: Batching,
    pub timeout: Duration,
}
