//! The in-process [`Store`]: counters and deadlines in a hash map split into shards, each
//! behind its own short lock, so requests of different limits (and different groups of
//! one limit) rarely meet on a lock. Expired entries are swept from a shard when it has
//! doubled since its last sweep, which keeps memory bounded by the live keys. Each shard
//! is alone on its cache lines: two workers counting in two shards never pass a line
//! between their cores. A key is hashed once per operation: the hash picks the shard and
//! is the one the shard's table is probed with.

use super::{Added, Cause, Key, Store, StoreError, StoreFuture};
use crate::policy::clock;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::Mutex;

const SHARDS: usize = 64;

#[derive(Default)]
struct Shard {
    map: HashTable<(Key, Slot)>,
    sweep_at: usize,
}

/// A shard locked for one operation on one key: the key, its hash, and the time read
/// before the lock was taken (`None` for [`Store::add`], which reads it only when it
/// needs it).
struct At<'a> {
    shard: &'a mut Shard,
    key: &'a Key,
    hash: u64,
    now: Option<u64>,
}

/// The key's hash: picks its shard, and probes the shard's table.
fn hash_of(key: &Key) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// Whether a table entry is `key`'s.
fn is(key: &Key) -> impl Fn(&(Key, Slot)) -> bool + '_ {
    move |(k, _)| k == key
}

impl At<'_> {
    fn slot(&mut self) -> Option<&mut Slot> {
        self.shard
            .map
            .find_mut(self.hash, is(self.key))
            .map(|(_, s)| s)
    }

    /// The key's value, if it has one that has not expired.
    fn live(&mut self) -> Option<Slot> {
        let now = self.now.unwrap_or_else(clock::now_ms);
        self.slot().copied().filter(|s| s.live(now))
    }

    fn set(&mut self, slot: Slot) {
        let map = &mut self.shard.map;
        match map.entry(self.hash, is(self.key), |(k, _)| hash_of(k)) {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().1 = slot,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((self.key.clone(), slot));
            }
        }
    }

    fn remove(&mut self) {
        if let Ok(e) = self.shard.map.find_entry(self.hash, is(self.key)) {
            e.remove();
        }
    }
}

#[derive(Clone, Copy)]
struct Slot {
    value: u64,
    expires_ms: u64,
}

impl Slot {
    /// Not expired at `now` (0: never expires).
    fn live(&self, now: u64) -> bool {
        self.expires_ms == 0 || self.expires_ms > now
    }
}

pub struct Memory {
    shards: Box<[Padded]>,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }
}

/// A shard's lock and map, on lines of their own.
#[derive(Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

impl Memory {
    /// `f` on `key`'s shard, the time read first: the lock is held no longer than the
    /// lookup.
    fn with<T>(&self, key: &Key, f: impl FnOnce(At<'_>) -> T) -> Result<T, StoreError> {
        self.with_at(key, Some(clock::now_ms()), f)
    }

    /// [`Memory::with`] with the time given (`None`: read only where it is needed, a
    /// sweep or an expiry to check).
    fn with_at<T>(
        &self,
        key: &Key,
        now: Option<u64>,
        f: impl FnOnce(At<'_>) -> T,
    ) -> Result<T, StoreError> {
        let hash = hash_of(key);
        let mut shard = self.shards[hash as usize % SHARDS]
            .0
            .lock()
            .map_err(|_| StoreError::new(Cause::Internal, "memory store lock poisoned"))?;
        if shard.map.len() >= shard.sweep_at.max(64) {
            let now = now.unwrap_or_else(clock::now_ms);
            shard.map.retain(|(_, s)| s.live(now));
            shard.sweep_at = shard.map.len() * 2;
        }
        Ok(f(At {
            shard: &mut shard,
            key,
            hash,
            now,
        }))
    }

    /// Bytes held by the names of the entries stored (resource and part text): what
    /// clients' values can make grow, so tests can bound it.
    pub fn key_bytes(&self) -> usize {
        self.shards
            .iter()
            .filter_map(|s| s.0.lock().ok())
            .map(|s| {
                s.map
                    .iter()
                    .map(|(k, _)| k.resource.len() + k.part.len())
                    .sum::<usize>()
            })
            .sum()
    }
}

impl Store for Memory {
    fn add(&self, key: &Key, n: u64, limit: u64, expires_ms: u64) -> StoreFuture<'_, Added> {
        // The clock is read only for a counter whose expiry is not the one given. A key's
        // expiry is its window's end (the window is part of the key), which its callers
        // compute from the time they read: a counter of this window is counted on
        // without a second reading. (Given an expiry that has passed, as a settlement
        // after its window may, it counts on what the key held: a key no read finds
        // live, swept like any other.)
        StoreFuture::ready(self.with_at(key, None, |mut at| {
            // One lookup: a counter that exists is read and updated in place (its key is
            // not copied again); an expired one counts from zero.
            let slot = at.slot();
            let count = match &slot {
                Some(s) if s.expires_ms == expires_ms || s.live(clock::now_ms()) => s.value,
                _ => 0,
            };
            if count.saturating_add(n) > limit {
                return Added {
                    taken: false,
                    count,
                };
            }
            let new = Slot {
                value: count + n,
                expires_ms,
            };
            match slot {
                Some(s) => *s = new,
                None => at.set(new),
            }
            Added {
                taken: true,
                count: count + n,
            }
        }))
    }

    fn sub(&self, key: &Key, n: u64) -> StoreFuture<'_, ()> {
        StoreFuture::ready(self.with(key, |mut at| {
            if let Some(s) = at.slot() {
                s.value = s.value.saturating_sub(n);
            }
        }))
    }

