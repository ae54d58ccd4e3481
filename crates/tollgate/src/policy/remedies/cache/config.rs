//! The cache's config as written, and its validation.

use super::CacheSpec;
use crate::fields::Errors;
use crate::fields::units::{DAY_MS, Dur, SEC_MS, Size};
use http::Method;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawCache {
    /// Freshness. The provider's `max-age` (and `s-maxage` for a shared cache) caps it.
    pub ttl: Dur<SEC_MS, { 30 * DAY_MS }>,
    /// Methods cached; others bypass. `POST` needs `key_body: true`.
    pub methods: Vec<String>,
    /// Statuses stored.
    pub statuses: Vec<u16>,
    /// Request headers whose values are part of the key (`accept`, `x-github-api-version`, a tenant header…).
    pub key_headers: Vec<String>,
    /// Put a SHA-256 of the request body in the key; a JSON body is canonicalised first (keys sorted, no whitespace, a fractional number spelled as the value it reads as), so `{"a":1, "b":2}` and `{"b":2,"a":1}` share an entry, and so do `0.70` and `0.7`; integers stay as written (`1` and `1.0` are different keys). For search and LLM completion APIs. A body over `max_entry` bypasses.
    pub key_body: bool,
    /// With `key_body`: top-level members of a JSON body left out of the key, for fields that do not change the answer (a request id, a trace label). Recognised LLM calls also leave out `user`, `safety_identifier` and `metadata`.
    pub key_ignore: Vec<String>,
    /// With `key_body`, for recognised LLM calls: also cache calls that sample, whose `temperature` is above 0 or unset (the providers' default is 1). Their answer differs from call to call; a cached one is one sample, served again. Without it they bypass the cache (`temperature: 0` calls are cached).
    pub sampled: bool,
    /// Largest response stored; larger ones stream through uncached.
    pub max_entry: Size<1, { 1 << 30 }>,
    /// Total size (bodies, headers, keys); least recently used entries are evicted beyond it, and an entry larger than all of it is not kept (with `store: shared` it still goes to Redis). Each worker also keeps copies of the entries it serves, up to a sixteenth of this (see "Per worker").
    pub max_size: Size<1024, { 64 << 30 }>,
    /// Declare the cache shared (RFC 9111 §3.5): then `Cache-Control: private` responses, and responses to requests carrying their own `Authorization`, are not stored. A sidecar serving one application is a private cache, so GitHub's `private, max-age=60` stays cacheable by default.
    pub shared: bool,
    /// Store for `ttl` whatever the provider's `Cache-Control` says.
    pub ignore_cache_control: bool,
    /// Where entries live: `local`, this replica's memory; `shared`, also on the shared store (`store.backend: redis`), so an answer one replica fetched serves every replica (with the memory store, the same as `local`). See "Shared across replicas" in docs/policies.md.
    pub store: CacheStore,
    /// With `store: shared`: how long a replica that misses a key another replica is fetching waits for that replica's entry before it fetches itself (also how long a replica that dies while fetching holds the key). Single flight across replicas: N replicas missing one key make one provider call when the first stores its answer, at most one each otherwise.
    pub max_wait: Dur<100, { 5 * 60 * SEC_MS }>,
    /// With `store: shared`: the most bytes of this cache's entries the shared store holds (their records: head, body, times). Counted per period an entry can live (`ttl`, twice it with `revalidate`): what was written in this period and the last may not pass it, so what Redis holds never does; an entry that would pass it stays in the replica's memory only (`tollgate_cache_shared_writes_total{result="over_budget"}`). Rewrites count again, so the bound is on the safe side.
    pub shared_max_size: Size<1024, { 1 << 40 }>,
    /// Keep entries with an `ETag` or `Last-Modified` for another `ttl` once stale, and revalidate them with `If-None-Match` / `If-Modified-Since`; a **304** is answered from the entry (its headers refreshed), so the provider's body is not resent and, for APIs that do not charge 304s (GitHub), your quota is spared.
    pub revalidate: bool,
    /// How a hit sends a stored body: `at_once` (the same bytes in one go), or `paced`: frame by frame, each when it first came after the head, so a streamed (SSE) answer, an LLM's above all, reaches a later caller with the provider's framing and rhythm. Pacing applies to entries stored while it is set.
    pub replay: Replay,
}

/// How a hit sends a stored body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Replay {
    /// The stored bytes in one go.
    AtOnce,
    /// Frame by frame, each when it first came.
    Paced,
}

/// Where a cache's entries live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CacheStore {
    /// This replica's memory.
    Local,
    /// This replica's memory and the shared store, which every replica reads.
    Shared,
}

impl Default for RawCache {
    fn default() -> Self {
        Self {
            ttl: Dur::secs(60),
            methods: vec!["GET".into(), "HEAD".into()],
            statuses: vec![200],
            key_headers: Vec::new(),
            key_body: false,
            key_ignore: Vec::new(),
            sampled: false,
            max_entry: Size::bytes(1 << 20),
            max_size: Size::bytes(64 << 20),
            shared: false,
            ignore_cache_control: false,
            store: CacheStore::Local,
            max_wait: Dur::secs(10),
            shared_max_size: Size::bytes(256 << 20),
            revalidate: true,
            replay: Replay::AtOnce,
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
        ttl: c.ttl.get(),
        methods,
        statuses,
        key_headers: c
            .key_headers
            .iter()
            .enumerate()
            .filter_map(|(i, h)| e.header_name(&format!("{path}.key_headers[{i}]"), h))
            .collect(),
        key_body: c.key_body,
        key_ignore: c.key_ignore.clone(),
        sampled: c.sampled,
        max_entry: c.max_entry.get(),
        max_size: c.max_size.get() as u64,
        shared: c.shared,
        ignore_cache_control: c.ignore_cache_control,
        revalidate: c.revalidate,
        store: c.store,
        max_wait: c.max_wait.get(),
        shared_max_size: c.shared_max_size.get() as u64,
        replay: c.replay,
    }
}
