//! A bounded wait queue in front of a limit: requests over the limit wait here instead of
//! being rejected, released as capacity frees by priority (lower first, FIFO within one).
//!
//! Only the head of the queue tries to take capacity; it is woken when capacity may have
//! freed (a slot released, a new window) and, once through, wakes the next. A request
//! that arrives while others wait joins the queue rather than overtaking them. A waiter
//! that times out or whose client goes away leaves at once (its entry is removed when its
//! future is dropped) and holds nothing. The lock is taken only by requests that wait and
//! by those releasing capacity while some do.

use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::Errors;
use crate::fields::units::{Dur, HOUR_MS, Int};
use crate::policy::actions::{Actions, QueueAction};
use crate::policy::chain::BoxFuture;
use crate::policy::clock;
use http::StatusCode;
use http::{HeaderMap, HeaderName};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A queue that is full.
pub static QUEUE_FULL: Refusal = Refusal::refusal(
    "queue_full",
    StatusCode::TOO_MANY_REQUESTS,
    "a policy's queue is full",
);

/// A wait in a queue past its `max_wait`.
pub static QUEUE_TIMEOUT: Refusal = Refusal::refusal(
    "queue_timeout",
    StatusCode::SERVICE_UNAVAILABLE,
    "waited the queue's `max_wait`",
);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub size: usize,
    pub max_wait: Duration,
    pub priority_header: Option<HeaderName>,
    pub priorities: Vec<(String, u8)>,
    pub default_priority: u8,
}

impl QueueSpec {
    pub fn priority(&self, h: &HeaderMap) -> u8 {
        self.priority_header
            .as_ref()
            .and_then(|n| h.get(n))
            .and_then(|v| {
                self.priorities
                    .iter()
                    .find(|(k, _)| k.as_bytes() == v.as_bytes())
            })
            .map_or(self.default_priority, |(_, p)| *p)
    }
}

/// Why a request left the queue without capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    Full,
    TimedOut,
    /// The next free slot (a new window) comes after the deadline: waiting cannot help.
    NotInTime(Instant),
    /// The gateway's drain deadline passed while waiting.
    ShuttingDown,
}

pub struct Queue {
    pub spec: QueueSpec,
    waiting: Mutex<Waiting>,
    len: AtomicUsize,
    pub depth: Gauge,
    pub wait: Histogram,
}

#[derive(Default)]
struct Waiting {
    order: BTreeMap<(u8, u64), Arc<Notify>>,
    seq: u64,
    /// When the head last learned capacity frees next (a new window); `None` once it got
    /// through or capacity was given back.
    opens_at: Option<Instant>,
}

/// When capacity may free next, as the taker sees it after failing.
pub enum NextFree {
    /// When something is released (the queue is woken).
    OnWake,
    /// At this instant (a new window), or when woken.
    At(Instant),
}

