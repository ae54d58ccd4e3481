//! The live client connections, in one registry: what their requests tell them, the
//! signal that ends them, and the sweep that enforces the read deadline.
//!
//! The read deadline (`listen.header_read_timeout`): with no request in flight, an
//! HTTP/1.1 client must send a complete request head within the limit of its connection
//! opening or of its previous response ending: the slow-loris guard and the keep-alive
//! idle limit in one. hyper's own `header_read_timeout` arms a boxed timer for every
//! request head and removes it again (about 1 500 instructions, 5 % of a proxied request,
//! callgrind); a timer per connection still costs a poll on every wake-up of the
//! connection. Here one task sweeps every connection every quarter of the limit and looks
//! at two counters the requests bump, so a request costs a few atomic operations and a
//! connection's wake-up one atomic load. The price is precision: a quiet connection
//! closes between 1× and 1.25× the limit after it went quiet.
//!
//! The same registry carries graceful shutdown to every connection, which before cost
//! each wake-up of each connection a poll of a shared cancellation future.

use crate::upstream::deadline::ResponseTimer;
use futures_util::task::AtomicWaker;
use http::Version;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// Why a connection is asked to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Graceful shutdown: finish what is in flight, take nothing new.
    Drain,
    /// Quiet for the read deadline with nothing in flight: close.
    Quiet,
    /// A response has waited for the client to read it for `listen.send_timeout`: cut,
    /// which releases its upstream connection.
    Stalled,
}

const RUNNING: u8 = 0;
const DRAIN: u8 = 1;
const QUIET: u8 = 2;
const STALLED: u8 = 3;

/// One client connection, shared by its task and its requests. Made inside the runtime.
#[derive(Default)]
pub struct Conn {
    in_flight: AtomicU32,
    /// Bumped when a request starts and when its response ends.
    events: AtomicU32,
    /// HTTP/2 connections are left to their client, as hyper leaves them: streams
    /// multiplex, and closing one without GOAWAY could drop a request just sent.
    h2: AtomicBool,
    end: AtomicU8,
    waker: AtomicWaker,
    response_timer: ResponseTimer,
    /// Bumped each time hyper asks the response body for more.
    asked: AtomicU32,
    /// The body handed hyper a frame and hyper has not asked again yet: the write is
    /// waiting on the client (not on the upstream).
    handed_over: AtomicBool,
}

/// Held by a request from its head to the end of its response body.
pub struct InFlight(Arc<Conn>);

impl Conn {
    pub fn enter(self: &Arc<Self>, version: Version) -> InFlight {
        if version == Version::HTTP_2 {
            self.h2.store(true, Relaxed);
        }
        self.in_flight.fetch_add(1, Relaxed);
        self.events.fetch_add(1, Relaxed);
        InFlight(self.clone())
    }

    /// Ready when the connection is asked to end.
    pub fn poll_end(&self, cx: &mut Context<'_>) -> Poll<End> {
        self.waker.register(cx.waker());
        match self.end.load(Relaxed) {
            RUNNING => Poll::Pending,
            DRAIN => Poll::Ready(End::Drain),
            QUIET => Poll::Ready(End::Quiet),
            _ => Poll::Ready(End::Stalled),
        }
    }

    fn signal(&self, end: u8) {
        // The first signal stands: a draining connection is not then closed outright,
        // and a closing one has nothing left to drain.
        let _ = self.end.compare_exchange(RUNNING, end, Relaxed, Relaxed);
        self.waker.wake();
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Relaxed) > 0 || self.h2.load(Relaxed)
    }
}

impl InFlight {
    pub fn response_timer(&self) -> &ResponseTimer {
        &self.0.response_timer
    }

    /// hyper asks the response body for its next frame.
    #[inline]
    pub fn asked(&self) {
        self.0.asked.fetch_add(1, Relaxed);
        self.0.handed_over.store(false, Relaxed);
    }

    /// The response body handed hyper a frame: until hyper asks again, the response waits
    /// on the client reading.
    #[inline]
    pub fn handed_over(&self) {
        self.0.handed_over.store(true, Relaxed);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.events.fetch_add(1, Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// What the sweep remembers of a connection between two rounds.
struct Watched {
    conn: Weak<Conn>,
    seen: u32,
    quiet_since: Instant,
    /// `asked` at the last sweep, and since when it has not moved while handed over.
    asked_seen: u32,
    waiting_since: Instant,
}

impl Watched {
    /// Whether the connection has been quiet for `limit`, as of a sweep at `now`.
    fn quiet_for(&mut self, events: u32, busy: bool, now: Instant, limit: Duration) -> bool {
        if events != self.seen || busy {
            self.seen = events;
            self.quiet_since = now;
            return false;
        }
        now.duration_since(self.quiet_since) >= limit
    }

    /// Whether a response has waited on the client for `limit`, as of a sweep at `now`:
    /// hyper was handed a frame and has not asked for another since.
    fn stalled_for(&mut self, asked: u32, waiting: bool, now: Instant, limit: Duration) -> bool {
        if asked != self.asked_seen || !waiting {
            self.asked_seen = asked;
            self.waiting_since = now;
            return false;
        }
        now.duration_since(self.waiting_since) >= limit
    }
}

#[derive(Default)]
struct Registry {
    next: u64,
    draining: bool,
    live: FxHashMap<u64, Watched>,
}

/// Every open client connection.
#[derive(Default)]
pub struct Conns {
    inner: Mutex<Registry>,
}

/// A connection's place in the registry, given up when dropped.
pub struct Registration<'a> {
    conns: &'a Conns,
    id: u64,
    pub conn: Arc<Conn>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut r = self.conns.inner.lock().unwrap_or_else(|e| e.into_inner());
        r.live.remove(&self.id);
    }
}

impl Conns {
    pub fn open(&self) -> Registration<'_> {
        let conn = Arc::new(Conn::default());
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if r.draining {
            conn.end.store(DRAIN, Relaxed);
        }
        let id = r.next;
        r.next += 1;
        r.live.insert(
            id,
            Watched {
                conn: Arc::downgrade(&conn),
                seen: 0,
                quiet_since: Instant::now(),
                asked_seen: 0,
                waiting_since: Instant::now(),
            },
        );
        Registration {
            conns: self,
            id,
            conn,
        }
    }

