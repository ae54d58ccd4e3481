//! The store replicas share: Redis, each operation bounded by the store's `timeout`, and
//! when Redis cannot answer, `on_error`: admission (`add`) counts in this process's memory
//! with the limit divided by the expected replicas (`local`), lets the request through
//! (`allow`) or refuses it (`deny`); the other operations (releases, deadlines, resets)
//! always go to memory, so a provider's pause still holds here. After a failure a circuit
//! opens for a backoff (100 ms doubling to 5 s): while it is open no request waits for
//! Redis; when it ends one request tries Redis again, on a new connection, and its
//! success closes the circuit ([`super::health`]).

use super::blocks::Blocks;
use super::health::Health;
use super::redis::Redis;
use super::settings::{OnError, RedisSettings, SyncMode};
use super::{Added, Cause, Key, Store, StoreError, StoreFuture, memory::Memory};
use crate::metrics::Metrics;
use crate::policy::clock;
use std::future::Future;
use std::time::{Duration, Instant};

pub struct RedisBacked {
    redis: Redis,
    local: Memory,
    on_error: OnError,
    timeout: Duration,
    replicas: u64,
    lease_ttl: Duration,
    health: std::sync::Arc<Health>,
    exhausted: std::sync::Arc<super::exhausted::Exhausted>,
    /// `sync: lease`: admissions taken from Redis in blocks.
    blocks: Option<Blocks>,
    metrics: Metrics,
}

impl RedisBacked {
    pub fn new(s: &RedisSettings, metrics: &Metrics) -> Result<Self, String> {
        Ok(Self {
            redis: Redis::new(
                s.url.expose(),
                &s.cluster.iter().map(|u| u.expose()).collect::<Vec<_>>(),
                s.sentinel.as_ref().map(|s| super::sentinel::Sentinels {
                    nodes: s.nodes.iter().map(|n| n.expose().to_owned()).collect(),
                    master: s.master.clone(),
                    password: s.password.as_ref().map(|p| p.expose().to_owned()),
                }),
                &s.prefix,
                s.timeout,
            )?,
            local: Memory::default(),
            on_error: s.on_error,
            timeout: s.timeout,
            replicas: s.expected_replicas.max(1),
            lease_ttl: s.lease_ttl,
            health: Default::default(),
            exhausted: Default::default(),
            blocks: match s.sync {
                SyncMode::Exact => None,
                SyncMode::Lease => Some(Blocks::new(s.lease_size)),
            },
            metrics: metrics.clone(),
        })
    }

    /// Whether Redis answered the last time it was asked (`/policies`, `/readyz`).
    pub fn healthy(&self) -> bool {
        !self.health.is_open()
    }

    /// Runs `op` on Redis within the timeout; on a failure, counts it, opens the circuit
    /// and answers with `fallback`. With the circuit open, `fallback` at once.
    fn run<'a, T: Send + 'a, F>(
        &'a self,
        op: impl FnOnce(&Redis) -> F,
        fallback: impl FnOnce(&'a Self) -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        if !self.health.admits(clock::now_ms()) {
            self.count("circuit_open");
            return fallback(self);
        }
        let pending = op(&self.redis);
        StoreFuture::Pending(Box::pin(async move {
            let started = Instant::now();
            let e = match tokio::time::timeout(self.timeout, pending).await {
                Ok(Ok(v)) => {
                    self.metrics.store_duration.observe(started.elapsed());
                    self.health.succeeded();
                    return Ok(v);
                }
                Ok(Err(e)) => e,
                Err(_) => timed_out(self.timeout),
            };
            self.count(e.cause.metric_kind());
            self.health.failed(&e, clock::now_ms());
            // The next try, on any worker, starts from a new connection: one that failed
            // may still be in its own reconnect backoff, or broken without knowing it.
            self.redis.reconnect();
            fallback(self).await
        }))
    }

