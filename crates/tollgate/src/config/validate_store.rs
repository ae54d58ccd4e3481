//! Validation of the `store` section: a Redis URL that parses (scheme, host, port,
//! database), a prefix that keeps the hash tag where it belongs. Nothing is connected:
//! a Redis that is down at start is `on_error`'s business, not a config error.

use super::raw::{RawStore, RawStoreBackend};
use crate::fields::Errors;
use crate::policy::store::settings::{RedisSettings, SentinelSettings, StoreSettings};
use crate::secret::Secret;

pub(super) fn store(e: &mut Errors, raw: &RawStore) -> StoreSettings {
    if raw.backend == RawStoreBackend::Memory {
        return StoreSettings::Memory;
    }
    let check_url = |u: &str| {
        let scheme_ok = u.starts_with("redis://") || u.starts_with("rediss://");
        if !scheme_ok {
            return Err(format!(
                "`{}` is not a Redis URL; write `redis://HOST:PORT` or `rediss://HOST:PORT` (TLS)",
                crate::secret::mask_url(u)
            ));
        }
        // Shown masked: a mistyped URL still holds its password.
        redis::Client::open(u).map(|_| u.to_owned()).map_err(|err| {
            let shown = crate::secret::mask_url(u);
            format!("`{shown}`: {}", err.to_string().replace(u, &shown))
        })
    };
    let named = [
        raw.url.is_some(),
        !raw.cluster.is_empty(),
        raw.sentinel.is_some(),
    ];
    let url = match (&raw.url, named.iter().filter(|n| **n).count()) {
        (Some(written), 1) => e.env_checked("store.url", written, check_url),
        (None, 1) => Some(String::new()),
        (_, 0) => {
            e.check::<()>(
                "store.url",
                Err("`backend: redis` needs the Redis: write `url: redis://HOST:6379`, or `url: ${REDIS_URL}` with the password in the variable (or `cluster: [redis://HOST:7000, …]` for a Redis Cluster, or `sentinel: {nodes: [redis://HOST:26379], master: NAME}`)".into()),
            );
            None
        }
        _ => {
            let second = if named[1] {
                "store.cluster"
            } else {
                "store.sentinel"
            };
            e.check::<()>(
                second,
                Err("write one of `url` (one Redis), `cluster` (a Redis Cluster's nodes) or `sentinel` (the Sentinels of a primary), not several".into()),
            );
            None
        }
    };
    let sentinel = raw.sentinel.as_ref().map(|s| {
        if s.nodes.is_empty() {
            e.check::<()>(
                "store.sentinel.nodes",
                Err("name the Sentinels: write `nodes: [redis://HOST:26379]`".into()),
            );
        }
        if s.master.is_empty() {
            e.check::<()>(
                "store.sentinel.master",
                Err(
                    "write the name the Sentinels monitor the primary by, e.g. `master: mymaster`"
                        .into(),
                ),
            );
        }
        SentinelSettings {
            nodes: s
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, u)| {
                    e.env_checked(&format!("store.sentinel.nodes[{i}]"), u, check_url)
                })
                .map(Secret::new)
                .collect(),
            master: s.master.clone(),
            password: s
                .password
                .as_ref()
                .and_then(|p| e.env("store.sentinel.password", p))
                .map(Secret::new),
        }
    });
    let cluster: Vec<Secret> = raw
        .cluster
        .iter()
        .enumerate()
        .filter_map(|(i, u)| e.env_checked(&format!("store.cluster[{i}]"), u, check_url))
        .map(Secret::new)
        .collect();
    if raw.prefix.is_empty() || raw.prefix.contains(['{', '}']) {
        e.check::<()>(
            "store.prefix",
            Err(format!(
                "`{}`: write a non-empty prefix without braces (tollgate puts each resource in braces, Redis Cluster's hash tag)",
                raw.prefix
            )),
        );
    }
    let Some(url) = url else {
        return StoreSettings::Memory;
    };
    StoreSettings::Redis(Box::new(RedisSettings {
        url: Secret::new(url),
        cluster,
        sentinel,
        prefix: raw.prefix.clone(),
        timeout: raw.timeout.get(),
        on_error: raw.on_error.get(),
        expected_replicas: raw.expected_replicas.get(),
        lease_ttl: raw.lease_ttl.get(),
        sync: raw.sync.get(),
        lease_size: raw.lease_size.get(),
    }))
}
