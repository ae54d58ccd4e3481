//! The dashboard's live calls: what the observer thread publishes of each finished call
//! while a browser watches, the recent failures it always keeps, and the server-sent
//! event stream (`GET /ui/api/live`) that carries them.
//!
//! Nobody watching costs the data plane one relaxed load per request (is anyone
//! watching?) and the observer a line per failed call. While someone watches, each call
//! keeps its path for its event and the observer writes a JSON line per call, at most
//! [`PER_DRAIN`] per 20 ms drain (1 250 a second: more than anyone reads, few enough to
//! cost nothing measurable; the streams are told how many were left out), into each
//! stream's own ring of [`RING`] lines (the lines shared, not copied). A browser that
//! reads too slowly loses its oldest lines as new ones arrive: each is counted in
//! `tollgate_ui_live_dropped_total` when it is dropped, and the stream is told how many
//! when it next writes. At most [`MAX_STREAMS`] streams are open at once (another is
//! answered 503), and the admin listener buffers little per connection, so however many
//! browsers watch and however stalled, memory is bounded. Each stream writes what has
//! arrived since its last write at once: a write per batch, not per call.

use crate::body::Body;
use crate::diagnosis::Watching;
use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Lines each stream's ring holds.
const RING: usize = 512;
/// Live streams open at once.
pub const MAX_STREAMS: usize = 64;
/// Most calls published per drain of the observer (every 20 ms): 1 250 a second.
pub const PER_DRAIN: u32 = 25;
/// Most events one write of a stream carries.
const BATCH: usize = 128;
/// Failed calls kept for the live view's "last failures", watched or not.
const FAILURES: usize = 50;
/// A comment line this often keeps proxies and the browser from timing the stream out,
/// and finds a browser that is gone (its write fails).
const HEARTBEAT: Duration = Duration::from_secs(15);

/// One finished call, as the live view shows it (every field as the call had it: the
/// browser renders each as text).
pub struct Call<'a> {
    pub at_ms: u64,
    pub id: Option<&'a str>,
    pub method: &'a str,
    pub host: Option<&'a str>,
    pub path: Option<&'a str>,
    pub endpoint: Option<&'a str>,
    pub status: u16,
    pub total: Duration,
    pub upstream: Option<Duration>,
    pub policy: Option<&'a str>,
    pub actions: Vec<String>,
    pub error: Option<&'a str>,
    pub bytes: u64,
    pub llm: Option<Value>,
    /// An MCP call's method and name.
    pub mcp: Option<Value>,
    /// Its HAR entry was captured.
    pub captured: bool,
}

/// A call the "last failures" list keeps: a tollgate error or a provider's 5xx.
pub fn failed(status: u16, error: Option<&str>) -> bool {
    error.is_some() || status >= 500
}

impl Call<'_> {
    fn line(&self) -> Arc<str> {
        let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        let line = Line {
            t: self.at_ms,
            id: self.id,
            method: self.method,
            host: self.host,
            path: self.path,
            endpoint: self.endpoint,
            status: self.status,
            ms: ms(self.total),
            upstream_ms: self.upstream.map(ms),
            policy: self.policy,
            actions: &self.actions,
            error: self.error,
            bytes: self.bytes,
            llm: self.llm.as_ref(),
            mcp: self.mcp.as_ref(),
            har: self.captured,
        };
        serde_json::to_string(&line).unwrap_or_default().into()
    }
}

/// A call's line on the stream (written by serde straight from the call's fields).
#[derive(serde::Serialize)]
struct Line<'a> {
    t: u64,
    id: Option<&'a str>,
    method: &'a str,
    host: Option<&'a str>,
    path: Option<&'a str>,
    endpoint: Option<&'a str>,
    status: u16,
    ms: f64,
    upstream_ms: Option<f64>,
    policy: Option<&'a str>,
    actions: &'a [String],
    error: Option<&'a str>,
    bytes: u64,
    llm: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mcp: Option<&'a Value>,
    har: bool,
}

/// What the ring carries: a call's line, or how many calls a drain left out.
#[derive(Clone)]
enum Item {
    Call(Arc<str>),
    LeftOut(u64),
}

pub struct Live {
    watching: Watching,
    /// The open streams' rings.
    streams_open: Mutex<Vec<Arc<Ring>>>,
    /// Calls published in this drain, and those left out past [`PER_DRAIN`].
    this_drain: AtomicU32,
    left_out: AtomicU64,
    /// This drain's calls, sent when it ends (only the observer thread takes it).
    pending: Mutex<Vec<Arc<str>>>,
    failures: Mutex<VecDeque<Arc<str>>>,
    streams: Gauge,
    dropped: Counter,
}