impl Queue {
    pub fn new(spec: QueueSpec, depth: Gauge, wait: Histogram) -> Self {
        Self {
            spec,
            waiting: Mutex::default(),
            len: AtomicUsize::new(0),
            depth,
            wait,
        }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When capacity frees next, as the head last learned it: the real time to tell a
    /// client in `NextFree-After`. `None` when unknown (a slot frees when a request ends).
    pub fn opens_at(&self) -> Option<Instant> {
        if self.is_empty() {
            return None;
        }
        let at = self.waiting.lock().ok()?.opens_at?;
        (at > Instant::now()).then_some(at)
    }

    /// Capacity was given back before the next window (a refund): what the head learned
    /// no longer holds, and it tries again now.
    pub fn freed(&self) {
        if self.is_empty() {
            return;
        }
        if let Ok(mut w) = self.waiting.lock() {
            w.opens_at = None;
        }
        self.wake();
    }

    /// Wakes the head: capacity may have freed.
    pub fn wake(&self) {
        if self.is_empty() {
            return;
        }
        if let Ok(w) = self.waiting.lock()
            && let Some(n) = w.order.values().next()
        {
            n.notify_one();
        }
    }

    /// Waits in the queue until `take` succeeds as its head. `take` returns whether it
    /// took capacity and, if not, when to try again.
    /// Leaves with [`Left::ShuttingDown`] when `give_up` is cancelled, and at once with
    /// [`Left::NotInTime`] when capacity frees only after `deadline` (a client told the
    /// real time to come back beats one held for `max_wait` and then refused).
    pub async fn wait<'f>(
        &self,
        priority: u8,
        deadline: Instant,
        give_up: Option<&CancellationToken>,
        mut take: impl FnMut() -> BoxFuture<'f, Result<(), NextFree>>,
    ) -> Result<Duration, Left> {
        let started = Instant::now();
        let notify = Arc::new(Notify::new());
        let key = {
            let mut w = self.waiting.lock().map_err(|_| Left::Full)?;
            if w.order.len() >= self.spec.size {
                return Err(Left::Full);
            }
            w.seq += 1;
            let key = (priority, w.seq);
            w.order.insert(key, notify.clone());
            key
        };
        self.len.fetch_add(1, Ordering::Relaxed);
        self.depth.inc();
        let entry = Entry { queue: self, key };
        loop {
            let head = self
                .waiting
                .lock()
                .map(|w| w.order.keys().next() == Some(&key))
                .unwrap_or(false);
            let mut next = None;
            if head {
                match take().await {
                    Ok(()) => {
                        if let Ok(mut w) = self.waiting.lock() {
                            w.opens_at = None;
                        }
                        drop(entry);
                        let waited = started.elapsed();
                        self.wait.observe(waited.as_secs_f64());
                        return Ok(waited);
                    }
                    Err(NextFree::At(at)) => {
                        if let Ok(mut w) = self.waiting.lock() {
                            w.opens_at = Some(at);
                        }
                        if at > deadline {
                            return Err(Left::NotInTime(at));
                        }
                        next = Some(at);
                    }
                    Err(NextFree::OnWake) => {}
                }
            }
            let until = next.map_or(deadline, |n| n.min(deadline));
            tokio::select! {
                _ = notify.notified() => {}
                _ = async {
                    match give_up {
                        Some(t) => t.cancelled().await,
                        None => std::future::pending().await,
                    }
                } => return Err(Left::ShuttingDown),
                _ = tokio::time::sleep_until(until) => {
                    if Instant::now() >= deadline {
                        return Err(Left::TimedOut);
                    }
                }
            }
        }
    }
}

/// A request's place in the queue; leaving (through, timed out, client gone) removes it
/// and wakes whoever is head now.
struct Entry<'a> {
    queue: &'a Queue,
    key: (u8, u64),
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        if let Ok(mut w) = self.queue.waiting.lock() {
            w.order.remove(&self.key);
        }
        self.queue.len.fetch_sub(1, Ordering::Relaxed);
        self.queue.depth.dec();
        self.queue.wake();
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    /// Most requests held. Beyond: **429 `queue_full`**.
    pub size: Int<1, 1_000_000>,
    /// Longest a request waits (the `total` timeout if shorter). Then: **503 `queue_timeout`**. A rate limit whose next window starts after that refuses at once instead (see below).
    pub max_wait: Dur<1, HOUR_MS>,
    /// The request header whose value picks the priority.
    pub priority_header: Option<String>,
    /// Header value → priority, 0 to 255, **lower first**; FIFO within one priority.
    #[serde(default)]
    pub priorities: BTreeMap<String, u8>,
    /// Requests without a listed value.
    #[serde(default = "default_priority")]
    pub default_priority: u8,
}

fn default_priority() -> u8 {
    100
}