    fn release(&self, key: &Key, n: u64) {
        let _ = self.with(key, |mut at| {
            if let Some(s) = at.slot() {
                s.value = s.value.saturating_sub(n);
                if s.value == 0 && s.expires_ms == 0 {
                    at.remove();
                }
            }
        });
    }

    fn get(&self, key: &Key) -> StoreFuture<'_, u64> {
        StoreFuture::ready(self.with(key, |mut at| at.live().map_or(0, |s| s.value)))
    }

    fn reset(&self, key: &Key) -> StoreFuture<'_, ()> {
        StoreFuture::ready(self.with(key, |mut at| at.remove()))
    }

    fn raise(&self, key: &Key, until_ms: u64, expires_ms: u64) -> StoreFuture<'_, u64> {
        StoreFuture::ready(self.with(key, |mut at| {
            let v = at.live().map_or(0, |s| s.value).max(until_ms);
            at.set(Slot {
                value: v,
                expires_ms,
            });
            v
        }))
    }

    fn deadline(&self, key: &Key) -> StoreFuture<'_, u64> {
        self.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn add_within_limit_only() {
        let m = Memory::default();
        let k = Key::new(&Arc::from("r"), &Arc::from("total"), 1);
        assert!(m.add(&k, 1, 2, 0).await.unwrap().taken);
        assert!(m.add(&k, 1, 2, 0).await.unwrap().taken);
        let third = m.add(&k, 1, 2, 0).await.unwrap();
        assert_eq!((third.taken, third.count), (false, 2));
        m.sub(&k, 1).await.unwrap();
        assert!(m.add(&k, 1, 2, 0).await.unwrap().taken);
        let d = Key::new(&Arc::from("r"), &Arc::from("until"), 0);
        let far = clock::now_ms() + 10_000;
        assert_eq!(m.raise(&d, far, far).await.unwrap(), far);
        assert_eq!(m.raise(&d, far - 5, far).await.unwrap(), far);
        assert_eq!(m.deadline(&d).await.unwrap(), far);
    }

    /// A counter given the expiry it holds counts on (its window's, read by the caller);
    /// given another once its own has passed, it counts from zero, and no read finds it
    /// live after its expiry.
    #[tokio::test(start_paused = true)]
    async fn a_counter_of_its_window_counts_on_and_an_expired_one_from_zero() {
        let m = Memory::default();
        let k = Key::new(&Arc::from("r"), &Arc::from("total"), 0);
        let end = clock::now_ms() + 1_000;
        assert_eq!(m.add(&k, 1, 10, end).await.unwrap().count, 1);
        assert_eq!(m.add(&k, 2, 10, end).await.unwrap().count, 3);
        assert_eq!(m.get(&k).await.unwrap(), 3);
        tokio::time::advance(std::time::Duration::from_millis(1_500)).await;
        assert_eq!(m.get(&k).await.unwrap(), 0, "expired for reads");
        let next = clock::now_ms() + 1_000;
        let after = m.add(&k, 1, 10, next).await.unwrap();
        assert_eq!((after.taken, after.count), (true, 1), "counted from zero");
    }
}