/// One stream's lines waiting for its browser: the newest [`RING`], how many older ones
/// were dropped since its last write, and the stream's wake-up.
#[derive(Default)]
struct Ring {
    items: Mutex<VecDeque<Item>>,
    skipped: AtomicU64,
    ready: Notify,
}

impl Ring {
    /// Adds `item`, dropping the oldest when full (counted, here and on `dropped`).
    fn push(&self, item: Item, dropped: &Counter) {
        let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == RING {
            q.pop_front();
            self.skipped.fetch_add(1, Ordering::Relaxed);
            dropped.inc();
        }
        q.push_back(item);
        drop(q);
        self.ready.notify_one();
    }
}

/// Why no stream was opened.
#[derive(Debug)]
pub struct TooMany;

impl Live {
    pub fn new(watching: Watching, metrics: &Metrics) -> Self {
        Self {
            watching,
            streams_open: Mutex::default(),
            this_drain: AtomicU32::new(0),
            left_out: AtomicU64::new(0),
            pending: Mutex::default(),
            failures: Mutex::default(),
            streams: metrics.ui_streams.clone(),
            dropped: metrics.ui_dropped.clone(),
        }
    }

    pub fn watching(&self) -> &Watching {
        &self.watching
    }

    /// `item` to every open stream.
    fn send(&self, item: &Item) {
        let rings = self.streams_open.lock().unwrap_or_else(|p| p.into_inner());
        for r in rings.iter() {
            r.push(item.clone(), &self.dropped);
        }
    }

    /// On the observer thread, after each drain: the drain's calls to the streams, all
    /// at once (a stream wakes once a drain, not once a call), and how many it left
    /// out; then a new allowance.
    pub fn drained(&self) {
        let calls = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for line in calls {
            self.send(&Item::Call(line));
        }
        let n = self.left_out.swap(0, Ordering::Relaxed);
        if n > 0 && self.watching.any() {
            self.send(&Item::LeftOut(n));
        }
        self.this_drain.store(0, Ordering::Relaxed);
    }

    /// On the observer thread, for each finished call: whether it goes to the streams
    /// (someone watches, within the drain's allowance) or to the last failures, built
    /// by `call` only then.
    pub fn publish<'c>(&self, failed: bool, call: impl FnOnce() -> Call<'c>) {
        let watched = self.watching.any()
            && if self.this_drain.fetch_add(1, Ordering::Relaxed) < PER_DRAIN {
                true
            } else {
                self.left_out.fetch_add(1, Ordering::Relaxed);
                false
            };
        if !watched && !failed {
            return;
        }
        let line = call().line();
        if failed {
            let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            if f.len() == FAILURES {
                f.pop_front();
            }
            f.push_back(line.clone());
        }
        if watched {
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line);
        }
    }

    /// The last failed calls, newest last.
    pub fn failures(&self) -> Value {
        let f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        Value::Array(
            f.iter()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
        )
    }

    /// The event stream of one browser: `call` events as calls finish, a `left_out`
    /// event when a drain published only some, a `dropped` event when this stream
    /// lost some, a comment every [`HEARTBEAT`]. What has arrived since the last write
    /// goes in one write. [`TooMany`] when [`MAX_STREAMS`] are open.
    pub fn stream(self: &Arc<Self>) -> Result<Body, TooMany> {
        let ring = Arc::new(Ring::default());
        {
            let mut open = self.streams_open.lock().unwrap_or_else(|p| p.into_inner());
            if open.len() >= MAX_STREAMS {
                return Err(TooMany);
            }
            open.push(ring.clone());
        }
        let guard = Watcher::new(self.clone(), ring);
        // The first bytes at once: the browser knows the stream is open.
        let hello = Bytes::from_static(b": tollgate live calls\nretry: 2000\n\n");
        let state = (guard, Some(hello));
        let s = futures_util::stream::unfold(state, |(guard, first)| async move {
            if let Some(b) = first {
                return Some((Ok(b), (guard, None)));
            }
            let ring = guard.ring.clone();
            let mut out = String::new();
            loop {
                let woke = tokio::time::timeout(HEARTBEAT, ring.ready.notified()).await;
                let skipped = ring.skipped.swap(0, Ordering::Relaxed);
                if skipped > 0 {
                    out.push_str(&format!(
                        "event: dropped\ndata: {{\"dropped\":{skipped}}}\n\n"
                    ));
                }
                {
                    let mut q = ring.items.lock().unwrap_or_else(|p| p.into_inner());
                    let n = q.len().min(BATCH.saturating_sub(usize::from(skipped > 0)));
                    for item in q.drain(..n) {
                        event(&mut out, &item);
                    }
                    if !q.is_empty() {
                        // More than a batch waits: the next poll takes it at once.
                        ring.ready.notify_one();
                    }
                }
                if woke.is_err() && out.is_empty() {
                    out.push_str(": heartbeat\n\n");
                }
                if !out.is_empty() {
                    break;
                }
            }
            Some((
                Ok::<_, crate::body::BoxError>(Bytes::from(out)),
                (guard, None),
            ))
        });
        Ok(
            http_body_util::StreamBody::new(futures_util::StreamExt::map(s, |r| {
                r.map(hyper::body::Frame::data)
            }))
            .boxed_unsync(),
        )
    }
}

