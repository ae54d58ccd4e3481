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

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traces {
    pub enabled: bool,
    pub endpoint: Option<Collector>,
    pub sample: f64,
    pub service_name: String,
    pub queue_capacity: usize,
}
