//! Where cache entries live: an asynchronous interface (a remote store can implement
//! it) and the in-memory implementation on moka, bounded by total size with eviction of
//! the least recently used entries.

use crate::policy::store::StoreFuture;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use moka::Expiry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A stored response.
#[derive(Debug)]
pub struct Entry {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Unix ms when it was stored (or last revalidated).
    pub stored_ms: u64,
    /// Fresh until this unix ms.
    pub fresh_until_ms: u64,
    /// Kept (for revalidation) until this unix ms.
    pub keep_until_ms: u64,
    /// The `Age` it had when it arrived, in seconds.
    /// (u32: 136 years; it packs beside `status`.)
    pub initial_age: u32,
    /// The request headers the response's `Vary` names, with the values they had
    /// (RFC 9111 §4.1): the entry serves only requests that send the same.
    /// (A boxed slice, as `pace` is a thin pointer: the entry, copied into each worker's
    /// copies, stays at 200 bytes.)
    pub vary: Box<[(http::HeaderName, Option<http::HeaderValue>)]>,
    /// An LLM answer's usage and cost when it was fetched: what each hit saves (boxed:
    /// an entry's size is copied into each worker's copies; most entries have none).
    pub llm: Option<Box<Saved>>,
    /// A streamed answer's frames and when they came, kept with `replay: paced`.
    pub pace: Option<std::sync::Arc<super::replay::Pace>>,
}

pub use crate::llm::Saved;

impl Entry {
    pub fn weight(&self, key: &str) -> u32 {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 32)
            .sum();
        (self.body.len() + headers + key.len() + 128).min(u32::MAX as usize) as u32
    }

    /// Whether `request` sends what the stored response varied on.
    pub fn matches(&self, request: &HeaderMap) -> bool {
        self.vary.iter().all(|(n, v)| request.get(n) == v.as_ref())
    }

    pub fn has_validators(&self) -> bool {
        self.headers.contains_key(http::header::ETAG)
            || self.headers.contains_key(http::header::LAST_MODIFIED)
    }
}

pub trait CacheStore: Send + Sync + 'static {
    /// The entry, and whether it was read from the shared store (another replica stored
    /// it: `x-tollgate-cache: shared-hit` when it answers).
    fn get(&self, key: &str) -> StoreFuture<'_, Option<(Arc<Entry>, bool)>>;
    fn put(&self, key: String, entry: Arc<Entry>) -> StoreFuture<'_, ()>;
    /// Entries and bytes held in this replica's memory, for `GET /policies` and the
    /// gauges.
    fn size(&self) -> (u64, u64);
    /// Whether entries are shared with other replicas (`store: shared` on Redis).
    fn shared(&self) -> bool {
        false
    }
    /// On a shared store: at most how many bytes of the cache it holds now, and its
    /// budget (`GET /policies`); `None` elsewhere, or when Redis cannot say.
    fn shared_bytes(&self) -> StoreFuture<'_, Option<(u64, u64)>> {
        StoreFuture::ready(Ok(None))
    }
    /// Drops every entry (`POST /cache/purge`). On a shared store, for every replica:
    /// they follow within [`PURGE_CHECK_MS`].
    fn purge(&self) -> StoreFuture<'_, Purged>;
    /// On a shared store, whether another replica purged the cache since this one last
    /// looked (this replica's memory is then dropped too).
    fn follow(&self) -> StoreFuture<'_, bool> {
        StoreFuture::ready(Ok(false))
    }
    /// Before this replica's fetch of a key it misses: on a shared store, the right to
    /// fetch it for every replica, or the entry another replica fetched meanwhile.
    fn claim(&self, key: &str) -> StoreFuture<'_, Claim> {
        let _ = key;
        StoreFuture::ready(Ok(Claim::Fetch(None)))
    }
}

/// What a purge did.
pub struct Purged {
    /// Entries this replica's memory held.
    pub entries: u64,
    /// On a shared store, whether the purge reached it (so every replica follows);
    /// `None` for a cache in memory only.
    pub shared: Option<bool>,
}

/// How often a replica of a shared cache looks whether another purged it (at most once
/// per this many milliseconds, from a request that finds the time passed).
pub const PURGE_CHECK_MS: u64 = 1000;

/// A replica's lease on fetching one key for all of them: given back when dropped (after
/// the entry is stored, or when it could not be), or ending with `max_wait` if the
/// replica dies holding it.
pub struct Flight {
    pub store: Arc<dyn crate::policy::store::Store>,
    pub key: crate::policy::store::Key,
    pub id: u64,
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.store.unlease(&self.key, self.id);
    }
}

/// What [`CacheStore::claim`] found.
pub enum Claim {
    /// Fetch from the provider; with a shared store, holding the flight's lease (given
    /// back when dropped, once the entry is stored).
    Fetch(Option<Flight>),
    /// Another replica stored it while this one waited, or just before this one took
    /// the lease (then held, for a fetch if the entry does not serve the request).
    Found(Arc<Entry>, Option<Flight>),
}

