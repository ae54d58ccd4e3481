//! A shared cache's byte budget on Redis (`shared_max_size`), kept with two counters
//! every replica adds to: the bytes written in this period and in the last, a period
//! being the longest an entry lives on Redis. An entry written in an earlier period has
//! expired, so what Redis holds of the cache is at most the two counters' sum; a write is
//! admitted only while that sum stays within the budget. A rewrite of an entry counts
//! again, so the budget errs on the safe side (it may refuse while Redis holds less).

use crate::policy::clock;
use crate::policy::store::{Key, Store};
use std::sync::Arc;

pub struct Budget {
    store: Arc<dyn Store>,
    resource: Arc<str>,
    part: Arc<str>,
    /// The longest an entry lives on Redis, in ms: each counter's period.
    period_ms: u64,
    max: u64,
}

impl Budget {
    pub fn new(store: Arc<dyn Store>, policy: &str, period_ms: u64, max: u64) -> Self {
        Self {
            store,
            resource: format!("cache:{policy}").into(),
            part: Arc::from("bytes"),
            period_ms: period_ms.max(1),
            max,
        }
    }

    fn key(&self, period: u64) -> Key {
        Key::new(&self.resource, &self.part, period)
    }

    /// Whether `n` more bytes may be written now; counted when they may. Redis away: no
    /// (the write would fail too).
    pub async fn admit(&self, n: u64) -> bool {
        let period = clock::now_ms() / self.period_ms;
        let last = match period.checked_sub(1) {
            Some(p) => match self.store.get(&self.key(p)).await {
                Ok(b) => b,
                Err(_) => return false,
            },
            None => 0,
        };
        // This period's counter outlives every entry written in it (they end by the
        // next period's end).
        let expires = (period + 2) * self.period_ms;
        self.store
            .add(&self.key(period), n, self.max.saturating_sub(last), expires)
            .await
            .is_ok_and(|a| a.taken)
    }

    /// At most how many bytes of the cache Redis holds now (the two periods' counters);
    /// `None` when Redis cannot say.
    pub async fn held(&self) -> Option<u64> {
        let period = clock::now_ms() / self.period_ms;
        let now = self.store.get(&self.key(period)).await.ok()?;
        let last = match period.checked_sub(1) {
            Some(p) => self.store.get(&self.key(p)).await.ok()?,
            None => 0,
        };
        Some(now + last)
    }

    pub fn max(&self) -> u64 {
        self.max
    }
}