    /// Sends `op` to Redis without waiting for it (a release from a drop), bounded by the
    /// timeout, a failure counted and noted; false when there is no runtime to run it on.
    fn in_background(
        &self,
        op: impl Future<Output = Result<(), StoreError>> + Send + 'static,
    ) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let (timeout, metrics, health) = (self.timeout, self.metrics.clone(), self.health.clone());
        rt.spawn(async move {
            let e = match tokio::time::timeout(timeout, op).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e,
                Err(_) => timed_out(timeout),
            };
            count(&metrics, e.cause.metric_kind());
            health.note(&e, clock::now_ms());
        });
        true
    }

    fn count(&self, kind: &'static str) {
        count(&self.metrics, kind);
    }

    /// An admission while Redis cannot answer, as `on_error` says; `held`: admissions of
    /// this counter this replica already took from Redis (`sync: lease`'s blocks), which
    /// count against its share.
    fn fallback_add(
        &self,
        key: &Key,
        n: u64,
        limit: u64,
        expires_ms: u64,
        held: u64,
    ) -> StoreFuture<'_, Added> {
        match self.on_error {
            OnError::Local => {
                let share = self.share(limit).saturating_sub(held);
                self.local.add(key, n, share, expires_ms)
            }
            OnError::Allow => StoreFuture::ready(Ok(Added {
                taken: true,
                count: 0,
            })),
            OnError::Deny => StoreFuture::ready(Ok(Added {
                taken: false,
                count: limit,
            })),
        }
    }

    /// With `sync: lease`, an admission given back goes to its counter's block (Redis
    /// counted the block, not the admission).
    fn gave_back_to_block(&self, key: &Key, n: u64) -> bool {
        self.blocks.as_ref().is_some_and(|b| b.give_back(key, n))
    }

    /// A refusal known without asking (the window is full).
    fn known_full(&self, key: &Key, n: u64, limit: u64) -> Option<StoreFuture<'_, Added>> {
        self.exhausted.refuses(key, n, clock::now_ms()).then(|| {
            StoreFuture::ready(Ok(Added {
                taken: false,
                count: limit,
            }))
        })
    }

    /// This replica's share of `limit` while Redis is away: rounded up, so a limit never
    /// becomes 0.
    fn share(&self, limit: u64) -> u64 {
        limit.div_ceil(self.replicas)
    }
}

