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
//! The send timeout (`listen.send_timeout`) is enforced by the same sweep: a connection
//! whose writes have waited on the client (the kernel refused more bytes) for the limit is
//! cut (the server's socket wrapper reports writes), and on HTTP/2 each stream
//! whose response the client gives no flow-control window for the limit is severed
//! ([`crate::stream_watch`]), releasing its upstream connection.
//!
//! The same registry carries graceful shutdown to every connection, which before cost
//! each wake-up of each connection a poll of a shared cancellation future.

use crate::stream_watch::{Progress, StreamCell};
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
    /// Writes have waited on the client reading for `listen.send_timeout`: cut, which
    /// releases the response and its upstream connection.
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
    /// Bumped by each write to the client socket that went through.
    written: AtomicU32,
    /// The last write found the client's window full: what is being sent waits on the
    /// client reading (not on the upstream).
    blocked: AtomicBool,
    /// HTTP/2 responses being sent, watched one by one (a stream can wait on its own
    /// flow-control window while the socket is free).
    streams: Mutex<Streams>,
}

/// Asks an HTTP/1.1 client socket to acknowledge at once what it has received
/// (`server/quick_ack.rs`): a request whose body is still to come asks, so that a client
/// holding the body back until its head is acknowledged (Nagle) does not wait for a
/// delayed ACK. Shared by the connection's requests and its socket; a decrypted tunnel's
/// requests ask the socket of the CONNECT that carries them.
#[derive(Clone, Default)]
pub struct AckNow(Arc<AtomicBool>);

impl AckNow {
    pub fn ask(&self) {
        self.0.store(true, Relaxed);
    }

    /// Whether an ACK was asked for since the last call (one relaxed load otherwise).
    #[inline]
    pub fn take(&self) -> bool {
        self.0.load(Relaxed) && self.0.swap(false, Relaxed)
    }
}

/// The HTTP/2 responses of a connection; ended ones are pruned as new ones come.
#[derive(Default)]
struct Streams {
    live: Vec<Weak<StreamCell>>,
    prune_at: usize,
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
        self.in_flight.load(Relaxed) > 0 || self.h2.load(Relaxed) || self.blocked.load(Relaxed)
    }

    /// A write to the client went through (or failed: the connection ends anyway).
    #[inline]
    pub fn wrote(&self) {
        self.written.fetch_add(1, Relaxed);
        if self.blocked.load(Relaxed) {
            self.blocked.store(false, Relaxed);
        }
    }

    /// A write to the client found its window full.
    #[inline]
    pub fn write_blocked(&self) {
        self.blocked.store(true, Relaxed);
    }

    /// Watches an HTTP/2 response from now until it ends.
    pub fn watch_stream(&self, cell: &Arc<StreamCell>) {
        let mut s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        // Pruned when the list has doubled since: a dead entry costs its cell's memory
        // until then, and a busy connection's list stays near its live streams.
        if s.live.len() >= s.prune_at.max(16) {
            s.live.retain(|w| w.strong_count() > 0);
            s.prune_at = s.live.len() * 2;
        }
        s.live.push(Arc::downgrade(cell));
    }

    /// Its HTTP/2 responses stalled on the client for `limit` as of `now`.
    fn stalled_streams(&self, now: Instant, limit: Duration, out: &mut Vec<Arc<StreamCell>>) {
        let s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(
            s.live
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|c| c.stalled(now, limit)),
        );
    }
}

impl InFlight {
    pub fn response_timer(&self) -> &ResponseTimer {
        &self.0.response_timer
    }

    /// The connection, when it speaks HTTP/2 (its responses are watched stream by stream).
    pub fn h2_conn(&self) -> Option<&Arc<Conn>> {
        self.0.h2.load(Relaxed).then_some(&self.0)
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
    /// `written` at the last sweep, and since when it has not moved while blocked.
    sending: Progress,
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
}

#[derive(Default)]
struct Registry {
    next: u64,
    draining: bool,
    live: FxHashMap<u64, Watched>,
}

/// What one round of the sweep ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Connections closed as quiet (the read deadline).
    pub quiet: usize,
    /// Connections cut because their writes waited on the client (the send timeout).
    pub stalled: usize,
    /// HTTP/2 streams released because the client gave them no window.
    pub streams: usize,
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
                sending: Progress::new(Instant::now()),
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

    /// One round of the sweep: the read deadline (`limit`) for idle HTTP/1.1 connections,
    /// the send timeout for connections whose client stopped reading, and for each
    /// HTTP/2 response the client gives no window; returns how many connections it asked
    /// to close and how many streams it severed. One pass under the registry lock (tens
    /// of nanoseconds per connection), which opening and closing connections wait for;
    /// requests never take it.
    pub fn sweep(&self, limit: Duration, send_timeout: Duration, now: Instant) -> Swept {
        let mut severed = Vec::new();
        let (mut quiet, mut stalled) = (0, 0);
        {
            let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            for w in r.live.values_mut() {
                let Some(c) = w.conn.upgrade() else { continue };
                let blocked = c.blocked.load(Relaxed);
                if w.quiet_for(c.events.load(Relaxed), c.busy(), now, limit) {
                    c.signal(QUIET);
                    quiet += 1;
                } else if w
                    .sending
                    .stalled(c.written.load(Relaxed), blocked, now, send_timeout)
                {
                    c.signal(STALLED);
                    stalled += 1;
                } else if c.h2.load(Relaxed) {
                    c.stalled_streams(now, send_timeout, &mut severed);
                }
            }
        }
        // Dropping a response (its upstream body, its request event) happens outside the
        // registry's lock.
        for s in &severed {
            s.sever();
        }
        Swept {
            quiet,
            stalled,
            streams: severed.len(),
        }
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
            sending: Progress::new(t0),
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
    fn stalled_counts_while_waiting_and_not_moving() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let limit = Duration::from_secs(4);
        let mut p = Progress::new(t0);
        assert!(!p.stalled(5, true, s(1), limit), "a write went through");
        assert!(
            !p.stalled(5, false, s(9), limit),
            "waiting on the upstream is not a stall"
        );
        assert!(!p.stalled(5, true, s(10), limit));
        assert!(!p.stalled(5, true, s(12), limit));
        assert!(
            p.stalled(5, true, s(13), limit),
            "4 s on the client since 9 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_blocked_socket_is_busy_then_stalled() {
        let conns = Conns::default();
        let limit = Duration::from_secs(4);
        let blocked = conns.open();
        // The response was handed over whole (nothing in flight) and its bytes wait on
        // the client: not quiet, but stalled at the send timeout.
        blocked.conn.wrote();
        blocked.conn.write_blocked();
        let reading = conns.open();
        reading.conn.write_blocked();
        for _ in 0..8 {
            tokio::time::advance(Duration::from_secs(1)).await;
            reading.conn.wrote();
            reading.conn.write_blocked();
            conns.sweep(Duration::from_secs(3600), limit, Instant::now());
        }
        assert_eq!(ended(&blocked.conn), Some(End::Stalled));
        assert_eq!(ended(&reading.conn), None, "a slow reader makes progress");
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
