//! Where remedies keep their state, as the `store:` section says: this process's memory,
//! or a Redis shared by every replica, with what to do when Redis cannot answer.

use crate::secret::Secret;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Default)]
pub enum StoreSettings {
    /// This process's memory (the default): each replica counts on its own.
    #[default]
    Memory,
    Redis(Box<RedisSettings>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// `redis://…` or `rediss://…`, `${ENV}` already substituted (it may hold a password).
    pub url: Secret,
    /// A Redis Cluster's nodes (some of them: the rest are discovered), instead of `url`.
    pub cluster: Vec<Secret>,
    /// The primary Sentinels name, instead of `url`.
    pub sentinel: Option<SentinelSettings>,
    /// The start of every key, so that deployments sharing one Redis stay apart.
    pub prefix: String,
    /// The longest wait for one operation.
    pub timeout: Duration,
    pub on_error: OnError,
    /// Replicas sharing the Redis: with `on_error: local`, each falls back to its limit
    /// divided by this.
    pub expected_replicas: u64,
    /// How long a concurrency slot held by a gateway that stopped renewing it (killed)
    /// stays taken.
    pub lease_ttl: Duration,
    pub sync: SyncMode,
    /// With [`SyncMode::Lease`]: the admissions taken from Redis at once.
    pub lease_size: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SentinelSettings {
    /// The Sentinels' URLs (their own passwords inside).
    pub nodes: Vec<Secret>,
    /// The name the Sentinels monitor the primary by.
    pub master: String,
    /// The primary's password.
    pub password: Option<Secret>,
}

crate::fields::words::words! {
    /// How admissions (rate limits, quotas) are counted on Redis (`store.sync`).
    pub enum SyncMode {
        /// One round trip each: exactly the limit across replicas.
        Exact = "exact",
        /// Blocks of `lease_size` taken at once and handed out from memory: never over
        /// the limit, up to replicas × block size under it per window.
        Lease = "lease",
    }
}

crate::fields::words::words! {
    /// What a remedy does while Redis cannot answer (`store.on_error`).
    pub enum OnError {
        /// Count in this process's memory, each limit divided by the expected replicas,
        /// so that all of them together stay near the limit.
        Local = "local",
        /// Let the request through, as if the limit had room.
        Allow = "allow",
        /// Refuse the request, as if the limit were reached.
        Deny = "deny",
    }
}

impl OnError {
    pub fn name(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Allow => "allow",
            OnError::Deny => "deny",
        }
    }
}
