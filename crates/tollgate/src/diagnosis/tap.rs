//! Taps on a streaming body: bytes counted, and a copy kept up to a cap, as frames pass.
//! The body is never held back: each frame is handed on as it arrives.

use crate::body::{Body, BoxError};
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// A capped copy of a body: the first `cap` bytes, and the full size seen.
#[derive(Debug, Default)]
pub struct Copy {
    pub data: BytesMut,
    pub cap: usize,
    pub size: u64,
}

impl Copy {
    pub fn new(cap: usize) -> Self {
        Self {
            data: BytesMut::new(),
            cap,
            size: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.size += chunk.len() as u64;
        let room = self.cap.saturating_sub(self.data.len());
        self.data.extend_from_slice(&chunk[..room.min(chunk.len())]);
    }

    pub fn truncated(&self) -> bool {
        self.size > self.data.len() as u64
    }
}

/// What the request body's tap saw. Shared between the body (which the upstream client
/// owns while it sends) and the request's diagnosis; the lock is this request's only.
#[derive(Debug, Default)]
pub struct Tap {
    bytes: AtomicU64,
    copy: Option<Mutex<Copy>>,
}

impl Tap {
    /// Counts only, or counts and copies up to `cap` bytes.
    pub fn new(copy: Option<usize>) -> Self {
        Self {
            copy: copy.map(|cap| Mutex::new(Copy::new(cap))),
            ..Default::default()
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The copy so far (the body may still be sending when a response comes early).
    pub fn copied(&self) -> Option<(Bytes, u64)> {
        let c = self.copy.as_ref()?;
        let c = c.lock().unwrap_or_else(|p| p.into_inner());
        Some((Bytes::copy_from_slice(&c.data), c.size))
    }
}

pin_project_lite::pin_project! {
    /// A request body passing through a [`Tap`].
    pub struct Tapped {
        #[pin]
        inner: Body,
        tap: std::sync::Arc<Tap>,
    }
}

impl Tapped {
    pub fn new(inner: Body, tap: std::sync::Arc<Tap>) -> Self {
        Self { inner, tap }
    }
}

impl HttpBody for Tapped {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let r = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &r
            && let Some(d) = frame.data_ref()
        {
            this.tap.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
            if let Some(c) = &this.tap.copy {
                c.lock().unwrap_or_else(|p| p.into_inner()).push(d);
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
