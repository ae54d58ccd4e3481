//! Raw types of the `endpoints` section: aggregated endpoints on the proxy listener, each
//! fanning out to one or more backends and merging their JSON answers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One aggregated endpoint: a path (with `{params}`) and method on the proxy listener,
/// answered by calling its backends (in parallel, or after the backends whose answers
/// their URLs use) and merging their JSON objects.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    /// Path on the proxy listener; `{name}` matches one path segment and names it for the backend URLs, e.g. `/users/{user}`.
    pub path: String,
    /// HTTP method the endpoint answers (default `GET`).
    #[serde(default = "get")]
    pub method: String,
    /// Deadline for the whole fan-out, from the request's arrival (default: `endpoint_defaults.timeout`, else `3s`; 1ms to 1h). Backends still running at the deadline count as timed out.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Sets `Cache-Control: public, max-age=…` on complete answers (default: `endpoint_defaults.cache_ttl`, else no header).
    #[serde(default)]
    pub cache_ttl: Option<String>,
    /// Client request headers passed to every backend, by name (default: none; every other header is dropped — list `Authorization` here to pass it). `["*"]` passes every header but hop-by-hop ones, `Host`, framing, `Accept-Encoding` and tollgate's own `x-tollgate-*`.
    #[serde(default)]
    pub headers: Vec<String>,
    /// Client query parameters passed to every backend, by name, matched decoded (default: none; every other parameter is dropped). `["*"]` passes them all.
    #[serde(default)]
    pub query: Vec<String>,
    /// `User-Agent` of the backend calls when the client's is not passed on (default: `endpoint_defaults.user_agent`, else `tollgate/<version>`).
    #[serde(default)]
    pub user_agent: Option<String>,
    /// `json` (default): merge the backends' JSON objects. `no-op`: one backend, its response relayed untouched (status, headers, streamed body, any content type).
    #[serde(default = "json")]
    pub encoding: String,
    /// On a partial answer, also put an object naming each failed backend and why under this key of the body (absent: only the `x-tollgate-failed-backends` header says it).
    #[serde(default)]
    pub errors_key: Option<String>,
    /// Largest backend response body read for merging (default `10MiB`; 1KiB to 1GiB); a larger one fails that backend. Also the largest client body a `json` endpoint reads to send to its backends (413 past it).
    #[serde(default = "ten_mib")]
    pub max_body_bytes: String,
    /// The backends, merged in this order (a later backend's keys win over an earlier one's).
    pub backends: Vec<RawBackend>,
}

/// One backend call of an endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    /// URL template: `http(s)://host[:port]/path?query`, or `/path?query` on `endpoint_defaults.host` (`${VAR}` is replaced from the environment first), where `{name}` is a parameter of the endpoint path and `{respN.a.b}` (or KrakenD's `{respN_a.b}`) a field of backend N's answer as shaped by its own `target`/`allow`/`deny`/`mapping`/`group`, else as it came (N earlier in the list; this backend then waits for it).
    pub url: String,
    /// Name in `x-tollgate-failed-backends`, the errors object and metrics (default: its `group`, else `backend<index>`).
    #[serde(default)]
    pub name: Option<String>,
    /// HTTP method of the backend call (default `GET`). POST, PUT, PATCH and DELETE send the client's body and `Content-Type`; GET and HEAD send none.
    #[serde(default = "get")]
    pub method: String,
    /// Deadline of this call (default: the endpoint's `timeout`; never beyond it).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Nest this backend's (manipulated) answer under this key.
    #[serde(default)]
    pub group: Option<String>,
    /// Use only the sub-object at this dotted path of the answer (`data` or `data.user`).
    #[serde(default)]
    pub target: Option<String>,
    /// Keep only these fields (dotted paths into nested objects); applied after `target`.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Drop these fields (dotted paths into nested objects); applied after `target`.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Rename top-level fields: `{old: new}`; applied after `allow`/`deny`.
    #[serde(default)]
    pub mapping: BTreeMap<String, String>,
    /// A backend answering a JSON array has it wrapped under this key (default `collection`).
    #[serde(default = "collection")]
    pub collection: String,
}

/// What every aggregated endpoint takes when it does not say (KrakenD's service-level
/// `timeout`, `cache_ttl` and `host`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpointDefaults {
    /// Each endpoint's `timeout` when it sets none (default `3s`; 1ms to 1h).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Each endpoint's `cache_ttl` when it sets none (default: none).
    #[serde(default)]
    pub cache_ttl: Option<String>,
    /// `http(s)://host[:port]` that backend URLs written as a path (`/users/{id}`) go to.
    #[serde(default)]
    pub host: Option<String>,
    /// Each endpoint's `user_agent` when it sets none (default `tollgate/<version>`).
    #[serde(default)]
    pub user_agent: Option<String>,
}

fn get() -> String {
    "GET".into()
}
fn json() -> String {
    "json".into()
}
fn ten_mib() -> String {
    "10MiB".into()
}
fn collection() -> String {
    "collection".into()
}
