//! Validation of the `store` section: a Redis URL that parses (scheme, host, port,
//! database), a prefix that keeps the hash tag where it belongs. Nothing is connected:
//! a Redis that is down at start is `on_error`'s business, not a config error.

use super::raw::{RawOnError, RawStore, RawStoreBackend, RawSync};
use super::validate::Errors;
use crate::policy::store::settings::{OnError, RedisSettings, StoreSettings, Sync};
use crate::secret::Secret;

pub(super) fn store(e: &mut Errors, raw: &RawStore) -> StoreSettings {
    if raw.backend == RawStoreBackend::Memory {
        return StoreSettings::Memory;
    }
    let check_url = |u: &str| {
        let scheme_ok = u.starts_with("redis://") || u.starts_with("rediss://");
        if !scheme_ok {
            return Err(format!(
                "`{u}` is not a Redis URL; write `redis://HOST:PORT` or `rediss://HOST:PORT` (TLS)"
            ));
        }
        redis::Client::open(u)
            .map(|_| u.to_owned())
            .map_err(|err| format!("`{u}`: {err}"))
    };
    let url = match (&raw.url, raw.cluster.is_empty()) {
        (Some(written), true) => e.env_checked("store.url", written, check_url),
        (None, false) => Some(String::new()),
        (Some(_), false) => {
            e.check::<()>(
                "store.cluster",
                Err("write either `url` (one Redis) or `cluster` (a Redis Cluster's nodes), not both".into()),
            );
            None
        }
        (None, true) => {
            e.check::<()>(
                "store.url",
                Err("`backend: redis` needs the Redis: write `url: redis://HOST:6379`, or `url: ${REDIS_URL}` with the password in the variable (or `cluster: [redis://HOST:7000, …]` for a Redis Cluster)".into()),
            );
            None
        }
    };
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
    StoreSettings::Redis(RedisSettings {
        url: Secret::new(url),
        cluster,
        prefix: raw.prefix.clone(),
        timeout: raw.timeout.get(),
        on_error: match raw.on_error {
            RawOnError::Local => OnError::Local,
            RawOnError::Allow => OnError::Allow,
            RawOnError::Deny => OnError::Deny,
        },
        expected_replicas: raw.expected_replicas.get(),
        lease_ttl: raw.lease_ttl.get(),
        sync: match raw.sync {
            RawSync::Exact => Sync::Exact,
            RawSync::Lease => Sync::Lease(raw.lease_size.get()),
        },
    })
}
