//! Sleeps finer than tokio's timer, for the provider's `/delay` and the bench's send
//! schedule. tokio rounds every deadline up to its 1 ms tick (and `epoll_wait` takes
//! milliseconds), so two processes that both sleep on tokio line their events up on
//! millisecond boundaries: a benchmark that interleaves targets then sends them in bursts,
//! and a provider quantises its delay. Here one thread per process keeps the deadlines in
//! a heap and waits with a nanosecond timeout (a futex, so the kernel's timer slack of
//! ~50 µs is the precision), then wakes the sleeping task.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;
use tokio::sync::oneshot;

struct Entry {
    at: Instant,
    seq: u64,
    done: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A deadline and the task to wake at it.
type Request = (Instant, oneshot::Sender<()>);

/// Sends deadlines to the timer thread (started on first use; it inherits the CPU
/// affinity of the thread that starts it).
fn timer() -> Option<&'static mpsc::Sender<Request>> {
    static TX: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("tollgate-timer".into())
            .spawn(move || run(rx))
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}

fn run(rx: mpsc::Receiver<Request>) {
    let mut heap: BinaryHeap<Reverse<Entry>> = BinaryHeap::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|e| e.0.at <= now) {
            if let Some(Reverse(e)) = heap.pop() {
                let _ = e.done.send(());
            }
        }
        let next = match heap.peek() {
            Some(e) => rx.recv_timeout(e.0.at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, done)) => {
                seq += 1;
                heap.push(Reverse(Entry { at, seq, done }));
            }
            Err(RecvTimeoutError::Timeout) => {}
            // No sender left (never, with the static one): fire what is left and end.
            Err(RecvTimeoutError::Disconnected) => {
                for Reverse(e) in heap.drain() {
                    let _ = e.done.send(());
                }
                return;
            }
        }
    }
}

/// Waits until `at`, to within the kernel's timer slack (tokio's timer when the timer
/// thread cannot start).
pub async fn sleep_until(at: Instant) {
    if at <= Instant::now() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    match timer() {
        Some(t) if t.send((at, tx)).is_ok() => {
            let _ = rx.await;
        }
        _ => tokio::time::sleep_until(at.into()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_in_deadline_order_and_not_early() {
        let start = Instant::now();
        let deadlines = [30u64, 10, 20, 10].map(|ms| start + Duration::from_millis(ms));
        let mut set = tokio::task::JoinSet::new();
        for (i, at) in deadlines.into_iter().enumerate() {
            set.spawn(async move {
                sleep_until(at).await;
                (i, Instant::now() >= at)
            });
        }
        let mut order = Vec::new();
        while let Some(r) = set.join_next().await {
            let (i, not_early) = r.unwrap();
            assert!(not_early, "sleep {i} woke before its deadline");
            order.push(i);
        }
        assert_eq!(order.len(), 4);
        // The 30 ms sleep ends last.
        assert_eq!(order.last(), Some(&0));
    }
}