    /// Asks every connection, and every one opened from now on, to drain.
    pub fn drain_all(&self) {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        r.draining = true;
        for w in r.live.values() {
            if let Some(c) = w.conn.upgrade() {
                c.signal(DRAIN);
            }
        }
    }

    /// One round of the sweep: the read deadline (`limit`) for idle HTTP/1.1 connections
    /// and the send timeout for HTTP/1.1 responses the client stopped reading; returns
    /// how many connections it asked to close. One pass under the registry lock (tens of
    /// nanoseconds per connection), which opening and closing connections wait for;
    /// requests never take it.
    pub fn sweep(&self, limit: Duration, send_timeout: Duration, now: Instant) -> usize {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut closed = 0;
        for w in r.live.values_mut() {
            let Some(c) = w.conn.upgrade() else { continue };
            // HTTP/2 streams are bounded by flow control and left to their client.
            let waiting =
                c.handed_over.load(Relaxed) && c.in_flight.load(Relaxed) > 0 && !c.h2.load(Relaxed);
            if w.quiet_for(c.events.load(Relaxed), c.busy(), now, limit) {
                c.signal(QUIET);
                closed += 1;
            } else if w.stalled_for(c.asked.load(Relaxed), waiting, now, send_timeout) {
                c.signal(STALLED);
                closed += 1;
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    fn ended(c: &Conn) -> Option<End> {
        let waker = futures_util::task::noop_waker();
        match c.poll_end(&mut Context::from_waker(&waker)) {
            Poll::Ready(e) => Some(e),
            Poll::Pending => None,
        }
    }

    fn watched(t0: Instant) -> Watched {
        Watched {
            conn: Weak::new(),
            seen: 0,
            quiet_since: t0,
            asked_seen: 0,
            waiting_since: t0,
        }
    }

    #[test]
    fn quiet_counts_from_the_last_event_seen() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let limit = Duration::from_secs(4);
        let mut w = watched(t0);
        assert!(!w.quiet_for(0, false, s(3), limit));
        assert!(
            !w.quiet_for(2, false, s(4), limit),
            "a request came and went"
        );
        assert!(!w.quiet_for(2, true, s(9), limit), "busy is never quiet");
        assert!(!w.quiet_for(2, false, s(12), limit));
        assert!(w.quiet_for(2, false, s(13), limit));
    }

    #[test]
    fn stalled_counts_while_handed_over_and_not_asked_again() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let limit = Duration::from_secs(4);
        let mut w = watched(t0);
        assert!(
            !w.stalled_for(5, true, s(1), limit),
            "hyper asked: progress"
        );
        assert!(
            !w.stalled_for(5, false, s(9), limit),
            "waiting on the upstream is not a stall"
        );
        assert!(!w.stalled_for(5, true, s(10), limit));
        assert!(!w.stalled_for(5, true, s(12), limit));
        assert!(
            w.stalled_for(5, true, s(13), limit),
            "4 s on the client since 9 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_closes_quiet_connections_only() {
        let conns = Conns::default();
        let limit = Duration::from_secs(4);
        let quiet = conns.open();
        let busy = conns.open();
        let h2 = conns.open();
        let _request = busy.conn.enter(Version::HTTP_11);
        drop(h2.conn.enter(Version::HTTP_2));
        for _ in 0..8 {
            tokio::time::advance(Duration::from_secs(1)).await;
            conns.sweep(limit, limit, Instant::now());
        }
        assert_eq!(ended(&quiet.conn), Some(End::Quiet));
        assert_eq!(ended(&busy.conn), None, "a slow response is not quiet");
        assert_eq!(ended(&h2.conn), None, "HTTP/2 is left to its client");
        drop(quiet);
        let live = conns.inner.lock().unwrap().live.len();
        assert_eq!(live, 2, "a closed connection leaves the registry");
    }

    #[tokio::test]
    async fn drain_reaches_open_connections_and_later_ones_and_wakes_them() {
        let conns = Conns::default();
        let open = conns.open();
        let conn = open.conn.clone();
        let waiting = tokio::spawn(async move { poll_fn(|cx| conn.poll_end(cx)).await });
        tokio::task::yield_now().await;
        conns.drain_all();
        assert_eq!(waiting.await.unwrap(), End::Drain);
        let later = conns.open();
        assert_eq!(ended(&later.conn), Some(End::Drain));
        // A quiet signal after a drain does not turn it into a plain close.
        later.conn.signal(QUIET);
        assert_eq!(ended(&later.conn), Some(End::Drain));
    }
}
