//! Raw types of policies and of the shared limits they refer to (`rate_limits`,
//! `quotas`, `concurrency_limits`, `breakers`): the YAML as written, unknown keys
//! rejected. Validated into [`crate::policy`] types by `validate_policy.rs`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// A name for the policy, used in logs, metrics and `GET /policies`.
    pub name: String,
    /// Which requests the policy applies to, matched against the upstream request (after a route's prefix is stripped). All given conditions must hold. The first policy in file order that matches applies.
    #[serde(rename = "match", default)]
    pub matcher: RawMatch,
    /// Answer without calling the provider.
    pub mock: Option<RawMock>,
    /// Change the request before it is sent: headers, path, JSON body fields.
    pub request: Option<RawRequestTransform>,
    /// Change the provider's response headers.
    pub response: Option<RawHeaderTransform>,
    /// Credentials injected into the upstream request (never seen by cache keys, logs or metrics).
    pub credentials: Option<RawCredentials>,
    /// Response cache.
    pub cache: Option<RawCache>,
    /// Circuit breaker: the name of one declared under `breakers`, or its definition.
    pub breaker: Option<RawRef<RawBreaker>>,
    /// Stop sending while the provider says it is throttling (429/503 with `Retry-After`, or `RateLimit-Remaining: 0`).
    pub provider_throttling: Option<RawThrottle>,
    /// A long-window quota: the name of one declared under `quotas`, or its definition.
    pub quota: Option<RawRef<RawQuota>>,
    /// A fixed-window rate limit: the name of one declared under `rate_limits`, or its definition.
    pub rate_limit: Option<RawRef<RawRateLimit>>,
    /// A limit on requests in flight: the name of one declared under `concurrency_limits`, or its definition.
    pub concurrency: Option<RawRef<RawConcurrency>>,
    /// Retries inside the proxy.
    pub retry: Option<RawRetry>,
    /// Timeouts overriding the `upstream` ones for this policy's requests.
    pub timeouts: Option<RawTimeouts>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMatch {
    /// Host glob pattern (`api.example.com`, `*.example.com`). Absent: any host.
    pub host: Option<String>,
    /// Path template matched against the upstream path: literal segments, `{param}` for one segment, trailing `*` for any rest (`/repos/{owner}/{repo}/*`). Absent: any path.
    pub path: Option<String>,
    /// HTTP methods (`GET`, `POST`, ...). Empty: any method.
    pub methods: Vec<String>,
}

/// A shared resource by name, or an inline definition that belongs to this policy alone
/// (deserialised in `shorthand.rs`, so an inline definition reports its own field errors).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawRef<T> {
    /// The name of a declared resource.
    Name(String),
    /// A definition of this policy's own.
    Inline(T),
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMock {
    /// Status of the made-up response.
    #[serde(default = "ok")]
    pub status: u16,
    /// Response headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body, inline. A `body` that is a mapping or list is sent as JSON (with `content-type: application/json` unless set).
    pub body: Option<serde_json::Value>,
    /// Response body read from this file at load (relative to the working directory).
    pub body_file: Option<String>,
    /// Only answer when the request says so; absent: always.
    pub when: Option<RawWhen>,
}

