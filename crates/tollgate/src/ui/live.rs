//! The dashboard's live calls: what the observer thread publishes of each finished call
//! while a browser watches, the recent failures it always keeps, and the server-sent
//! event stream (`GET /ui/api/live`) that carries them.
//!
//! Nobody watching costs the data plane one relaxed load per request (is anyone
//! watching?) and the observer a line per failed call. While someone watches, each call
//! keeps its path for its event and the observer writes one JSON line per call into a
//! broadcast ring of [`RING`] lines, shared by every stream: a browser that reads too
//! slowly skips what was overwritten (counted in `tollgate_ui_live_dropped_total`, and
//! told to it), so however many browsers watch and however stalled, memory is bounded.

use crate::body::Body;
use crate::diagnosis::Watching;
use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// Lines of the broadcast ring every stream reads.
const RING: usize = 512;
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
    /// Its HAR entry was captured.
    pub captured: bool,
}

impl Call<'_> {
    /// A call the "last failures" list keeps: a tollgate error or a provider's 5xx.
    pub fn failed(&self) -> bool {
        self.error.is_some() || self.status >= 500
    }

    fn line(&self) -> Arc<str> {
        let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        json!({
            "t": self.at_ms, "id": self.id, "method": self.method, "host": self.host,
            "path": self.path, "endpoint": self.endpoint, "status": self.status,
            "ms": ms(self.total), "upstream_ms": self.upstream.map(ms),
            "policy": self.policy, "actions": self.actions, "error": self.error,
            "bytes": self.bytes, "llm": self.llm, "har": self.captured,
        })
        .to_string()
        .into()
    }
}

pub struct Live {
    watching: Watching,
    tx: broadcast::Sender<Arc<str>>,
    failures: Mutex<VecDeque<Arc<str>>>,
    streams: Gauge,
    dropped: Counter,
}

impl Live {
    pub fn new(watching: Watching, metrics: &Metrics) -> Self {
        Self {
            watching,
            tx: broadcast::channel(RING).0,
            failures: Mutex::default(),
            streams: metrics.ui_streams.clone(),
            dropped: metrics.ui_dropped.clone(),
        }
    }

    pub fn watching(&self) -> &Watching {
        &self.watching
    }

    /// On the observer thread, for each finished call: to the streams while someone
    /// watches, and to the last failures when it failed.
    pub fn publish(&self, call: &Call<'_>) {
        let watched = self.watching.any();
        if !watched && !call.failed() {
            return;
        }
        let line = call.line();
        if call.failed() {
            let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            if f.len() == FAILURES {
                f.pop_front();
            }
            f.push_back(line.clone());
        }
        if watched {
            // No receiver left (the last stream just closed): nothing to do.
            let _ = self.tx.send(line);
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

    /// The event stream of one browser: `call` events as calls finish, a `dropped` event
    /// when it skipped some, a comment every [`HEARTBEAT`].
    pub fn stream(self: &Arc<Self>) -> Body {
        let rx = self.tx.subscribe();
        let guard = Watcher::new(self.clone());
        // The first bytes at once: the browser knows the stream is open.
        let hello = Bytes::from_static(b": tollgate live calls\nretry: 2000\n\n");
        let state = (rx, guard, Some(hello));
        let s = futures_util::stream::unfold(state, |(mut rx, guard, first)| async move {
            if let Some(b) = first {
                return Some((Ok(b), (rx, guard, None)));
            }
            let chunk = tokio::select! {
                got = rx.recv() => match got {
                    Ok(line) => Bytes::from(format!("event: call\ndata: {line}\n\n")),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        guard.live.dropped.inc_by(n);
                        Bytes::from(format!("event: dropped\ndata: {{\"dropped\":{n}}}\n\n"))
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = tokio::time::sleep(HEARTBEAT) => Bytes::from_static(b": heartbeat\n\n"),
            };
            Some((Ok::<_, crate::body::BoxError>(chunk), (rx, guard, None)))
        });
        http_body_util::StreamBody::new(futures_util::StreamExt::map(s, |r| {
            r.map(hyper::body::Frame::data)
        }))
        .boxed_unsync()
    }
}

/// One open stream: counted while it lives.
struct Watcher {
    live: Arc<Live>,
}

impl Watcher {
    fn new(live: Arc<Live>) -> Self {
        live.watching.opened();
        live.streams.inc();
        Self { live }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
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
            captured: false,
        }
    }

    #[tokio::test]
    async fn unwatched_calls_are_not_kept_unless_they_failed() {
        let live = Arc::new(Live::new(Watching::default(), &Metrics::default()));
        live.publish(&call(200));
        live.publish(&call(502));
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
        let mut body = live.stream();
        assert!(live.watching().any());
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(first.starts_with(b": tollgate"));
        for _ in 0..RING + 10 {
            live.publish(&call(200));
        }
        let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&next[..], b"event: dropped\ndata: {\"dropped\":10}\n\n");
        assert_eq!(metrics.ui_dropped.get(), 10);
        let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(next.starts_with(b"event: call\ndata: {"));
        drop(body);
        assert!(!live.watching().any());
        assert_eq!(metrics.ui_streams.get(), 0);
    }
}
