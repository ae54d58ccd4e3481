//! Hosts whose clients refused tollgate's certificate (a pinned key, a trust store
//! without the CA): each is logged once with the fix, and with
//! `intercept.tunnel_refused_for` the host's next CONNECTs are relayed untouched for that
//! long, so a pinning client works again after one failed connection instead of failing
//! in a loop. Bounded like the leaves; read once per CONNECT, never per request.

use tokio::time::Instant;

pub struct Refusals {
    last: moka::sync::Cache<Box<str>, Instant>,
}

impl Refusals {
    pub fn new(capacity: u64) -> Self {
        Self {
            last: moka::sync::Cache::new(capacity),
        }
    }

    /// Records a refusal by a client of `host`; true when it is the host's first (the one
    /// to log).
    pub fn record(&self, host: &str) -> bool {
        let first = !self.last.contains_key(host);
        self.last.insert(host.into(), Instant::now());
        first
    }

    /// Whether a client of `host` refused its certificate less than `window` ago.
    pub fn within(&self, host: &str, window: std::time::Duration) -> bool {
        self.last.get(host).is_some_and(|at| at.elapsed() < window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_first_once_and_remembered_for_the_window() {
        let r = Refusals::new(10);
        assert!(!r.within("api.x.com", Duration::from_secs(60)));
        assert!(r.record("api.x.com"), "the first refusal is logged");
        assert!(!r.record("api.x.com"), "later ones are not");
        assert!(r.within("api.x.com", Duration::from_secs(60)));
        assert!(!r.within("api.y.com", Duration::from_secs(60)));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(
            !r.within("api.x.com", Duration::from_secs(60)),
            "the window ends"
        );
    }
}
