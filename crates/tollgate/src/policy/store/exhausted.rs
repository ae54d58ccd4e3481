//! Counters known to be full until their window ends, as Envoy's rate-limit service keeps
//! them: once Redis has refused an addition to a window's counter, the same or a larger
//! addition is refused here, without a round trip, until the window's counter expires.
//! A give-back from this process (a refund) forgets the entry; one from another replica
//! is only seen when the window ends, so the bound errs towards refusing, never towards
//! letting more through than the limit.

use super::Key;
use std::time::Duration;

pub struct Exhausted {
    /// Per counter: when it expires (unix ms) and the smallest addition refused.
    cache: moka::sync::Cache<Key, (u64, u64)>,
}

impl Default for Exhausted {
    fn default() -> Self {
        Self {
            // Bounded however many groups clients make; an entry never outlives an hour
            // (longer windows are asked again).
            cache: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_secs(3600))
                .build(),
        }
    }
}

impl Exhausted {
    /// Whether adding `n` to `key` is known to be refused at `now_ms`.
    pub fn refuses(&self, key: &Key, n: u64, now_ms: u64) -> bool {
        self.cache
            .get(key)
            .is_some_and(|(until, refused)| until > now_ms && n >= refused)
    }

    /// Redis refused `n` on `key`, a counter that expires at `expires_ms` (0: never,
    /// which is not remembered: only a window ends by itself).
    pub fn remember(&self, key: &Key, n: u64, expires_ms: u64) {
        if expires_ms > 0 {
            self.cache.insert(key.clone(), (expires_ms, n));
        }
    }

    /// Room was given back on `key`.
    pub fn forget(&self, key: &Key) {
        self.cache.invalidate(key);
    }
}
