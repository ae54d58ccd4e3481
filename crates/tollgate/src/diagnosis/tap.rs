//! Taps on a streaming body: bytes counted, and a copy kept up to a cap, as frames pass.
//! The body is never held back: each frame is handed on as it arrives.

use crate::body::Body;
use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The bytes of body copies that calls being captured hold, bounded together (HAR's
/// `max_queue_bytes`, beside the writer's queue): however many uploads are in flight and
/// however large, copies stop growing when it is spent, and what they kept says it was
/// truncated. Without it each capture held up to `max_body_bytes` before the queue's
/// bound could decide anything.
#[derive(Debug, Clone)]
pub struct Budget {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl Budget {
    pub fn new(max: usize) -> Self {
        Self {
            held: Arc::default(),
            max,
        }
    }

    /// Takes up to `want` bytes: what was granted.
    fn reserve(&self, want: usize) -> usize {
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let granted = want.min(self.max.saturating_sub(held));
            if granted == 0 {
                return 0;
            }
            match self.held.compare_exchange_weak(
                held,
                held + granted,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return granted,
                Err(now) => held = now,
            }
        }
    }

    fn release(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// A capped copy of a body: the first `cap` bytes (fewer when the capture [`Budget`] is
/// spent), and the full size seen.
#[derive(Debug, Default)]
pub struct Copy {
    pub data: BytesMut,
    pub cap: usize,
    pub size: u64,
    budget: Option<Budget>,
    /// Bytes of `budget` this copy holds.
    reserved: usize,
}

impl Copy {
    pub fn new(cap: usize, budget: Option<Budget>) -> Self {
        Self {
            data: BytesMut::new(),
            cap,
            size: 0,
            budget,
            reserved: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.size += chunk.len() as u64;
        let room = self.cap.saturating_sub(self.data.len());
        let mut take = room.min(chunk.len());
        if let Some(b) = &self.budget {
            take = b.reserve(take);
            self.reserved += take;
        }
        self.data.extend_from_slice(&chunk[..take]);
    }

    pub fn truncated(&self) -> bool {
        self.size > self.data.len() as u64
    }

    /// Gives this copy's bytes back to the budget: the record it is in is handed to the
    /// writer's queue, whose own bound counts them from then on.
    pub fn settle(&mut self) {
        if let Some(b) = self.budget.take() {
            b.release(std::mem::take(&mut self.reserved));
        }
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        self.settle();
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
    /// Counts only, or counts and copies up to `cap` bytes within `budget`.
    pub fn new(copy: Option<(usize, Option<Budget>)>) -> Self {
        Self {
            copy: copy.map(|(cap, budget)| Mutex::new(Copy::new(cap, budget))),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_share_one_budget_and_give_it_back() {
        let budget = Budget::new(100);
        let mut a = Copy::new(1_000, Some(budget.clone()));
        a.push(&[b'a'; 300]);
        assert_eq!((a.data.len(), a.size), (100, 300));
        assert!(a.truncated());
        let mut b = Copy::new(1_000, Some(budget.clone()));
        b.push(&[b'b'; 10]);
        assert_eq!(b.data.len(), 0, "the budget is spent");
        drop(a);
        assert_eq!(budget.held(), 0);
        b.push(&[b'b'; 10]);
        assert_eq!(b.data.len(), 10);
        // Handed to the queue: its bytes count there, no longer here.
        b.settle();
        assert_eq!(budget.held(), 0);
        assert_eq!(b.data.len(), 10);
    }
}