/// One server-sent event (the WHATWG HTML standard's `text/event-stream`).
fn event(out: &mut String, item: &Item) {
    match item {
        Item::Call(line) => {
            out.push_str("event: call\ndata: ");
            out.push_str(line);
        }
        Item::LeftOut(n) => out.push_str(&format!("event: left_out\ndata: {{\"left_out\":{n}}}")),
    }
    out.push_str("\n\n");
}

/// One open stream: counted while it lives, its ring taken from the streams when it
/// ends.
struct Watcher {
    live: Arc<Live>,
    ring: Arc<Ring>,
}

impl Watcher {
    fn new(live: Arc<Live>, ring: Arc<Ring>) -> Self {
        live.watching.opened();
        live.streams.inc();
        Self { live, ring }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.live
            .streams_open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|r| !Arc::ptr_eq(r, &self.ring));
        self.live.watching.closed();
        self.live.streams.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(status: u16) -> Call<'static> {
        Call {
            at_ms: 1,
            id: Some("r1"),
            method: "GET",
            host: Some("h"),
            path: Some("/<script>"),
            endpoint: None,
            status,
            total: Duration::from_micros(1500),
            upstream: None,
            policy: None,
            actions: vec![],
            error: None,
            bytes: 0,
            llm: None,
            mcp: None,
            captured: false,
        }
    }

    #[tokio::test]
    async fn unwatched_calls_are_not_kept_unless_they_failed() {
        let live = Arc::new(Live::new(Watching::default(), &Metrics::default()));
        live.publish(false, || call(200));
        live.publish(true, || call(502));
        let f = live.failures();
        assert_eq!(f.as_array().unwrap().len(), 1);
        assert_eq!(f[0]["status"], 502);
        assert_eq!(f[0]["path"], "/<script>");
        assert_eq!(f[0]["ms"], 1.5);
    }

    #[tokio::test]
    async fn a_slow_stream_skips_what_was_overwritten_and_says_so() {
        let metrics = Metrics::default();
        let live = Arc::new(Live::new(Watching::default(), &metrics));
        let mut body = live.stream().unwrap();
        assert!(live.watching().any());
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(first.starts_with(b": tollgate"));
        for _ in 0..RING + 10 {
            live.publish(false, || call(200));
            live.drained();
        }
        // Counted as each was dropped, before the browser reads again.
        assert_eq!(metrics.ui_dropped.get(), 10);
        // One write: the skip said first, then the calls still in the ring (a batch).
        let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let text = String::from_utf8_lossy(&next);
        assert!(
            text.starts_with("event: dropped\ndata: {\"dropped\":10}\n\nevent: call\ndata: {"),
            "{text}"
        );
        assert_eq!(text.matches("event: call\n").count(), BATCH - 1);
        assert_eq!(metrics.ui_dropped.get(), 10);
        drop(body);
        assert!(!live.watching().any());
        assert_eq!(metrics.ui_streams.get(), 0);
    }

    #[tokio::test]
    async fn a_drain_publishes_its_allowance_and_says_how_many_it_left_out() {
        let live = Arc::new(Live::new(Watching::default(), &Metrics::default()));
        let mut body = live.stream().unwrap();
        body.frame().await.unwrap().unwrap();
        for _ in 0..PER_DRAIN + 5 {
            live.publish(false, || call(200));
        }
        live.drained();
        let mut text = String::new();
        while !text.contains("left_out") {
            let chunk = body.frame().await.unwrap().unwrap().into_data().unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert_eq!(text.matches("event: call\n").count(), PER_DRAIN as usize);
        assert!(
            text.ends_with("event: left_out\ndata: {\"left_out\":5}\n\n"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn streams_are_bounded_and_a_closed_one_frees_its_place() {
        let metrics = Metrics::default();
        let live = Arc::new(Live::new(Watching::default(), &metrics));
        let mut open: Vec<_> = (0..MAX_STREAMS).map(|_| live.stream().unwrap()).collect();
        assert!(live.stream().is_err());
        // Never read: the rings still drop, and count, what they cannot hold.
        for _ in 0..RING + 3 {
            live.publish(false, || call(200));
            live.drained();
        }
        assert_eq!(metrics.ui_dropped.get(), 3 * MAX_STREAMS as u64);
        open.pop();
        assert!(live.stream().is_ok());
    }
}
