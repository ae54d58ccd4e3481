//! Raw types of the `endpoints` section: aggregated endpoints on the proxy listener, each
//! fanning out to one or more backends and merging their JSON answers.

use crate::fields::units::{DAY_MS, Dur, HOUR_MS, Size};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One aggregated endpoint: a path (with `{params}`) and method on the proxy listener,
/// answered by calling its backends (in parallel, or after the backends whose answers
/// their URLs use) and merging their JSON objects.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    /// Path starting with `/`; `{name}` is one whole segment, named for the backend URLs (`/users/{user}`); a name is letters, digits, `_` and `-` (`{user-id}`). Two endpoints of the same shape (`/a/{x}` and `/a/{y}`) are refused; where two different ones match a request, the more specific wins whatever the order: at the first segment where they differ, a literal beats a parameter (`/users/me` over `/users/{id}`, `/a/b/{y}` over `/a/{x}/c`), as KrakenD's router decides.
    pub path: String,
    /// Method the endpoint answers.
    #[serde(default = "get")]
    pub method: String,
    /// Deadline of the whole fan-out. Backends still running then count as timed out; absent: `endpoint_defaults.timeout`.
    #[serde(default)]
    pub timeout: Option<Dur<1, HOUR_MS>>,
    /// `Cache-Control: public, max-age=…` on complete answers (never on partial ones). Absent: `endpoint_defaults.cache_ttl`, else none.
    #[serde(default)]
    pub cache_ttl: Option<Dur<1, { 365 * DAY_MS }>>,
    /// Client request headers passed to every backend, by name. All others are dropped. `["*"]` passes every header but hop-by-hop ones, `x-tollgate-*`, `Proxy-Authorization`, `Host`, `Content-Length`, `Expect` and `Accept-Encoding`.
    #[serde(default)]
    pub headers: Vec<String>,
    /// Client query parameters passed to every backend, by name (appended to the backend URL's own query, as the client encoded them). Names are matched decoded: `page[number]` matches `page%5Bnumber%5D`, as Python `requests` and browsers send it, and `page size` matches `page+size`. All others are dropped. `["*"]` passes the whole query.
    #[serde(default)]
    pub query: Vec<String>,
    /// `User-Agent` of the backend calls, unless `headers` passes the client's; absent: `endpoint_defaults.user_agent`, else `tollgate/<version>`.
    #[serde(default)]
    pub user_agent: Option<String>,
    /// `json`: merge the backends' JSON objects. `no-op`: exactly one backend, its response relayed untouched (status, headers, any content type, body streamed).
    #[serde(default = "json")]
    pub encoding: String,
    /// On a partial answer, also put `{backend: {error, message}}` under this key of the body.
    #[serde(default)]
    pub errors_key: Option<String>,
    /// Largest backend answer read for merging; a larger one fails that backend. Also the largest client body a `json` endpoint reads to send to its backends (413 `body_too_large` past it); a `no-op` endpoint streams the body instead.
    #[serde(default = "ten_mib")]
    pub max_body_bytes: Size<1024, { 1 << 30 }>,
    /// At least one (exactly one with `no-op`).
    pub backends: Vec<RawBackend>,
}

/// One backend call of an endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    /// `http(s)://host[:port]/path?query`, or `/path?query` on `endpoint_defaults.host`; `${VAR}` is replaced from the environment when the config loads. The host is fixed; `{name}` inserts an endpoint path parameter, `{respN.a.b}` (or `{respN_a.b}`) a field of backend N's answer as its own shaping left it, else as it came (N earlier in the list; this backend then runs after it; the value is percent-encoded, an array's values joined with `,`).
    pub url: String,
    /// Name in `x-tollgate-failed-backends` and the errors object; absent: its `group`, else `backend<index>`.
    #[serde(default)]
    pub name: Option<String>,
    /// Method of the backend call. A method that carries a body (POST, PUT, PATCH, DELETE) sends the client's body and its `Content-Type`; GET and HEAD send none.
    #[serde(default = "get")]
    pub method: String,
    /// At most the endpoint's `timeout`; absent: the endpoint's.
    #[serde(default)]
    pub timeout: Option<Dur<1, HOUR_MS>>,
    /// Nest the answer under this key. Two backends with one group, or a group named like a field another backend maps to, are refused.
    #[serde(default)]
    pub group: Option<String>,
    /// Use only the sub-object at this dotted path (`data`, `data.user`).
    #[serde(default)]
    pub target: Option<String>,
    /// Keep only these fields (dotted paths into nested objects).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Drop these fields (dotted paths into nested objects).
    #[serde(default)]
    pub deny: Vec<String>,
    /// Rename top-level fields, `{old: new}`.
    #[serde(default)]
    pub mapping: BTreeMap<String, String>,
    /// Key an array answer is wrapped under.
    #[serde(default = "collection")]
    pub collection: String,
}

/// What every aggregated endpoint takes when it does not say (KrakenD's service-level
/// `timeout`, `cache_ttl` and `host`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpointDefaults {
    /// Each endpoint's `timeout` when it sets none.
    #[serde(default = "three_seconds")]
    pub timeout: Dur<1, HOUR_MS>,
    /// Each endpoint's `cache_ttl` when it sets none (default: none).
    #[serde(default)]
    pub cache_ttl: Option<Dur<1, { 365 * DAY_MS }>>,
    /// `http(s)://host[:port]` that backend URLs written as a path (`/users/{id}`) go to.
    #[serde(default)]
    pub host: Option<String>,
    /// Each endpoint's `user_agent` when it sets none (default `tollgate/<version>`).
    #[serde(default)]
    pub user_agent: Option<String>,
}

impl Default for RawEndpointDefaults {
    fn default() -> Self {
        Self {
            timeout: three_seconds(),
            cache_ttl: None,
            host: None,
            user_agent: None,
        }
    }
}

fn three_seconds() -> Dur<1, HOUR_MS> {
    Dur::secs(3)
}

fn get() -> String {
    "GET".into()
}
fn json() -> String {
    "json".into()
}
fn ten_mib() -> Size<1024, { 1 << 30 }> {
    Size::bytes(10 << 20)
}
fn collection() -> String {
    "collection".into()
}