fn ok() -> u16 {
    200
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawWhen {
    /// Answer when this request header is present (any value but `false` or `0`).
    pub header: Option<String>,
    /// Answer when this query parameter is present (any value but `false` or `0`).
    pub query: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawHeaderTransform {
    /// Headers set (replacing any value). `${ENV_VAR}` is substituted.
    pub set_headers: BTreeMap<String, String>,
    /// Headers added beside existing values.
    pub add_headers: BTreeMap<String, String>,
    /// Headers removed.
    pub remove_headers: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawRequestTransform {
    /// Headers set (replacing any value). `${ENV_VAR}` is substituted.
    pub set_headers: BTreeMap<String, String>,
    /// Headers added beside existing values.
    pub add_headers: BTreeMap<String, String>,
    /// Headers removed.
    pub remove_headers: Vec<String>,
    /// New upstream path: literal text with `{param}` from `match.path` and `{*}` for what its trailing `*` matched (`/v2/repos/{owner}/{repo}/{*}`). The query string is kept.
    pub path: Option<String>,
    /// JSON request body fields to set: JSON pointer (`/model`, `/options/temperature`) to value. Missing parent objects are created.
    pub json_set: BTreeMap<String, serde_json::Value>,
    /// JSON request body fields to delete, as JSON pointers.
    pub json_remove: Vec<String>,
    /// Largest request body read for `json_set`/`json_remove` (1B to 64MiB); a larger body gets 413 `body_too_large`.
    pub max_body: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawCredentials {
    /// `Authorization: Bearer VALUE`.
    pub bearer: Option<String>,
    /// `Authorization: Basic base64(username:password)`.
    pub basic: Option<RawBasic>,
    /// An API key in a request header.
    pub header: Option<RawNamed>,
    /// An API key in a query parameter.
    pub query: Option<RawNamed>,
    /// Several accounts used in turn (round robin); one that gets 429 from the provider is skipped until its `Retry-After` (or `cooldown`) has passed. Each account is one of `bearer`, `basic`, `header`, `query`.
    pub accounts: Vec<RawAccount>,
    /// How long an account that got 429 without `Retry-After` is skipped (0 to 1d).
    pub cooldown: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawAccount {
    /// `Authorization: Bearer VALUE`.
    pub bearer: Option<String>,
    /// `Authorization: Basic base64(username:password)`.
    pub basic: Option<RawBasic>,
    /// An API key in a request header.
    pub header: Option<RawNamed>,
    /// An API key in a query parameter.
    pub query: Option<RawNamed>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBasic {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNamed {
    /// Header or query parameter name.
    pub name: String,
    /// Its value; write `${ENV_VAR}`.
    pub value: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawCache {
    /// How long a response is fresh (1s to 30d); the provider's `max-age`/`s-maxage` caps it.
    pub ttl: String,
    /// Methods cached. `POST` (and other methods with a body) needs `key_body: true`.
    pub methods: Vec<String>,
    /// Response statuses stored.
    pub statuses: Vec<u16>,
    /// Request headers whose values are part of the key (e.g. `accept`, `x-github-api-version`).
    pub key_headers: Vec<String>,
    /// Put the request body in the key (hashed; a JSON body is canonicalised first, so key order and whitespace do not matter). For POST APIs such as search or LLM completions.
    pub key_body: bool,
    /// Largest response body stored (1B to 1GiB); larger responses stream through uncached.
    pub max_entry: String,
    /// Total size of stored bodies and headers (1KiB to 64GiB); least recently used entries are evicted beyond it.
    pub max_size: String,
    /// `true` when the cache serves several users (a shared cache, RFC 9111 §3.5): responses with `Cache-Control: private` or to requests with `Authorization` are not stored then. A sidecar serving one application is private (the default).
    pub shared: bool,
    /// Ignore the provider's `Cache-Control` (`no-store`, `max-age`, `private`) and store for `ttl`.
    pub ignore_cache_control: bool,
    /// Keep a stale entry that has an `ETag` or `Last-Modified` (for up to `ttl` more) and revalidate it with `If-None-Match`/`If-Modified-Since`; a `304` from the provider is answered from the entry.
    pub revalidate: bool,
}

impl Default for RawCache {
    fn default() -> Self {
        Self {
            ttl: "60s".into(),
            methods: vec!["GET".into(), "HEAD".into()],
            statuses: vec![200],
            key_headers: Vec::new(),
            key_body: false,
            max_entry: "1MiB".into(),
            max_size: "64MiB".into(),
            shared: false,
            ignore_cache_control: false,
            revalidate: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Requests allowed per window (1 to 10^12).
    pub limit: u64,
    /// `second`, `minute`, `hour` or `day`: fixed windows aligned to the clock (UTC).
    pub window: String,
    /// Count per consumer, grouped by this request header's value.
    pub group_by: Option<String>,
    /// Share of `limit` per group (header value → `"20%"`). A request must fit its group's share and the whole limit. Shares may sum to at most 100%.
    #[serde(default)]
    pub groups: BTreeMap<String, String>,
    /// Groups not listed (and requests without the header): `allow` (only the whole limit applies), `block` (429), or a share like `"10%"` each.
    #[serde(default = "allow")]
    pub default_group: String,
    /// Most distinct groups counted at once (1 to 1000000); requests of further groups are counted as one group `other` with the default share. A group is stored as a 16-byte digest of the value's first 1 KiB, so this bounds memory too.
    #[serde(default = "max_groups")]
    pub max_groups: usize,
    /// Hold requests over the limit until the next window instead of rejecting them.
    pub queue: Option<RawQueue>,
    /// Response statuses that give the request back to the limit, because the provider did not charge it (GitHub does not count a conditional request answered `304`): `[304]`. Statuses 100 to 599.
    #[serde(default)]
    pub refund_on: Vec<u16>,
}

fn allow() -> String {
    "allow".into()
}

fn max_groups() -> usize {
    10_000
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    /// Most requests held (1 to 1000000); beyond it: 429 `queue_full`.
    pub size: usize,
    /// Longest a request is held (1ms to 1h); then 503 `queue_timeout`.
    pub max_wait: String,
    /// Request header whose value picks the priority.
    pub priority_header: Option<String>,
    /// Header value → priority (0 to 255, lower first; FIFO within one priority).
    #[serde(default)]
    pub priorities: BTreeMap<String, u8>,
    /// Priority of requests without a listed value.
    #[serde(default = "default_priority")]
    pub default_priority: u8,
}

fn default_priority() -> u8 {
    100
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawQuota {
    /// Requests allowed per period (1 to 10^12). A child quota (with `parent`) gives `share` instead.
    pub limit: Option<u64>,
    /// `day` or `month`.
    #[serde(default = "day")]
    pub per: String,
    /// For `per: month`: the day of the month the quota renews (1 to 28).
    #[serde(default = "one")]
    pub renews_on: u8,
    /// Time zone of the period's boundaries (IANA name such as `Europe/Paris`, or `UTC`).
    #[serde(default = "utc")]
    pub time_zone: String,
    /// A quota declared under `quotas` that this one takes a share of; a request must fit both. The period is the parent's.
    pub parent: Option<String>,
    /// This quota's share of the parent's limit (`"25%"`).
    pub share: Option<String>,
    /// Response statuses that give the request back to the limit, because the provider did not charge it (GitHub does not count a conditional request answered `304`): `[304]`. Statuses 100 to 599.
    #[serde(default)]
    pub refund_on: Vec<u16>,
}

fn day() -> String {
    "day".into()
}

fn one() -> u8 {
    1
}

fn utc() -> String {
    "UTC".into()
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConcurrency {
    /// Most requests in flight (1 to 1000000); a slot is held until the response body ends or the client goes away.
    pub max: u64,
    /// Count per group of this request header's value (each group gets `max`; a group's state exists only while it has requests in flight).
    pub group_by: Option<String>,
    /// Hold requests until a slot frees instead of rejecting them.
    pub queue: Option<RawQueue>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawBreaker {
    /// Open after this many failures in a row (1 to 1000000; 0 switches the rule off).
    pub consecutive_failures: u32,
    /// Open when failures reach this share of requests in `window` (`"50%"`; absent: rule off).
    pub failure_ratio: Option<String>,
    /// Fewest requests in `window` before `failure_ratio` applies (1 to 1000000).
    pub min_requests: u64,
    /// Rolling window of `failure_ratio` (1s to 1h).
    pub window: String,
    /// How long the breaker stays open (10ms to 1h); then half-open.
    pub open_for: String,
    /// Requests let through while half-open (1 to 1000); all succeeding closes the breaker, one failing opens it again.
    pub half_open_probes: u32,
    /// Statuses that count as failures: numbers (`503`) or ranges (`"500-599"`).
    pub failure_statuses: Vec<String>,
    /// Connect, DNS and TLS errors count as failures.
    pub connect_errors: bool,
    /// Timeouts count as failures.
    pub timeouts: bool,
}

impl Default for RawBreaker {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            failure_ratio: None,
            min_requests: 20,
            window: "30s".into(),
            open_for: "30s".into(),
            half_open_probes: 1,
            failure_statuses: vec!["500-599".into()],
            connect_errors: true,
            timeouts: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawThrottle {
    /// While throttled: `reject` at once (429 `provider_throttled` with the remaining `Retry-After`), or `wait` until the provider's reset when it is within `max_wait`.
    pub action: String,
    /// Longest a request waits for the provider's reset with `action: wait` (1ms to 1h); longer resets are rejected at once.
    pub max_wait: String,
    /// Statuses whose `Retry-After` throttles.
    pub statuses: Vec<u16>,
    /// Longest throttle honoured (1s to 1d): a provider asking for more is held to this.
    pub max_throttle: String,
}

impl Default for RawThrottle {
    fn default() -> Self {
        Self {
            action: "reject".into(),
            max_wait: "30s".into(),
            statuses: vec![429, 503],
            max_throttle: "1h".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawRetry {
    /// Most attempts in all, the first included (2 to 20).
    pub attempts: u32,
    /// Backoff before retry n: a random time up to min(max_delay, base_delay × 2^n) (full jitter).
    pub base_delay: String,
    /// Upper bound of one backoff (1ms to 1h); also the longest provider `Retry-After` honoured.
    pub max_delay: String,
    /// Response statuses retried: numbers or ranges (`"502-504"`).
    pub statuses: Vec<String>,
    /// Retry connect, DNS and TLS errors (the request never reached the provider).
    pub connect_errors: bool,
    /// Retry timeouts waiting for the response head.
    pub timeouts: bool,
    /// Methods retried besides the idempotent ones (GET, HEAD, OPTIONS, TRACE, PUT, DELETE). A request with `Idempotency-Key` is always retryable.
    pub methods: Vec<String>,
    /// Largest request body kept for replay (0 to 64MiB); a larger body is sent once and not retried.
    pub max_body: String,
    /// Retries allowed as a share of requests over `budget_window` (`"20%"`), so retries never multiply an outage.
    pub budget: String,
    /// Rolling window of the budget (1s to 1h).
    pub budget_window: String,
    /// Retries always allowed per budget window, for low traffic (0 to 1000000).
    pub budget_min: u64,
    /// All attempts and backoffs together end within this (1ms to 1d); absent: no overall deadline.
    pub deadline: Option<String>,
}

impl Default for RawRetry {
    fn default() -> Self {
        Self {
            attempts: 3,
            base_delay: "100ms".into(),
            max_delay: "5s".into(),
            statuses: vec!["502-504".into()],
            connect_errors: true,
            timeouts: true,
            methods: Vec::new(),
            max_body: "1MiB".into(),
            budget: "20%".into(),
            budget_window: "10s".into(),
            budget_min: 10,
            deadline: None,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawTimeouts {
    /// Resolve, connect and TLS (1ms to 1h).
    pub connect: Option<String>,
    /// From sending a request until the response head, per attempt (1ms to 1d).
    pub response: Option<String>,
    /// The whole exchange: queues, attempts, backoffs and the response body (1ms to 1d); then 504 `upstream_timeout` (or the body is cut).
    pub total: Option<String>,
}