impl Store for RedisBacked {
    fn add(&self, key: &Key, n: u64, limit: u64, expires_ms: u64) -> StoreFuture<'_, Added> {
        if let Some(refused) = self.known_full(key, n, limit) {
            return refused;
        }
        let fallback_key = key.clone();
        let (exhausted, k) = (self.exhausted.clone(), key.clone());
        self.run(
            |r| {
                let add = r.add(key, n, limit, expires_ms);
                async move {
                    let added = add.await?;
                    if !added.taken {
                        exhausted.remember(&k, n, expires_ms);
                    }
                    Ok(added)
                }
            },
            move |me| me.fallback_add(&fallback_key, n, limit, expires_ms, 0),
        )
    }

    fn take(&self, key: &Key, n: u64, limit: u64, expires_ms: u64) -> StoreFuture<'_, Added> {
        let Some(blocks) = &self.blocks else {
            return self.add(key, n, limit, expires_ms);
        };
        let block = blocks.of(key);
        if let Some(a) = block.take(n) {
            return StoreFuture::ready(Ok(a));
        }
        if let Some(refused) = self.known_full(key, n, limit) {
            return refused;
        }
        let key = key.clone();
        StoreFuture::Pending(Box::pin(async move {
            // One request of this replica fetches the next block; the others wait for it
            // and take from it.
            let _fetching = block.fetching.lock().await;
            if let Some(a) = block.take(n) {
                return Ok(a);
            }
            // The fetch before this one may have found the window full.
            if let Some(refused) = self.known_full(&key, n, limit) {
                return refused.await;
            }
            let (exhausted, k, b) = (self.exhausted.clone(), key.clone(), block.clone());
            let fallback_key = key.clone();
            let size = blocks.size;
            // Only a fetch (under the lock held here) adds to it.
            let held = block.granted();
            self.run(
                |r| {
                    let grant = r.grant(&key, n, size, limit, expires_ms);
                    async move {
                        let (granted, count) = grant.await?;
                        if granted == 0 {
                            exhausted.remember(&k, n, expires_ms);
                            return Ok(Added {
                                taken: false,
                                count,
                            });
                        }
                        Ok(b.filled(granted, n, count))
                    }
                },
                move |me| me.fallback_add(&fallback_key, n, limit, expires_ms, held),
            )
            .await
        }))
    }

    fn sub(&self, key: &Key, n: u64) -> StoreFuture<'_, ()> {
        self.exhausted.forget(key, clock::now_ms());
        if self.gave_back_to_block(key, n) {
            return StoreFuture::ready(Ok(()));
        }
        let k = key.clone();
        self.run(|r| r.sub(key, n), move |me| me.local.sub(&k, n))
    }

    fn release(&self, key: &Key, n: u64) {
        self.exhausted.forget(key, clock::now_ms());
        if self.gave_back_to_block(key, n) {
            return;
        }
        // From a drop: sent in the background on this thread's runtime, never awaited.
        // With the circuit open the slot was taken here, in memory.
        if self.health.is_open() || !self.in_background(self.redis.sub(key, n)) {
            self.local.release(key, n);
        }
    }

    fn get(&self, key: &Key) -> StoreFuture<'_, u64> {
        let k = key.clone();
        self.run(|r| r.get(key), move |me| me.local.get(&k))
    }

    fn reset(&self, key: &Key) -> StoreFuture<'_, ()> {
        self.exhausted.forget(key, clock::now_ms());
        let k = key.clone();
        self.run(|r| r.reset(key), move |me| me.local.reset(&k))
    }

    fn raise(&self, key: &Key, until_ms: u64, expires_ms: u64) -> StoreFuture<'_, u64> {
        let k = key.clone();
        self.run(
            |r| r.raise(key, until_ms, expires_ms),
            move |me| me.local.raise(&k, until_ms, expires_ms),
        )
    }

    fn deadline(&self, key: &Key) -> StoreFuture<'_, u64> {
        self.get(key)
    }

    fn lease(&self, key: &Key, limit: u64, ttl_ms: u64) -> StoreFuture<'_, Option<u64>> {
        let k = key.clone();
        self.run(
            |r| r.lease(key, limit, ttl_ms),
            move |me| match me.on_error {
                OnError::Local => me.local.lease(&k, me.share(limit), ttl_ms),
                // A lease of memory's kind: giving it back takes nothing from anyone.
                OnError::Allow => StoreFuture::ready(Ok(Some(super::LOCAL_LEASE))),
                OnError::Deny => StoreFuture::ready(Ok(None)),
            },
        )
    }

    fn lease_ttl(&self) -> Option<Duration> {
        Some(self.lease_ttl)
    }

    fn renew(&self, key: &Key, id: u64, ttl_ms: u64) -> StoreFuture<'_, ()> {
        if id == super::LOCAL_LEASE {
            return StoreFuture::ready(Ok(()));
        }
        self.run(|r| r.renew(key, id, ttl_ms), |_| StoreFuture::ready(Ok(())))
    }

    fn unlease(&self, key: &Key, id: u64) {
        if id == super::LOCAL_LEASE {
            self.local.release(key, 1);
        } else {
            // A Redis lease goes back to Redis; if it cannot, it ends with its ttl.
            self.in_background(self.redis.unlease(key, id));
        }
    }

    fn leased(&self, key: &Key) -> StoreFuture<'_, u64> {
        let k = key.clone();
        self.run(|r| r.leased(key), move |me| me.local.get(&k))
    }

    /// A shared cache's entry: when Redis cannot answer, none (the cache serves from
    /// this replica's memory or fetches), never an error and never a wait past the
    /// timeout.
    fn value(&self, key: &Key, max: u64) -> StoreFuture<'_, Option<Vec<u8>>> {
        self.run(|r| r.value(key, max), |_| StoreFuture::ready(Ok(None)))
    }

    fn set_value(&self, key: &Key, value: Vec<u8>, ttl_ms: u64) -> StoreFuture<'_, ()> {
        self.run(
            |r| r.set_value(key, value, ttl_ms),
            |_| StoreFuture::ready(Ok(())),
        )
    }

    fn shared(&self) -> bool {
        true
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": "redis",
            // Whether the last operation got an answer; false while the circuit is open
            // and requests fall back.
            "answering": self.healthy(),
            "on_error": self.on_error.name(),
            "expected_replicas": self.replicas,
            // Why it last failed (cause, message, fix, seconds ago); null if it never did.
            "last_error": self.health.last_error(clock::now_ms()),
        })
    }
}

/// Counts a failed (or skipped) store operation by its `kind`.
fn count(metrics: &Metrics, kind: &'static str) {
    metrics
        .store_errors
        .get_or_create(&crate::metrics::KindLabels { kind })
        .inc();
}

fn timed_out(timeout: Duration) -> StoreError {
    StoreError::new(
        Cause::Timeout,
        format!("no answer within store.timeout ({timeout:?})"),
    )
}
