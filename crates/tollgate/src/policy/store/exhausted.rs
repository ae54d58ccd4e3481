//! Counters known to be full until their window ends, as Envoy's rate-limit service keeps
//! them: once Redis has refused an addition to a window's counter, the same or a larger
//! addition is refused here, without a round trip, until the window's counter expires.
//! A give-back from this process (a refund) forgets the entry; one from another replica
//! is only seen when the window ends, so the bound errs towards refusing, never towards
//! letting more through than the limit.

use super::Key;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub struct Exhausted {
    /// Per counter: when it expires (unix ms) and the smallest addition refused.
    cache: moka::sync::Cache<Key, (u64, u64)>,
    /// The latest end (unix ms) of any window remembered. Until a window is refused, and
    /// once every remembered one has ended, nothing here can refuse: one load of a value
    /// that only a refusal writes stands in for a cache lookup, which every worker's
    /// admissions would otherwise share (moka records each read).
    latest: AtomicU64,
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
            latest: AtomicU64::new(0),
        }
    }
}

impl Exhausted {
    /// Whether adding `n` to `key` is known to be refused at `now_ms`.
    pub fn refuses(&self, key: &Key, n: u64, now_ms: u64) -> bool {
        if now_ms >= self.latest.load(Ordering::Relaxed) {
            return false;
        }
        self.cache
            .get(key)
            .is_some_and(|(until, refused)| until > now_ms && n >= refused)
    }

    /// Redis refused `n` on `key`, a counter that expires at `expires_ms` (0: never,
    /// which is not remembered: only a window ends by itself).
    pub fn remember(&self, key: &Key, n: u64, expires_ms: u64) {
        if expires_ms > 0 {
            // Raised first: a lookup between the two finds no entry and asks Redis, which
            // refuses again (never the other way round).
            self.latest.fetch_max(expires_ms, Ordering::Relaxed);
            self.cache.insert(key.clone(), (expires_ms, n));
        }
    }

    /// Room was given back on `key` at `now_ms`.
    pub fn forget(&self, key: &Key, now_ms: u64) {
        if now_ms < self.latest.load(Ordering::Relaxed) {
            self.cache.invalidate(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(window: u64) -> Key {
        Key::new(&Arc::from("limit"), &Arc::from("all"), window)
    }

    #[test]
    fn refuses_the_same_or_a_larger_addition_until_the_window_ends() {
        let e = Exhausted::default();
        assert!(!e.refuses(&key(1), 1, 1_000), "nothing remembered yet");
        e.remember(&key(1), 2, 2_000);
        assert!(e.refuses(&key(1), 2, 1_000));
        assert!(e.refuses(&key(1), 3, 1_999));
        assert!(!e.refuses(&key(1), 1, 1_000), "a smaller addition may fit");
        assert!(!e.refuses(&key(2), 2, 1_000), "another window");
        assert!(!e.refuses(&key(1), 2, 2_000), "the window has ended");
    }

    #[test]
    fn a_give_back_forgets_and_a_counter_without_expiry_is_not_remembered() {
        let e = Exhausted::default();
        e.remember(&key(1), 1, 2_000);
        e.forget(&key(1), 1_500);
        assert!(!e.refuses(&key(1), 1, 1_500));
        e.remember(&key(3), 1, 0);
        assert!(!e.refuses(&key(3), 1, 1_500));
    }
}
