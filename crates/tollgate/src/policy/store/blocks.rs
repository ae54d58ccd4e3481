//! `store.sync: lease`: admissions taken from Redis in blocks and handed out from memory.
//! Each counter (a window of a limit, or of one of its groups) has a block here: what is
//! left of the admissions this replica took. A request takes from it without a round
//! trip and without a lock (a compare-and-swap); when it runs dry one request of this
//! replica fetches the next block while the others of the same counter wait for it, so a
//! replica never holds more than one block's worth of unused admissions per counter.
//! Redis counts blocks as they are taken, so the replicas together never admit more than
//! the limit; what a replica took and did not use is lost to the others until the window
//! ends.

use super::{Added, Key};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Default)]
pub struct Block {
    /// Admissions taken from Redis and not yet handed out.
    left: AtomicU64,
    /// Redis's count when the last block was taken (all replicas' blocks).
    counted: AtomicU64,
    /// Admissions this replica took from Redis for this counter, used or not: what it
    /// already holds when Redis stops answering (see [`Block::granted`]).
    granted: AtomicU64,
    /// Held by the one request that fetches the next block.
    pub fetching: tokio::sync::Mutex<()>,
}

impl Block {
    /// Takes `n` from what is left: the admission, or `None` when the block is dry.
    pub fn take(&self, n: u64) -> Option<Added> {
        let mut left = self.left.load(Ordering::Acquire);
        loop {
            if left < n {
                return None;
            }
            match self.left.compare_exchange_weak(
                left,
                left - n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Added {
                        taken: true,
                        count: self.count(left - n),
                    });
                }
                Err(now) => left = now,
            }
        }
    }

    /// A new block from Redis: `granted` admissions of which the fetching request uses
    /// `n`, Redis's count `counted` after it. The admission of the fetching request.
    pub fn filled(&self, granted: u64, n: u64, counted: u64) -> Added {
        self.counted.store(counted, Ordering::Release);
        self.granted.fetch_add(granted, Ordering::AcqRel);
        let left = self.left.fetch_add(granted - n, Ordering::AcqRel) + granted - n;
        Added {
            taken: true,
            count: self.count(left),
        }
    }

    /// What this replica took from Redis for this counter: a fallback to memory counts
    /// it as already admitted, so that a replica does not admit its share again on top
    /// of the blocks it had.
    pub fn granted(&self) -> u64 {
        self.granted.load(Ordering::Acquire)
    }

    /// `n` given back (a refund, a request a later limit refused).
    fn give_back(&self, n: u64) {
        self.left.fetch_add(n, Ordering::AcqRel);
    }

    /// The count a response's remaining header is made from: what Redis has counted, less
    /// what this replica holds unused.
    fn count(&self, left: u64) -> u64 {
        self.counted.load(Ordering::Acquire).saturating_sub(left)
    }
}

/// The blocks of the counters this replica admits on, bounded however many groups
/// clients make: an evicted block's admissions are lost (errs towards refusing).
pub struct Blocks {
    pub size: u64,
    cache: moka::sync::Cache<Key, Arc<Block>>,
}

impl Blocks {
    pub fn new(size: u64) -> Self {
        Self {
            size,
            cache: moka::sync::Cache::builder()
                .max_capacity(10_000)
                // A window's counter is not asked again once the window ends.
                .time_to_idle(Duration::from_secs(3600))
                .build(),
        }
    }

    /// `key`'s block, made empty the first time.
    pub fn of(&self, key: &Key) -> Arc<Block> {
        if let Some(b) = self.cache.get(key) {
            return b;
        }
        self.cache.get_with(key.clone(), Default::default)
    }

    /// Gives `n` back to `key`'s block: false when there is none (the admission was not
    /// taken from a block).
    pub fn give_back(&self, key: &Key, n: u64) -> bool {
        match self.cache.get(key) {
            Some(b) => {
                b.give_back(n);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_hands_out_what_was_granted_and_no_more() {
        let b = Block::default();
        assert!(b.take(1).is_none());
        // 5 granted, Redis at 15 after it (10 taken before by others): the fetcher's one.
        assert_eq!(b.filled(5, 1, 15).count, 11);
        for count in 12..=15 {
            assert_eq!(b.take(1).map(|a| a.count), Some(count));
        }
        assert!(b.take(1).is_none());
        assert_eq!(b.granted(), 5);
        b.give_back(1);
        assert!(b.take(1).is_some());
        assert!(b.take(1).is_none());
    }
}
