//! The read deadline of an HTTP/1.1 client connection (`listen.header_read_timeout`):
//! with no request in flight, a complete request head must arrive within the limit of
//! the connection opening or of its previous response ending. That is the slow-loris
//! guard and the keep-alive idle limit in one.
//!
//! hyper's own `header_read_timeout` arms a fresh boxed timer for every request head and
//! removes it again (about 1 500 instructions, 5 % of a proxied request, measured with
//! callgrind). Here a connection has one timer that wakes every quarter of the limit and
//! looks at two counters the requests bump, so a request costs three atomic operations.
//! The price is precision: a quiet connection closes between 1× and 1.25× the limit.

use crate::upstream::deadline::ResponseTimer;
use http::Version;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::Duration;
use tokio::time::Instant;

/// What the requests of one connection tell its deadline, and the timer they share for
/// the response-head timeout. Made with the connection, inside the runtime.
#[derive(Default)]
pub struct Activity {
    in_flight: AtomicU32,
    /// Bumped when a request starts and when its response ends.
    events: AtomicU32,
    /// HTTP/2 connections are left alone, as hyper leaves them: streams multiplex, and
    /// closing one without GOAWAY could drop a request the client just sent.
    h2: AtomicBool,
    response_timer: ResponseTimer,
}

/// Held by a request from its head to the end of its response body.
pub struct InFlight(Arc<Activity>);

impl Activity {
    pub fn enter(self: &Arc<Self>, version: Version) -> InFlight {
        if version == Version::HTTP_2 {
            self.h2.store(true, Relaxed);
        }
        self.in_flight.fetch_add(1, Relaxed);
        self.events.fetch_add(1, Relaxed);
        InFlight(self.clone())
    }
}

impl InFlight {
    pub fn response_timer(&self) -> &ResponseTimer {
        &self.0.response_timer
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.events.fetch_add(1, Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Resolves once the connection has been quiet (no request in flight, none started or
/// ended) for at least `limit`; never for HTTP/2 connections.
pub async fn quiet_for(activity: &Activity, limit: Duration) {
    let step = (limit / 4).max(Duration::from_millis(1));
    let mut seen = activity.events.load(Relaxed);
    let mut quiet_since = Instant::now();
    // One timer for the connection's life, moved forward in place: tokio re-arms a
    // later deadline without touching its timer wheel until the old one is reached.
    let sleep = tokio::time::sleep(step);
    tokio::pin!(sleep);
    loop {
        sleep.as_mut().await;
        let now = Instant::now();
        let events = activity.events.load(Relaxed);
        if events != seen || activity.in_flight.load(Relaxed) > 0 || activity.h2.load(Relaxed) {
            seen = events;
            quiet_since = now;
        } else if now.duration_since(quiet_since) >= limit {
            return;
        }
        sleep.as_mut().reset(now + step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn closes_after(activity: &Arc<Activity>, limit: Duration) -> Duration {
        let start = Instant::now();
        quiet_for(activity, limit).await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_closes_within_a_quarter_past_the_limit() {
        let a = Arc::new(Activity::default());
        let took = closes_after(&a, Duration::from_secs(4)).await;
        assert!(took >= Duration::from_secs(4), "{took:?}");
        assert!(took <= Duration::from_secs(5), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_counts_from_the_end_of_the_last_response() {
        let a = Arc::new(Activity::default());
        let b = a.clone();
        let requests = tokio::spawn(async move {
            for _ in 0..3 {
                let r = b.enter(Version::HTTP_11);
                // A response slower than the limit does not count as quiet.
                tokio::time::sleep(Duration::from_secs(10)).await;
                drop(r);
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        });
        let took = closes_after(&a, Duration::from_secs(4)).await;
        requests.await.unwrap();
        // Three requests of 10 s with 3 s gaps; the last response ends at 36 s.
        assert!(took >= Duration::from_secs(40), "{took:?}");
        assert!(took <= Duration::from_secs(41), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn http2_connections_are_left_to_their_client() {
        let a = Arc::new(Activity::default());
        drop(a.enter(Version::HTTP_2));
        let r = tokio::time::timeout(
            Duration::from_secs(3600),
            quiet_for(&a, Duration::from_secs(1)),
        )
        .await;
        assert!(r.is_err());
    }
}