pub struct MemoryCache {
    cache: moka::sync::Cache<String, Arc<Entry>>,
    /// The cache's size: an entry weighing more is not kept (moka would hold it until
    /// its next housekeeping, serving it meanwhile, then evict it).
    max_bytes: u64,
}

/// Entries leave memory when they can no longer be served or revalidated.
struct KeepUntil;

impl Expiry<String, Arc<Entry>> for KeepUntil {
    fn expire_after_create(&self, _k: &String, e: &Arc<Entry>, _now: Instant) -> Option<Duration> {
        Some(Duration::from_millis(
            e.keep_until_ms
                .saturating_sub(crate::policy::clock::now_ms()),
        ))
    }

    fn expire_after_update(
        &self,
        k: &String,
        e: &Arc<Entry>,
        now: Instant,
        _left: Option<Duration>,
    ) -> Option<Duration> {
        self.expire_after_create(k, e, now)
    }
}

impl MemoryCache {
    pub fn new(max_bytes: u64) -> Self {
        Self {
            cache: moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|k: &String, e: &Arc<Entry>| e.weight(k))
                // Least recently used out, as documented. moka's default (TinyLFU) admits
                // a newcomer only if it is used more than what it would evict: a full
                // cache then stopped storing new responses at all.
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .expire_after(KeepUntil)
                .build(),
            max_bytes,
        }
    }
}

impl MemoryCache {
    pub fn entry(&self, key: &str) -> Option<Arc<Entry>> {
        self.cache.get(key)
    }

    /// Drops every entry: how many there were.
    pub fn clear(&self) -> u64 {
        self.cache.run_pending_tasks();
        let n = self.cache.entry_count();
        self.cache.invalidate_all();
        self.cache.run_pending_tasks();
        n
    }

    pub fn insert(&self, key: String, entry: Arc<Entry>) {
        if u64::from(entry.weight(&key)) > self.max_bytes {
            // Larger than the whole cache; a stale entry the key had must go too.
            self.cache.invalidate(&key);
            return;
        }
        self.cache.insert(key, entry);
    }
}

impl CacheStore for MemoryCache {
    fn get(&self, key: &str) -> StoreFuture<'_, Option<(Arc<Entry>, bool)>> {
        StoreFuture::ready(Ok(self.entry(key).map(|e| (e, false))))
    }

    fn put(&self, key: String, entry: Arc<Entry>) -> StoreFuture<'_, ()> {
        self.insert(key, entry);
        StoreFuture::ready(Ok(()))
    }

    fn size(&self) -> (u64, u64) {
        self.cache.run_pending_tasks();
        (self.cache.entry_count(), self.cache.weighted_size())
    }

    fn purge(&self) -> StoreFuture<'_, Purged> {
        StoreFuture::ready(Ok(Purged {
            entries: self.clear(),
            shared: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &'static str) -> Arc<Entry> {
        let now = crate::policy::clock::now_ms();
        Arc::new(Entry {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from_static(body.as_bytes()),
            stored_ms: now,
            fresh_until_ms: now + 60_000,
            keep_until_ms: now + 60_000,
            initial_age: 0,
            vary: Box::default(),
            llm: None,
            pace: None,
        })
    }

    #[tokio::test]
    async fn a_full_cache_stores_the_newcomer_and_evicts_the_least_recently_used() {
        let one = entry("x").weight("k0") as u64;
        let c = MemoryCache::new(3 * one);
        for k in ["k0", "k1", "k2"] {
            c.put(k.into(), entry("x")).await.unwrap();
        }
        // Often read: under TinyLFU admission they would keep a newcomer out for good.
        for _ in 0..5 {
            for k in ["k0", "k1", "k2"] {
                assert!(c.get(k).await.unwrap().is_some());
            }
        }
        assert!(c.get("k1").await.unwrap().is_some());
        assert!(c.get("k2").await.unwrap().is_some());
        c.put("k3".into(), entry("x")).await.unwrap();
        c.cache.run_pending_tasks();
        assert!(
            c.get("k3").await.unwrap().is_some(),
            "the newcomer is stored"
        );
        assert!(
            c.get("k0").await.unwrap().is_none(),
            "the least recently used left"
        );
        assert_eq!(c.size().0, 3);
    }

    #[tokio::test]
    async fn an_entry_larger_than_the_cache_is_not_kept_nor_served() {
        let one = entry("x").weight("k") as u64;
        let c = MemoryCache::new(one);
        c.put("k".into(), entry("x")).await.unwrap();
        assert!(c.get("k").await.unwrap().is_some());
        c.put("k".into(), entry("xx")).await.unwrap();
        assert!(
            c.get("k").await.unwrap().is_none(),
            "neither the new entry nor the old one it replaces"
        );
    }
}