pub fn queue(e: &mut Errors, path: &str, q: &Option<RawQueue>) -> Option<QueueSpec> {
    let q = q.as_ref()?;
    Some(QueueSpec {
        size: q.size.usize(),
        max_wait: q.max_wait.get(),
        priority_header: q
            .priority_header
            .as_deref()
            .and_then(|h| e.read_header(&format!("{path}.priority_header"), h)),
        priorities: q.priorities.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        default_priority: q.default_priority,
    })
}

/// The queue's deadline: `max_wait`, or the exchange's own when that is sooner.
pub fn wait_deadline(deadline: Option<Instant>, q: &Queue) -> Instant {
    let d = Instant::now() + q.spec.max_wait;
    deadline.map_or(d, |t| t.min(d))
}

pub fn queue_outcome<A: QueueAction>(
    waited: Result<std::time::Duration, Left>,
    actions: &Actions<A>,
    diag: &mut Option<Box<crate::diagnosis::RequestDiag>>,
    q: &Queue,
    what: &str,
) -> Result<(), ProxyError> {
    // The real time to the next slot when the queue knows it (a rate limit's next
    // window); a concurrency slot frees whenever a request ends, so 1 s there.
    let retry_after = || q.opens_at().map_or(1, clock::secs_until_instant);
    let (kind, action, message) = match waited {
        Ok(_) => {
            actions.note(diag, A::DEQUEUED);
            return Ok(());
        }
        // Never sent: the client may send it again to another instance.
        Err(Left::ShuttingDown) => return Err(ProxyError::ShuttingDown),
        Err(Left::Full) => (
            &QUEUE_FULL,
            A::QUEUE_FULL,
            format!("{what}: the queue is full ({} waiting)", q.spec.size),
        ),
        Err(Left::TimedOut) => (
            &QUEUE_TIMEOUT,
            A::TIMED_OUT,
            format!(
                "{what}: waited in the queue for {:?} (max_wait) without capacity",
                q.spec.max_wait
            ),
        ),
        Err(Left::NotInTime(at)) => (
            &QUEUE_TIMEOUT,
            A::TIMED_OUT,
            format!(
                "{what}: capacity frees in {}s, after the queue's max_wait ({:?})",
                clock::secs_until_instant(at),
                q.spec.max_wait
            ),
        ),
    };
    actions.note(diag, action);
    Err(ProxyError::Rejected(Rejection {
        kind,
        message,
        retry_after: Some(retry_after()),
        rate: None,
        permanent: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(size: usize) -> Queue {
        Queue::new(
            QueueSpec {
                size,
                max_wait: Duration::from_secs(10),
                priority_header: None,
                priorities: Vec::new(),
                default_priority: 0,
            },
            Gauge::default(),
            Histogram::new([1.0]),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn waits_until_the_retry_instant_or_times_out() {
        let q = queue(1);
        let open_at = Instant::now() + Duration::from_secs(3);
        let waited = q
            .wait(0, Instant::now() + Duration::from_secs(10), None, || {
                Box::pin(async move {
                    if Instant::now() >= open_at {
                        Ok(())
                    } else {
                        Err(NextFree::At(open_at))
                    }
                })
            })
            .await;
        assert_eq!(waited, Ok(Duration::from_secs(3)));
        let never = q
            .wait(0, Instant::now() + Duration::from_secs(10), None, || {
                Box::pin(async { Err(NextFree::OnWake) })
            })
            .await;
        assert_eq!(never, Err(Left::TimedOut));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn leaves_at_once_when_capacity_frees_after_the_deadline() {
        let q = queue(4);
        let start = Instant::now();
        let open_at = start + Duration::from_secs(2400);
        let left = q
            .wait(0, start + Duration::from_secs(30), None, || {
                Box::pin(async move { Err(NextFree::At(open_at)) })
            })
            .await;
        assert_eq!(left, Err(Left::NotInTime(open_at)));
        assert_eq!(Instant::now(), start, "no time spent waiting");
        assert!(q.is_empty());
    }
}
