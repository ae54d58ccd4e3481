//! Sending batches to a collector (HAR entries to an HTTP endpoint, spans through the
//! OTLP exporter): items wait in a bounded buffer (the oldest dropped and counted when
//! it is full), go out in batches at least every `interval`, and a failed batch is
//! retried with doubling waits up to `max_backoff`, keeping its items, while new ones
//! queue behind it.

use crate::body::{Body, full};
use crate::diagnosis::settings::{Batching, Collector as Settings};
use crate::target::Scheme;
use crate::upstream::Connector;
use bytes::Buf;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, header};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Items waiting to be sent; shared by the producer (a thread) and the sending task.
pub struct Pending<T> {
    items: Mutex<VecDeque<T>>,
    cap: usize,
    pub dropped: Counter,
}

impl<T> Pending<T> {
    pub fn new(cap: usize, dropped: Counter) -> Self {
        Self {
            items: Mutex::new(VecDeque::new()),
            cap,
            dropped,
        }
    }

    /// Adds items; past the cap the oldest are dropped and counted.
    pub fn push(&self, new: impl IntoIterator<Item = T>) {
        let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
        for item in new {
            if q.len() >= self.cap {
                q.pop_front();
                self.dropped.inc();
            }
            q.push_back(item);
        }
    }

    fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl<T: Clone> Pending<T> {
    fn front(&self, n: usize) -> Vec<T> {
        let q = self.items.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().take(n).cloned().collect()
    }

    /// Removes the first `n` (sent) items, unless they were dropped meanwhile.
    fn sent(&self, batch: usize, dropped_before: u64) {
        let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
        let gone = (self.dropped.get() - dropped_before) as usize;
        for _ in 0..batch.saturating_sub(gone) {
            q.pop_front();
        }
    }
}

/// The pooled HTTP client the diagnosis sinks send with (HAR collector, OTLP/HTTP).
pub fn client(connector: Connector) -> Client<Connector, Body> {
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}

/// POSTs bodies to one URL.
pub struct Poster {
    client: Client<Connector, Body>,
    uri: http::Uri,
    headers: Vec<(http::HeaderName, HeaderValue)>,
    content_type: HeaderValue,
    timeout: Duration,
}

impl Poster {
    pub fn new(
        s: &Settings,
        connector: Connector,
        content_type: &'static str,
    ) -> Result<Self, String> {
        let scheme = match s.url.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        let uri = http::Uri::builder()
            .scheme(scheme)
            .authority(s.url.authority.clone())
            .path_and_query(s.path.clone())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client: client(connector),
            uri,
            headers: s.headers.clone(),
            content_type: HeaderValue::from_static(content_type),
            timeout: s.timeout,
        })
    }

    pub async fn post(&self, body: Bytes) -> Result<(), String> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .body(full(body))
            .map_err(|e| e.to_string())?;
        let h = req.headers_mut();
        h.insert(header::CONTENT_TYPE, self.content_type.clone());
        for (n, v) in &self.headers {
            h.insert(n.clone(), v.clone());
        }
        let send = async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            // Read the answer so the connection can be reused (a few KiB at most).
            let _ = read_answer(resp.into_body()).await;
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("answered {status}"))
            }
        };
        tokio::time::timeout(self.timeout, send)
            .await
            .map_err(|_| format!("no answer within {:?}", self.timeout))?
    }
}

/// The most of a collector's answer that is read (HAR's, OTLP's): only its status
/// matters, and a collector that answers on and on must not grow the gateway's memory.
pub const MAX_ANSWER: usize = 4 << 10;

/// A collector's answer, up to [`MAX_ANSWER`]: past it the rest is not read and the
/// connection is dropped with the body (it cannot be reused).
pub async fn read_answer<B>(body: B) -> bytes::Bytes
where
    B: http_body::Body + Unpin,
{
    use http_body_util::BodyExt;
    let mut body = body;
    let mut out = bytes::BytesMut::new();
    while let Some(Ok(f)) = body.frame().await {
        if let Some(d) = f.data_ref() {
            let d: &[u8] = d.chunk();
            let room = MAX_ANSWER - out.len();
            out.extend_from_slice(&d[..d.len().min(room)]);
            if out.len() >= MAX_ANSWER {
                break;
            }
        }
    }
    out.freeze()
}

/// Where batches go.
pub trait Sender<T>: Send + Sync {
    /// Sends one batch; how many items it carried for the `sent` counter (spans, not
    /// calls).
    fn send(&self, batch: &[T]) -> impl std::future::Future<Output = Result<u64, String>> + Send;
}

/// HAR entries, POSTed as one JSON array per batch.
impl Sender<Arc<str>> for Poster {
    async fn send(&self, batch: &[Arc<str>]) -> Result<u64, String> {
        self.post(json_array(batch))
            .await
            .map(|()| batch.len() as u64)
    }
}

/// Entries (each a JSON object already) as one JSON array.
fn json_array(entries: &[Arc<str>]) -> Bytes {
    let mut out = Vec::with_capacity(entries.iter().map(|e| e.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(e.as_bytes());
    }
    out.push(b']');
    Bytes::from(out)
}

/// Sends `pending` in batches for ever (until `stop`), then what is left, once.
pub async fn run<T: Clone>(
    pending: Arc<Pending<T>>,
    sender: impl Sender<T>,
    s: Batching,
    sent: Counter,
    stop: tokio_util::sync::CancellationToken,
    what: &'static str,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let stopping = stop.is_cancelled();
        if pending.len() < s.batch_size && !stopping {
            tokio::select! {
                _ = tokio::time::sleep(s.interval) => {}
                _ = stop.cancelled() => {}
            }
        }
        let dropped_before = pending.dropped.get();
        let batch = pending.front(s.batch_size);
        if batch.is_empty() {
            if stopping {
                return;
            }
            continue;
        }
        match sender.send(&batch).await {
            Ok(items) => {
                pending.sent(batch.len(), dropped_before);
                sent.inc_by(items);
                backoff = Duration::from_millis(100);
            }
            Err(e) => {
                tracing::warn!("{what} {}: {e}; retrying in {backoff:?}", s.display);
                if stopping {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.cancelled() => {}
                }
                backoff = (backoff * 2).min(s.max_backoff);
            }
        }
    }
}
