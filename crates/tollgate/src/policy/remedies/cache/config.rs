//! The cache's config as written, and its validation.

use super::CacheSpec;
use crate::fields::{DAY, Errors, SEC};
use http::Method;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

pub fn cache(e: &mut Errors, path: &str, c: &RawCache) -> CacheSpec {
    let at = |f: &str| format!("{path}.{f}");
    let methods = e.methods(&at("methods"), &c.methods);
    if !c.key_body
        && let Some(m) = methods
            .iter()
            .find(|m| !matches!(**m, Method::GET | Method::HEAD))
    {
        e.fail(
            &at("methods"),
            format!("caching {m} needs `key_body: true`: its body must be part of the key"),
        );
    }
    let statuses = c
        .statuses
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            e.check(
                &format!("{path}.statuses[{i}]"),
                if (200..=599).contains(s) {
                    Ok(*s)
                } else {
                    Err(format!("{s}: write a status from 200 to 599"))
                },
            )
        })
        .collect();
    CacheSpec {
        ttl: e.duration(&at("ttl"), &c.ttl, SEC, 30 * DAY),
        methods,
        statuses,
        key_headers: c
            .key_headers
            .iter()
            .enumerate()
            .filter_map(|(i, h)| e.header_name(&format!("{path}.key_headers[{i}]"), h))
            .collect(),
        key_body: c.key_body,
        max_entry: e.size(&at("max_entry"), &c.max_entry, 1, 1 << 30, "1B to 1GiB"),
        max_size: e.size(
            &at("max_size"),
            &c.max_size,
            1024,
            64 << 30,
            "1KiB to 64GiB",
        ) as u64,
        shared: c.shared,
        ignore_cache_control: c.ignore_cache_control,
        revalidate: c.revalidate,
    }
}
