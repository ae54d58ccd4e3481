//! Taps on a streaming body: bytes counted, and a copy kept up to a cap, as frames pass.
//! The body is never held back: each frame is handed on as it arrives.

use crate::body::Body;
use bytes::{Bytes, BytesMut};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// A request body passing through a [`Tap`].
pub type Tapped = crate::body::Watched<Body, std::sync::Arc<Tap>>;

impl crate::body::Watch for std::sync::Arc<Tap> {
    fn data(&mut self, d: &Bytes) {
        self.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
        if let Some(c) = &self.copy {
            c.lock().unwrap_or_else(|p| p.into_inner()).push(d);
        }
    }
}
