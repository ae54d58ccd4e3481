//! Whether the shared store answers, and why not: a circuit that spares requests a wait
//! on a Redis known to be failing (after a failure no request asks it for a backoff, 100
//! ms doubling to 5 s; then one request tries again and its success closes the circuit),
//! the last failure with its cause for `/policies`, and one warning per cause with what
//! to do (again after Redis has answered in between). Nothing here is touched by a
//! request while Redis answers but one relaxed load.

use super::{Cause, StoreError};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const FIRST_BACKOFF_MS: u64 = 100;
const MAX_BACKOFF_MS: u64 = 5_000;

#[derive(Default)]
pub struct Health {
    /// 0 while closed; else the unix ms until which no request asks Redis.
    open_until: AtomicU64,
    /// Failures in a row: they set the backoff.
    failures: AtomicU32,
    /// The last failure, kept after Redis answers again (when it was is shown with it).
    last: Mutex<Option<Failure>>,
    /// The cause last warned about since Redis last answered.
    warned: Mutex<Option<Cause>>,
}

#[derive(Clone)]
struct Failure {
    error: StoreError,
    at_ms: u64,
}

impl Health {
    /// Whether this request may ask Redis: the circuit is closed, or its backoff is over
    /// and this request is the one that claims the next try (the others keep falling back
    /// until it answers).
    pub fn admits(&self, now: u64) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        until <= now
            && self
                .open_until
                .compare_exchange(
                    until,
                    now + self.backoff(),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    fn backoff(&self) -> u64 {
        let n = self.failures.load(Ordering::Relaxed).min(16);
        (FIRST_BACKOFF_MS << n.saturating_sub(1)).min(MAX_BACKOFF_MS)
    }

    /// Redis answered: closes an open circuit (and says so once).
    pub fn succeeded(&self) {
        if self.open_until.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
            self.open_until.store(0, Ordering::Relaxed);
            if let Ok(mut w) = self.warned.lock()
                && w.take().is_some()
            {
                tracing::warn!("the shared store (Redis) answers again: limits are shared again");
            }
        }
    }

    /// An operation failed: opens the circuit for the next backoff and notes why.
    pub fn failed(&self, e: &StoreError, now: u64) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.open_until
            .store(now + self.backoff(), Ordering::Relaxed);
        self.note(e, now);
    }

    /// Notes a failure without opening the circuit (an operation sent in the background):
    /// the last error, and a warning the first time its cause is seen since Redis last
    /// answered.
    pub fn note(&self, e: &StoreError, now: u64) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(Failure {
                error: e.clone(),
                at_ms: now,
            });
        }
        let Ok(mut warned) = self.warned.lock() else {
            return;
        };
        if *warned != Some(e.cause) {
            *warned = Some(e.cause);
            tracing::warn!(
                cause = e.cause.name(),
                "the shared store (Redis) failed ({}); store.on_error decides until it answers: {}",
                e.message,
                e.cause.fix()
            );
        }
    }

    pub fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Relaxed) != 0
    }

    /// The last failure for `/policies`: cause, message, fix and how long ago; `null`
    /// when there was none.
    pub fn last_error(&self, now: u64) -> serde_json::Value {
        let last = self.last.lock().ok().and_then(|l| l.clone());
        last.map_or(serde_json::Value::Null, |f| {
            serde_json::json!({
                "cause": f.error.cause.name(),
                "message": f.error.message,
                "fix": f.error.cause.fix(),
                "seconds_ago": now.saturating_sub(f.at_ms) / 1000,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> StoreError {
        StoreError::new(Cause::Auth, "redis: WRONGPASS")
    }

    #[test]
    fn the_backoff_doubles_from_100_ms_to_5_s_and_one_request_claims_each_try() {
        let h = Health::default();
        assert!(h.admits(0));
        h.failed(&refused(), 1_000);
        assert!(!h.admits(1_099));
        assert!(h.admits(1_100));
        // The next asks wait for that try's answer.
        assert!(!h.admits(1_100));
        h.failed(&refused(), 1_100);
        assert!(!h.admits(1_299));
        assert!(h.admits(1_300));
        for _ in 0..10 {
            h.failed(&refused(), 10_000);
        }
        assert!(!h.admits(14_999));
        assert!(h.admits(15_000));
        h.succeeded();
        assert!(!h.is_open());
        assert!(h.admits(15_000));
    }

    #[test]
    fn the_last_error_is_shown_with_its_cause_and_fix() {
        let h = Health::default();
        assert!(h.last_error(0).is_null());
        h.failed(&refused(), 1_000);
        let last = h.last_error(3_500);
        assert_eq!(last["cause"], "auth");
        assert_eq!(last["message"], "redis: WRONGPASS");
        assert_eq!(last["seconds_ago"], 2);
        assert!(last["fix"].as_str().unwrap().contains("password"));
    }
}
