//! Raw configuration types: the YAML file as written, unknown keys rejected.
//!
//! These types only describe the shape of the file (and its JSON Schema). They are
//! turned into the validated domain types of [`super::Config`] by `validate.rs`;
//! nothing outside the config module sees them. Durations and sizes stay strings
//! here so that errors can name the field and the offending text.

pub use super::raw_diagnosis::*;
pub use super::raw_endpoints::*;
pub use super::raw_policy::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A tollgate configuration file. Every key is optional; an empty file runs the
/// built-in defaults (forward everything, no policies).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(title = "tollgate configuration")]
pub struct RawConfig {
    /// The proxy listener that applications send their outgoing calls to. `listen: ADDRESS` is short for `listen: { address: ADDRESS }`.
    #[serde(deserialize_with = "super::shorthand::listen")]
    #[schemars(schema_with = "super::shorthand::listen_schema")]
    pub listen: RawListen,
    /// The admin listener: health, readiness, metrics, effective config, reload. `admin: ADDRESS` is short for `admin: { address: ADDRESS }`.
    #[serde(deserialize_with = "super::shorthand::admin")]
    #[schemars(schema_with = "super::shorthand::admin_schema")]
    pub admin: RawAdmin,
    /// How tollgate connects to providers.
    pub upstream: RawUpstream,
    /// Domain allow/deny lists, applied to every traffic mode.
    pub domains: RawDomains,
    /// Address rules applied after DNS resolution, and the ports CONNECT may reach.
    pub egress: RawEgress,
    /// Prometheus metrics on the admin listener.
    pub metrics: RawMetrics,
    /// Declared routes: a path prefix on the listener mapped to an upstream base URL.
    pub routes: Vec<RawRoute>,
    /// Aggregated endpoints: a path on the listener answered by calling several backends in parallel and merging their JSON answers (docs/aggregation.md). Tried before routes.
    pub endpoints: Vec<RawEndpoint>,
    /// What aggregated endpoints take when they do not say: `timeout`, `cache_ttl`, `user_agent`, and the `host` of backend URLs written as a path.
    pub endpoint_defaults: RawEndpointDefaults,
    /// Policies: which traffic remedies apply to (matched by host, path template and method on the upstream request; the first match applies), and the remedies.
    pub policies: Vec<RawPolicy>,
    /// Rate limits shared by name: `rate_limit: NAME` in any number of policies counts against one limit.
    pub rate_limits: BTreeMap<String, RawRateLimit>,
    /// Quotas shared by name (`quota: NAME`), and the parents of child quotas.
    pub quotas: BTreeMap<String, RawQuota>,
    /// Concurrency limits shared by name (`concurrency: NAME`).
    pub concurrency_limits: BTreeMap<String, RawConcurrency>,
    /// Circuit breakers shared by name (`breaker: NAME`).
    pub breakers: BTreeMap<String, RawBreaker>,
    /// Diagnosis: endpoint discovery, HAR capture, traces. All off by default.
    pub diagnosis: RawDiagnosis,
    /// Logging.
    pub log: RawLog,
    /// Graceful shutdown.
    pub shutdown: RawShutdown,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawListen {
    /// Address of the proxy listener.
    pub address: String,
    /// Largest total size of request headers (names + values) accepted; larger requests get 431 `headers_too_large`.
    pub max_header_bytes: String,
    /// Time an HTTP/1.1 client with no request in flight has to send a complete request head, counted from the connection's opening or its previous response's end (slow-loris guard and keep-alive idle limit). Checked every quarter of it: a quiet connection closes between 1x and 1.25x this.
    pub header_read_timeout: String,
    /// Largest number of concurrent HTTP/2 streams per client connection (1 to 100000), and so the most upstream connections one client connection can hold (each stream in flight holds at most one). nginx's default is 128 too.
    pub max_concurrent_streams: u32,
    /// Time a client may leave a response unread before it is released with its upstream connection: a connection whose writes wait on the client (its window full) this long is cut, whatever produced the response (relayed, cached, aggregated); on HTTP/2 also each stream the client gives no flow-control window this long is reset, the connection's other streams going on. Checked with the read deadline's sweep: a stall ends between 1x and 1.25x this.
    pub send_timeout: String,
}

impl Default for RawListen {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8000".into(),
            max_header_bytes: "64KiB".into(),
            header_read_timeout: "30s".into(),
            max_concurrent_streams: 128,
            send_timeout: "60s".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdmin {
    /// Address of the admin listener.
    pub address: String,
    /// Bearer token required by `/metrics`, `/config` and `/reload` (`Authorization: Bearer TOKEN`); `/healthz` and `/readyz` stay open. `${ENV_VAR}` is substituted. Absent: no token (a warning is printed when the admin listener is not on a loopback address).
    pub token: Option<String>,
}

impl Default for RawAdmin {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8081".into(),
            token: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpstream {
    /// Time allowed to resolve, connect and (for https) finish the TLS handshake; then 504 `upstream_timeout`.
    pub connect_timeout: String,
    /// Time allowed from sending the request until the provider's response headers arrive, including connecting when no pooled connection is free (keep it above connect_timeout); then 504 `upstream_timeout`.
    pub response_timeout: String,
    /// How long resolved addresses are cached (0 to 1d; 0 caches for 1ms, coalescing concurrent lookups only).
    pub dns_ttl: String,
    /// For a request with `Expect: 100-continue`, how long tollgate waits for the provider's `100 Continue` (or final answer) before sending the body anyway (RFC 9110 §10.1.1). The client gets the provider's interim response, never one made up by tollgate.
    pub expect_continue_timeout: String,
    /// The upstream connection pool.
    pub pool: RawPool,
    /// TLS towards providers.
    pub tls: RawTls,
}

impl Default for RawUpstream {
    fn default() -> Self {
        Self {
            connect_timeout: "5s".into(),
            response_timeout: "60s".into(),
            dns_ttl: "30s".into(),
            expect_continue_timeout: "1s".into(),
            pool: RawPool::default(),
            tls: RawTls::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawPool {
    /// Idle upstream connections are closed after this long.
    pub idle_timeout: String,
    /// Most idle keep-alive connections kept per upstream host, per data-plane worker (0 to 100000; 0 disables reuse).
    pub max_idle_per_host: usize,
}

impl Default for RawPool {
    fn default() -> Self {
        Self {
            idle_timeout: "90s".into(),
            max_idle_per_host: 256,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawTls {
    /// A PEM file of extra CA certificates trusted in addition to the webpki (Mozilla) roots.
    pub extra_ca_file: Option<String>,
    /// Upstream host names whose certificates are NOT verified. Only exact names; use for test servers only.
    pub insecure_skip_verify: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawDomains {
    /// When non-empty, only hosts matching one of these glob patterns (`*.example.com`, `api.*.com`, `*`) are reachable.
    pub allow: Vec<String>,
    /// Hosts matching one of these glob patterns are refused with 403 `domain_denied`. Deny wins over allow.
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawEgress {
    /// Deny connections to loopback, private (RFC 1918, RFC 4193), shared (CGNAT), link-local, multicast and reserved addresses, whatever name resolved to them. Switch on in production.
    pub deny_private: bool,
    /// Deny the cloud metadata endpoints 169.254.169.254, 169.254.170.2, fd00:ec2::254 and 100.100.100.200.
    pub deny_metadata: bool,
    /// Addresses or CIDR ranges (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.7`) never connected to. IP literals in `domains.deny` are added here too.
    pub deny: Vec<String>,
    /// Addresses or CIDR ranges connected to even when a deny rule matches them (never tollgate's own listeners).
    pub allow: Vec<String>,
    /// Ports a CONNECT tunnel may reach: port numbers, or ranges as `"8000-8100"`; `"*"` for any port.
    pub connect_ports: Vec<RawPort>,
}

impl Default for RawEgress {
    fn default() -> Self {
        Self {
            deny_private: false,
            deny_metadata: true,
            deny: Vec::new(),
            allow: Vec::new(),
            connect_ports: vec![RawPort::Number(443)],
        }
    }
}

/// A port number, or a range `"LOW-HIGH"`, or `"*"`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawPort {
    Number(u16),
    Range(String),
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMetrics {
    /// Most distinct upstream hosts used as metric labels (1 to 100000); further hosts are counted under `host="other"` and in `tollgate_metric_hosts_folded_total`.
    pub max_hosts: usize,
}

impl Default for RawMetrics {
    fn default() -> Self {
        Self { max_hosts: 1000 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Path prefix on the proxy listener, starting with `/` (a trailing `/*` is accepted and ignored). The prefix is stripped before forwarding.
    pub prefix: String,
    /// Upstream base URL (`http://` or `https://`, optional base path). `${ENV_VAR}` is substituted.
    pub upstream: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    /// Log filter in `tracing` EnvFilter syntax (`info`, `tollgate=debug`). `RUST_LOG` overrides it.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
    /// Write one access-log line per request (off the hot path, through a bounded queue).
    pub access_log: bool,
    /// Where access-log lines go: a file path (appended to), or absent for standard output. Read at start-up.
    pub access_log_file: Option<String>,
    /// Capacity of the access-log and metrics queue, one per data-plane worker (1 to 16777216); events beyond it are dropped and counted.
    pub queue_capacity: usize,
}

impl Default for RawLog {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: "text".into(),
            access_log: false,
            access_log_file: None,
            queue_capacity: 65536,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawShutdown {
    /// On SIGTERM/SIGINT, in-flight requests and tunnels get this long to finish before they are cut.
    pub drain_timeout: String,
}

impl Default for RawShutdown {
    fn default() -> Self {
        Self {
            drain_timeout: "30s".into(),
        }
    }
}
