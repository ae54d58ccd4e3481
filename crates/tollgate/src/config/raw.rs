//! Raw configuration types: the YAML file as written, unknown keys rejected.
//!
//! These types only describe the shape of the file (and its JSON Schema). They are
//! turned into the validated domain types of [`super::Config`] by `validate.rs`;
//! nothing outside the config module sees them. Durations, sizes and percentages are
//! the unit types of [`crate::fields::units`], whose bounds the parser checks at the
//! key's path and line.

pub use super::raw_diagnosis::*;
pub use super::raw_endpoints::*;
pub use super::raw_policy::*;
use crate::fields::units::{DAY_MS, Dur, HOUR_MS, Int, SEC_MS, Size};
use crate::fields::words::Word;
pub use crate::policy::store::settings::{OnError, SyncMode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Makes [`RawConfig`] of the remedies' registry ([`crate::policy::remedies::registry`]):
/// after `policies`, a section for each remedy whose definitions are declared by name.
macro_rules! raw_config {
    ($($(#[$doc:meta])* $key:ident: $m:ident::$k:ident $(, $(#[$sdoc:meta])* $section:ident)?;)+) => {
        /// A tollgate configuration file. Every key is optional; an empty file runs the
        /// built-in defaults (forward everything, no policies).
        #[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
        #[serde(deny_unknown_fields, default)]
        #[schemars(title = "tollgate configuration")]
        pub struct RawConfig {
            /// The proxy listener that applications send their outgoing calls to. `listen: ADDRESS` is short for `listen: { address: ADDRESS }`.
            #[serde(deserialize_with = "super::shorthand::address_or_map")]
            #[schemars(schema_with = "super::shorthand::either::<RawListen>")]
            pub listen: RawListen,
            /// The admin listener: health, readiness, metrics, effective config, reload. `admin: ADDRESS` is short for `admin: { address: ADDRESS }`.
            #[serde(deserialize_with = "super::shorthand::address_or_map")]
            #[schemars(schema_with = "super::shorthand::either::<RawAdmin>")]
            pub admin: RawAdmin,
            /// How tollgate connects to providers.
            pub upstream: RawUpstream,
            /// Domain allow/deny lists, applied to every traffic mode.
            pub domains: RawDomains,
            /// Address rules applied after DNS resolution, and the ports CONNECT may reach.
            pub egress: RawEgress,
            /// HTTPS interception: the hosts whose CONNECT tunnels tollgate decrypts with a local CA, so policies and diagnosis apply to applications that only set `HTTPS_PROXY` (docs/interception.md). Off by default: every tunnel is a byte relay.
            pub intercept: RawIntercept,
            /// Where remedies keep their state: this process's memory (the default), or a Redis that several replicas share, so that a limit, a quota, a breaker or a provider's pause holds for all of them (docs/policies.md#several-replicas).
            pub store: RawStore,
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
                    $($(
                        $(#[$sdoc])*
                        pub $section: BTreeMap<String, <$crate::policy::remedies::$m::$k as $crate::policy::kind::Shared>::Def>,
                    )?)+
            /// Diagnosis: endpoint discovery, HAR capture, traces. All off by default.
            pub diagnosis: RawDiagnosis,
            /// Logging.
            pub log: RawLog,
            /// Graceful shutdown.
            pub shutdown: RawShutdown,
        }

        impl RawConfig {
            /// The declared sections, for the policy engine to validate.
            pub fn declared(&self) -> crate::policy::remedies::RawDeclared<'_> {
                crate::policy::remedies::RawDeclared {
                    $($($section: &self.$section,)?)+
                }
            }

            /// Each declared section as written: the policy key naming its entries, the
            /// section's key, and its definitions.
            pub fn declared_sections(&self) -> Vec<(&'static str, &'static str, serde_json::Value)> {
                vec![$($((
                    stringify!($key),
                    stringify!($section),
                    serde_json::to_value(&self.$section).unwrap_or_default(),
                ),)?)+]
            }
        }
    };
}

crate::policy::remedies::registry!(raw_config);

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawListen {
    /// Address applications send their calls to. Loopback by default: expose it deliberately.
    pub address: String,
    /// Largest request header section (names + values); larger gets 431 `headers_too_large`. HTTP/1.1 requests with more than 100 header fields are refused by hyper with a bare 431.
    pub max_header_bytes: Size<1024, { 16 << 20 }>,
    /// Time an HTTP/1.1 client with no request in flight has to send a complete request head, counted from the connection's opening or the end of its previous response: the slow-loris guard and the keep-alive idle limit. A connection with a request in flight is never cut, however slow the response. Checked by one sweep over all connections every quarter of the limit, so a quiet connection closes between 1× and 1.25× it; a reload applies from the next sweep. HTTP/2 connections are left to their client.
    pub header_read_timeout: Dur<10, HOUR_MS>,
    /// Concurrent HTTP/2 streams per client connection (advertised in SETTINGS), and so the most upstream connections one client connection can hold: each stream in flight holds at most one. nginx's default is 128 too.
    pub max_concurrent_streams: Int<1, 100_000>,
    /// How long a response may wait on a client that stopped reading it. tollgate watches the client socket itself: when its writes have found the client's window full for this long, with no byte going through, the connection is cut, which drops the response and closes its upstream connection. That covers every response, whatever produced it (relayed, cache hit, aggregated, mock), including the last bytes hyper writes after the body has ended. On HTTP/2, each stream is also watched on its own: a stream whose response the client gives no flow-control window for this long is released (its upstream connection closed, the stream reset when the client next opens its window), the connection's other streams going on. Each counts in `tollgate_stalls_total{kind="connection"|"stream"}`. A slow *upstream* is not a stalled client: only waits on the client count. Checked by the same sweep as `header_read_timeout` (every quarter of the shorter of the two), so a stall ends between 1× and 1.25× the limit.
    pub send_timeout: Dur<10, HOUR_MS>,
}

impl Default for RawListen {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8000".into(),
            max_header_bytes: Size::bytes(64 << 10),
            header_read_timeout: Dur::secs(30),
            max_concurrent_streams: Int::of(128),
            send_timeout: Dur::secs(60),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdmin {
    /// `GET /healthz`, `GET /readyz`, `GET /metrics`, `GET /config`, `GET /policies`, `GET /discover`, `GET /remedy-stats`, `POST /reload`, and the dashboard at `/ui` (docs/dashboard.md). Never reachable through the proxy, by any spelling of its address (`0.0.0.0` and `::` included: see `egress`).
    pub address: String,
    /// Bearer token required by every endpoint but the probes: `/metrics`, `/config`, `/policies`, `/discover`, `/remedy-stats`, `/reload` and `/ui` (`Authorization: Bearer TOKEN`, or the dashboard's session cookie once logged in with the token; 401 otherwise); `/healthz` and `/readyz` stay open for probes. `${ENV}` allowed; `/config` shows a `${ENV}` reference as written and a literal token as `MASKED`. Without a token, starting with the admin listener on a non-loopback address prints a warning.
    pub token: Option<crate::fields::SecretText>,
    /// Without `admin.token`: the names (besides `localhost` and IP addresses, which are always accepted) a request's `Host` may give for this listener, e.g. the Service name Prometheus scrapes (`tollgate-admin.monitoring.svc`). Any other name is refused (421), so a web page that rebinds its own DNS name to this address (DNS rebinding) cannot reach the API. A name matches with any port; `*.example.internal` matches its subdomains.
    pub hosts: Vec<String>,
    /// The dashboard (`/ui`): live calls, endpoints, remedies, config.
    pub ui: RawUi,
}

impl Default for RawAdmin {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8081".into(),
            token: None,
            hosts: Vec::new(),
            ui: RawUi::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawUi {
    /// Serve the dashboard at `/ui` on the admin listener (its pages and assets are in the binary). Off: `/ui` answers 404.
    pub enabled: bool,
    /// With `admin.token` set, how long a dashboard login lasts: the session cookie (`HttpOnly`, `SameSite=Strict`) expires then, and the session is forgotten. Sessions live in memory: a restart logs everyone out.
    pub session_ttl: Dur<{ 60 * SEC_MS }, { 30 * DAY_MS }>,
    /// Most dashboard sessions at once; logging in past it ends the oldest.
    pub max_sessions: Int<1, 10_000>,
}

impl Default for RawUi {
    fn default() -> Self {
        Self {
            enabled: true,
            session_ttl: Dur::secs(12 * 3600),
            max_sessions: Int::of(64),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpstream {
    /// DNS + TCP connect + TLS handshake; past it: 504 `upstream_timeout`.
    pub connect_timeout: Dur<1, HOUR_MS>,
    /// From handing the request to the upstream client to the provider's response head, including connecting when no pooled connection is free (so keep it above `connect_timeout`, or a slow connect reports as a response timeout); past it: 504 `upstream_timeout`. The body then streams without a deadline.
    pub response_timeout: Dur<1, DAY_MS>,
    /// The longest resolved addresses are kept: each answer is kept for its records' TTL, up to this, so a provider that moves its addresses is followed as soon as its records say (failures are not cached; concurrent lookups of one name are one lookup, which runs to its end on its own even when the caller that started it gives up at its connect deadline). Where the system's DNS configuration (`/etc/resolv.conf`) cannot be read, getaddrinfo answers and its addresses are kept this long.
    pub dns_ttl: Dur<0, DAY_MS>,
    /// DNS servers to ask, as `ip` or `ip:port` (port 53 by default), over UDP and TCP. Empty (the default): the servers, search domains and options of `/etc/resolv.conf`, and `/etc/hosts`.
    pub dns_servers: Vec<String>,
    /// A request with `Expect: 100-continue` (RFC 9110 §10.1.1) is forwarded with it, and its body is held back until the provider answers `100 Continue`, which then reaches the client: the client never uploads a body the provider refuses on its headers (a final answer that comes first is relayed and the body is never read). A provider that never sends `100` gets the body after this long. For HTTP/2 providers, which send no interim answer through hyper, the body always waits this long.
    pub expect_continue_timeout: Dur<0, { 60 * SEC_MS }>,
    /// The upstream connection pool.
    pub pool: RawPool,
    /// TLS towards providers.
    pub tls: RawTls,
}

impl Default for RawUpstream {
    fn default() -> Self {
        Self {
            connect_timeout: Dur::secs(5),
            response_timeout: Dur::secs(60),
            dns_ttl: Dur::secs(30),
            dns_servers: Vec::new(),
            expect_continue_timeout: Dur::secs(1),
            pool: RawPool::default(),
            tls: RawTls::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawPool {
    /// Idle keep-alive upstream connections are not reused after this and are closed by the next sweep (every half timeout), so within 1.5× of it.
    pub idle_timeout: Dur<0, DAY_MS>,
    /// Most idle connections kept per upstream (scheme, host, port), per data-plane worker (each worker has its own pool), its two lanes together (connections for requests with a body over 4 KiB or of unknown length, and for the rest); 0: no reuse.
    pub max_idle_per_host: Int<0, 100_000>,
}

impl Default for RawPool {
    fn default() -> Self {
        Self {
            idle_timeout: Dur::secs(90),
            max_idle_per_host: Int::of(256),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawTls {
    /// Which certificate authorities upstream certificates are verified against. `webpki` (the default): the Mozilla roots built into the binary, the same on every machine. `system`: the host's trust store (`/etc/ssl/certs` and the like, or the files `SSL_CERT_FILE` and `SSL_CERT_DIR` name), so a corporate CA installed on the host works without `extra_ca_file`; read at load, and an empty store is an error. `both`: either. `extra_ca_file` adds to any of them.
    pub roots: Word<crate::upstream::tls::Roots>,
    /// PEM file of CA certificates trusted in addition to the webpki (Mozilla) roots. Checked at load by building the TLS configuration `run` uses: it must exist and hold at least one certificate rustls accepts. A server's own self-signed certificate in it (what `openssl req -x509` makes, the usual local stand-in for a provider) is trusted for the names it holds while it is valid, as curl and Python trust it.
    pub extra_ca_file: Option<String>,
    /// Exact host names whose certificates are **not** verified (test servers only). No wildcards; every other host stays verified.
    pub insecure_skip_verify: Vec<String>,
}

impl Default for RawTls {
    fn default() -> Self {
        Self {
            roots: Word::of(crate::upstream::tls::Roots::Webpki),
            extra_ca_file: None,
            insecure_skip_verify: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawDomains {
    /// When non-empty, only hosts matching one of these globs are reachable.
    pub allow: Vec<String>,
    /// Hosts matching one of these globs get 403 `domain_denied`. Deny wins over allow.
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawEgress {
    /// Deny loopback, private (RFC 1918, RFC 4193), shared (100.64/10), link-local, benchmarking, multicast and reserved ranges: `0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.168.0.0/16 198.18.0.0/15 224.0.0.0/4 240.0.0.0/4 ::/128 ::1/128 fc00::/7 fe80::/10 ff00::/8`. **Switch it on in production**; it is off by default so that local development and providers on `localhost` work.
    pub deny_private: bool,
    /// Deny the cloud metadata endpoints `169.254.169.254` (AWS, GCP, Azure, OpenStack), `169.254.170.2` (AWS ECS), `fd00:ec2::254` (AWS IPv6), `100.100.100.200` (Alibaba).
    pub deny_metadata: bool,
    /// Addresses or CIDR ranges never connected to (`10.0.0.0/8`, `192.0.2.7`, `2001:db8::/32`).
    pub deny: Vec<String>,
    /// Addresses or CIDR ranges connected to even when a deny rule above matches (`deny_private: true` with `allow: [10.20.0.0/16]` for an internal provider).
    pub allow: Vec<String>,
    /// Ports a CONNECT tunnel may reach: numbers, ranges as `"8000-8100"`, or `"*"` for any. Other ports get 403 `port_denied` before any connection, so open and closed ports answer alike (no port scanning through the proxy). Squid's default.
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

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawStore {
    /// `memory`: each process counts on its own. `redis`: every gateway naming the same Redis (and `prefix`) shares each rate limit, quota, concurrency limit, breaker, throttling pause and retry budget. The response cache stays per process.
    pub backend: RawStoreBackend,
    /// The Redis, required with `backend: redis` unless `cluster` or `sentinel` names it: `redis://[:PASSWORD@]HOST:PORT[/DB]`, or `rediss://…` for TLS. `${ENV}` allowed (write the password so); shown masked.
    #[serde(serialize_with = "masked_url")]
    pub url: Option<String>,
    /// A Redis Cluster instead of `url`: some of its nodes' URLs (`redis://HOST:PORT`, the rest are discovered). Each resource's keys share one hash slot, so every operation stays one round trip to one node. `${ENV}` allowed; shown masked.
    #[serde(serialize_with = "masked_urls")]
    pub cluster: Vec<String>,
    /// The primary of a Sentinel-managed Redis instead of `url`: `{nodes: [redis://HOST:26379, …], master: NAME, password: ${ENV}}` (the Sentinels, the name they monitor the primary by, the primary's password if any). tollgate asks the Sentinels for the primary, and again after any failure, so a failover is followed without a restart. `rediss://` Sentinels mean a TLS primary too; passwords shown masked.
    pub sentinel: Option<RawSentinel>,
    /// The start of every key tollgate writes (`PREFIX:{RESOURCE}:…`): replicas that share limits use the same one; deployments that must not, different ones.
    pub prefix: String,
    /// The longest wait for one Redis operation (and for a connection): past it the operation has failed and `on_error` decides. A request waits at most this long for the store. The default, 20 ms, is far above a healthy round trip in one zone (well under 1 ms), so a timeout means Redis is in trouble, and long enough for a new connection to a Redis in another zone, TLS included: lower it towards a few ms where Redis is close and a slow answer should fall back sooner.
    pub timeout: Dur<1, 10_000>,
    /// When Redis cannot answer: `local` counts in this process's memory with each limit divided by `expected_replicas`; `allow` lets the request through; `deny` refuses it as if the limit were reached. Releases, deadlines and pauses always fall back to memory.
    pub on_error: Word<OnError>,
    /// How many replicas share the Redis: with `on_error: local`, each takes this share of every limit (rounded up) while Redis is away.
    pub expected_replicas: Int<1, 10_000>,
    /// A concurrency slot on Redis is a lease its gateway renews every third of this while the request is in flight: a gateway killed with requests in flight gives their slots back this long after it last renewed them.
    pub lease_ttl: Dur<1_000, HOUR_MS>,
    /// How rate limits and quotas count on Redis. `exact`: each admission is one round trip, and the replicas together admit exactly the limit. `lease`: a replica takes `lease_size` admissions from Redis at once and hands them out from memory (one round trip per `lease_size` requests); never more than the limit in all, but admissions a replica took and did not use are lost to the others, so per window up to `expected_replicas × lease_size` fewer may pass.
    pub sync: Word<SyncMode>,
    /// With `sync: lease`: the admissions a replica takes from Redis at once (the last block of a window is what is left).
    pub lease_size: Int<1, 100_000>,
}

impl Default for RawStore {
    fn default() -> Self {
        Self {
            backend: RawStoreBackend::Memory,
            url: None,
            cluster: Vec::new(),
            sentinel: None,
            prefix: "tollgate".into(),
            timeout: Dur::ms(20),
            on_error: Word::of(OnError::Local),
            expected_replicas: Int::of(1),
            lease_ttl: Dur::secs(10),
            sync: Word::of(SyncMode::Exact),
            lease_size: Int::of(10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RawStoreBackend {
    Memory,
    Redis,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSentinel {
    /// The Sentinels: `redis://HOST:26379` each (`rediss://` for TLS, which the primary then speaks too; a Sentinel's own password as `redis://:PASSWORD@HOST:26379`). `${ENV}` allowed; shown masked.
    #[serde(serialize_with = "masked_urls")]
    pub nodes: Vec<String>,
    /// The name the Sentinels monitor the primary by (`sentinel monitor NAME …`).
    pub master: String,
    /// The primary's password, when it has one: write `${ENV}`; shown masked.
    #[serde(default, serialize_with = "masked_secret")]
    pub password: Option<String>,
}

/// URLs as `/config` shows them: their user-info (a password) masked.
fn masked_urls<S: serde::Serializer>(urls: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(urls.iter().map(|u| crate::secret::mask_url(u)))
}

/// A password as `/config` shows it.
fn masked_secret<S: serde::Serializer>(p: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_str(&crate::fields::masked(p)),
        None => s.serialize_none(),
    }
}

/// A URL as `/config` shows it: its user-info (a password) masked.
fn masked_url<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(u) => s.serialize_str(&crate::secret::mask_url(u)),
        None => s.serialize_none(),
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
pub struct RawIntercept {
    /// Hosts whose CONNECT tunnels are decrypted, as globs like `domains` (`api.openai.com`, `*.stripe.com`). Their requests run the whole pipeline as `https` requests to the CONNECT host; every other host keeps the byte tunnel, never decrypted. Empty (the default): interception is off.
    pub hosts: Vec<String>,
    /// The CA that signs the certificates shown to clients: `{cert_file, key_file}` (PEM; the key PKCS#8). Absent: the CA `tollgate ca init` made in the data directory (`$TOLLGATE_DATA_DIR`, else `$XDG_DATA_HOME/tollgate`, else `~/.local/share/tollgate`). Read once when the config is loaded with `hosts` named (`check` loads it too); the key is never shown.
    pub ca: Option<RawCaFiles>,
    /// When a client refuses the certificate (it pins the provider's, or its trust store lacks the CA), that host's later CONNECTs are tunnelled untouched for this long instead of decrypted (mitmproxy's passthrough on TLS failure). `0s` (the default): never; the client's connection fails. Either way the refusal is logged once per host with the fix and counted in `tollgate_intercept_failures_total{kind="refused"}`.
    pub tunnel_refused_for: Dur<0, DAY_MS>,
    /// Most hosts whose certificates are kept ready (the least used are made again when next asked: a key pair and a signature, some 50 µs of CPU on the blocking pool).
    pub max_hosts: Int<1, 1_000_000>,
}

impl Default for RawIntercept {
    fn default() -> Self {
        Self {
            hosts: Vec::new(),
            ca: None,
            tunnel_refused_for: Dur::secs(0),
            max_hosts: Int::of(1000),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCaFiles {
    /// The CA certificate (PEM). `${ENV}` allowed.
    pub cert_file: String,
    /// The CA's private key (PEM, PKCS#8: `-----BEGIN PRIVATE KEY-----`; convert others with `openssl pkcs8 -topk8 -nocrypt`). `${ENV}` allowed. Keep it readable by tollgate's user only.
    pub key_file: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMetrics {
    /// Most distinct upstream hosts used as `host` labels. Past it, requests count under `host="other"` and in `tollgate_metric_hosts_folded_total`. Read at start-up.
    pub max_hosts: Int<1, 100_000>,
}

impl Default for RawMetrics {
    fn default() -> Self {
        Self {
            max_hosts: Int::of(1000),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Path prefix on the listener, starting with `/`. A trailing `/*` is accepted. Matches the prefix itself and anything below it at a `/` boundary (`/github` matches `/github` and `/github/x`, not `/githubx`). The longest matching prefix wins.
    pub prefix: String,
    /// Base URL `http://` or `https://`, host, optional port and base path. No query, no user-info. `${ENV}` allowed.
    pub upstream: String,
}

crate::fields::words::words! {
    /// How log lines are written.
    pub enum LogFormat {
        Text = "text",
        Json = "json",
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    /// `tracing` filter syntax (`info`, `tollgate=debug,hyper=warn`). `RUST_LOG` overrides it.
    pub level: String,
    /// For the process log (stderr) and the access log.
    pub format: Word<LogFormat>,
    /// One line per request: request id, method, host, path (without query: queries often carry secrets), status, error code, policy, total and upstream ms, body bytes, whether the body completed. Can be switched on and off by reload.
    pub access_log: bool,
    /// File the access log is appended to; absent: standard output.
    pub access_log_file: Option<String>,
    /// Bounded queue between requests and the observer thread (access log, the dashboard's live calls and failures, diagnosis), one per data-plane worker; metrics are counted by the workers and never wait on it. When full, events are dropped and counted in `tollgate_events_dropped_total`; requests never wait. (tokio's bounded channel refuses more than `usize::MAX >> 3` slots; 16M is plenty.)
    pub queue_capacity: Int<1, { 1 << 24 }>,
}

impl Default for RawLog {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: Word::of(LogFormat::Text),
            access_log: false,
            access_log_file: None,
            queue_capacity: Int::of(65536),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawShutdown {
    /// On SIGTERM/SIGINT, in-flight requests, CONNECT tunnels and upgraded connections get this long to finish. At the deadline, requests still waiting in a queue (rate limit, quota, concurrency) answer **503 `shutting_down`**: they were never sent, so the client may send them again elsewhere; what is left a second later (requests sent upstream and still waiting, tunnels) is cut.
    pub drain_timeout: Dur<0, HOUR_MS>,
}

impl Default for RawShutdown {
    fn default() -> Self {
        Self {
            drain_timeout: Dur::secs(30),
        }
    }
}

impl super::shorthand::HasAddress for RawListen {
    fn with_address(address: String) -> Self {
        Self {
            address,
            ..Self::default()
        }
    }
}

impl super::shorthand::HasAddress for RawAdmin {
    fn with_address(address: String) -> Self {
        Self {
            address,
            ..Self::default()
        }
    }
}
