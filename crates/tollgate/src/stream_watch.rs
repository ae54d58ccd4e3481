//! HTTP/2 responses the send-timeout sweep can release one stream at a time. On HTTP/2 a
//! client can leave a stream's flow-control window at zero (RFC 9113 §5.2) while its
//! socket reads everything else: hyper then never asks the response body for more, and
//! the body — with the upstream connection behind it — would be held as long as the
//! client stays. Each HTTP/2 response body sits in a [`StreamCell`] the sweep watches; one
//! that waited on the client for `listen.send_timeout` is taken out and dropped, which
//! releases its upstream connection and ends its request as not completed. The client's
//! stream gets an error (RST_STREAM) when hyper next asks.

use crate::body::{Body, BoxError};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// A count of steps forward (writes, frames asked for) as the sweep last saw it, and
/// since when it has not moved while waiting on the client.
pub struct Progress {
    seen: u32,
    since: Instant,
}

impl Progress {
    pub fn new(now: Instant) -> Self {
        Self {
            seen: 0,
            since: now,
        }
    }

    /// Whether the count has stood still while `waiting` on the client for `limit`, as of
    /// a sweep at `now`.
    pub fn stalled(&mut self, count: u32, waiting: bool, now: Instant, limit: Duration) -> bool {
        if count != self.seen || !waiting {
            self.seen = count;
            self.since = now;
            return false;
        }
        now.duration_since(self.since) >= limit
    }
}

/// One HTTP/2 response body, shared by hyper's stream (through [`Severable`]) and the
/// sweep.
pub struct StreamCell {
    /// Bumped each time hyper asks for a frame.
    asked: AtomicU32,
    /// A head or frame was handed to hyper and it has not asked again: waiting on the
    /// client's window (asking and getting `Pending` waits on the upstream instead).
    waiting: AtomicBool,
    body: Mutex<Option<Body>>,
    /// The sweep's memory of `asked`.
    progress: Mutex<Progress>,
}

impl StreamCell {
    /// Whether the response has waited on the client for `limit`, as of a sweep at `now`.
    pub fn stalled(&self, now: Instant, limit: Duration) -> bool {
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        p.stalled(
            self.asked.load(Relaxed),
            self.waiting.load(Relaxed),
            now,
            limit,
        )
    }

    /// Drops the response body (and with it the upstream connection).
    pub fn sever(&self) {
        let body = self.body.lock().unwrap_or_else(|e| e.into_inner()).take();
        if body.is_some() {
            tracing::debug!(
                "HTTP/2 stream left without flow-control window for listen.send_timeout; response released"
            );
        }
        drop(body);
    }
}

/// The body hyper polls on an HTTP/2 stream.
pub struct Severable {
    cell: Arc<StreamCell>,
}

impl Severable {
    /// Wraps `body`, waiting from now (its head is being handed over); the connection's
    /// sweep watches [`Severable::cell`].
    pub fn new(body: Body) -> Self {
        let cell = Arc::new(StreamCell {
            asked: AtomicU32::new(0),
            waiting: AtomicBool::new(true),
            body: Mutex::new(Some(body)),
            progress: Mutex::new(Progress::new(Instant::now())),
        });
        Self { cell }
    }

    pub fn cell(&self) -> &Arc<StreamCell> {
        &self.cell
    }
}

/// The error a severed stream's body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the client gave this HTTP/2 stream no flow-control window for listen.send_timeout")]
pub struct Severed;

impl HttpBody for Severable {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let cell = &self.cell;
        cell.asked.fetch_add(1, Relaxed);
        cell.waiting.store(false, Relaxed);
        let mut body = cell.body.lock().unwrap_or_else(|e| e.into_inner());
        let Some(b) = body.as_mut() else {
            return Poll::Ready(Some(Err(Box::new(Severed))));
        };
        let r = Pin::new(b).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &r {
            cell.waiting.store(true, Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        // A severed body is not at its end: hyper asks, gets the error, resets the stream.
        self.cell
            .body
            .lock()
            .ok()
            .and_then(|b| b.as_ref().map(|b| b.is_end_stream()))
            .unwrap_or(false)
    }

    fn size_hint(&self) -> SizeHint {
        self.cell
            .body
            .lock()
            .ok()
            .and_then(|b| b.as_ref().map(|b| b.size_hint()))
            .unwrap_or_default()
    }
}
