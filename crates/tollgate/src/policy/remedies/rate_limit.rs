//! Rate limit: `N per window`, fixed windows aligned to the clock, optionally per consumer
//! group with shares; over the limit a request is refused (429 `rate_limited` with
//! `Retry-After` and `RateLimit-*` headers) or, with a queue, held until a later window.

use crate::body::Body;
use crate::error::{ProxyError, Reject, Rejection};
use crate::policy::actions::{Actions, QueueAction};
use crate::policy::chain::{BoxFuture, Exchange, Flow, Remedy, Stage};
use crate::policy::clock;
use crate::policy::limit::{Limit, OverLimit};
use crate::policy::queue::{Left, Queue, Retry};
use crate::policy::store::Key;
use http::Response;
use std::sync::Arc;
use tokio::time::Instant;

/// A declared (or inline) rate limit: its counters and its queue, shared by every policy
/// that refers to it.
pub struct RateLimitResource {
    pub name: Arc<str>,
    /// `rate limit \`NAME\``, for messages.
    pub what: String,
    pub limit: Limit,
    pub queue: Option<Queue>,
}

/// A policy's use of a rate limit.
pub struct RateLimit {
    pub resource: Arc<RateLimitResource>,
    pub actions: Actions<Action>,
}

crate::policy::actions::queue_actions! {
    /// What a rate limit did with a request.
    pub enum Action for "rate_limit" {
        /// Given back under `refund_on`.
        Refunded = "refunded",
    }
}

pub fn refusal(kind: Reject, what: &str, r: &OverLimit) -> ProxyError {
    let retry_after = clock::secs_until(r.reset_ms);
    let message = if r.blocked {
        format!("{what}: this consumer group is not allowed (default_group: block)")
    } else {
        format!(
            "{what}: {} requests per window used; the next window starts in {retry_after}s",
            r.limit
        )
    };
    ProxyError::Rejected(Rejection {
        kind,
        message,
        retry_after: (!r.blocked).then_some(retry_after),
        rate: Some((r.limit, 0, retry_after)),
    })
}

/// Over the limit with a queue, but the next window starts after the wait's deadline:
/// refused at once with the real time to come back, not held for `max_wait` first.
fn not_in_time(kind: Reject, what: &str, limit: u64, q: &Queue, at: Instant) -> ProxyError {
    let secs = clock::secs_until_instant(at);
    let message = format!(
        "{what}: {limit} requests per window used; the next window starts in {secs}s, \
         after the queue's max_wait ({:?}): refused without waiting",
        q.spec.max_wait
    );
    ProxyError::Rejected(Rejection {
        kind,
        message,
        retry_after: Some(secs),
        rate: Some((limit, 0, secs)),
    })
}

/// Takes a limit, waiting in its queue when it has one. Returns what the request was
/// counted in when the limit has `refund_on` (see [`crate::policy::limit::Taken`]).
pub async fn take_or_wait(
    x: &mut Exchange,
    limit: &Limit,
    queue: Option<&Queue>,
    actions: &Actions<Action>,
    kind: Reject,
    what: &str,
) -> Result<Vec<Key>, ProxyError> {
    let (headers, deadline, diag) = (&x.parts.headers, x.deadline, &mut x.diag);
    let give_up = x.give_up.as_ref();
    let first = match queue {
        Some(q) if !q.is_empty() => None,
        _ => Some(limit.take(headers).await),
    };
    let refused = match (first, queue) {
        (Some(Ok(t)), _) => {
            actions.note(diag, Action::Allowed);
            return Ok(t.counted);
        }
        (Some(Err(r)), None) => {
            actions.note(diag, Action::Rejected);
            return Err(refusal(kind, what, &r));
        }
        (Some(Err(r)), Some(_)) if r.blocked => {
            actions.note(diag, Action::Rejected);
            return Err(refusal(kind, what, &r));
        }
        (first, Some(q)) => (first, q),
        (None, None) => unreachable!("no first try only with a queue"),
    };
    let q = refused.1;
    let deadline = wait_deadline(deadline, q);
    // When the next window is known to start after the deadline, waiting cannot help.
    // (The limit that refused: a group's share or a parent's, when the first try says.)
    let (opens, refused_by) = match refused.0 {
        Some(Err(r)) => (Some(clock::instant_at(r.reset_ms)), r.limit),
        _ => (q.opens_at(), limit.spec.limit),
    };
    if let Some(at) = opens.filter(|&at| at > deadline) {
        actions.note(diag, Action::Rejected);
        return Err(not_in_time(kind, what, refused_by, q, at));
    }
    actions.note(diag, Action::Queued);
    let counted = std::sync::Mutex::new(Vec::new());
    let waited = q
        .wait(q.spec.priority(headers), deadline, give_up, || {
            let counted = &counted;
            Box::pin(async move {
                let t = limit
                    .take(headers)
                    .await
                    .map_err(|r| Retry::At(clock::instant_at(r.reset_ms)))?;
                if let Ok(mut c) = counted.lock() {
                    *c = t.counted;
                }
                Ok(())
            })
        })
        .await;
    if let Err(Left::NotInTime(at)) = waited {
        actions.note(diag, Action::Rejected);
        return Err(not_in_time(kind, what, limit.spec.limit, q, at));
    }
    queue_outcome(waited, actions, diag, q, what)?;
    Ok(counted.into_inner().unwrap_or_default())
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
            Reject::QueueFull,
            A::QUEUE_FULL,
            format!("{what}: the queue is full ({} waiting)", q.spec.size),
        ),
        Err(Left::TimedOut) => (
            Reject::QueueTimeout,
            A::TIMED_OUT,
            format!(
                "{what}: waited in the queue for {:?} (max_wait) without capacity",
                q.spec.max_wait
            ),
        ),
        Err(Left::NotInTime(at)) => (
            Reject::QueueTimeout,
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
    }))
}

impl Remedy for RateLimit {
    fn stage(&self) -> Stage {
        Stage::RateLimit
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let r = &self.resource;
            let counted = take_or_wait(
                x,
                &r.limit,
                r.queue.as_ref(),
                &self.actions,
                Reject::RateLimited,
                &r.what,
            )
            .await?;
            if !counted.is_empty() {
                x.refunds.push((Stage::RateLimit, counted));
            }
            Ok(Flow::Continue)
        })
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        let r = &self.resource;
        if refund(x, Stage::RateLimit, &r.limit, resp.status()) {
            if let Some(q) = &r.queue {
                q.freed();
            }
            self.actions.record(x, Action::Refunded);
        }
        resp
    }
}

/// Gives back what `stage` counted when the provider's answer is one of the limit's
/// `refund_on` statuses (it did not charge the request). Whether it did.
pub fn refund(x: &mut Exchange, stage: Stage, limit: &Limit, status: http::StatusCode) -> bool {
    if !limit.spec.refund_on.contains(&status.as_u16()) {
        return false;
    }
    let Some(i) = x.refunds.iter().position(|(s, _)| *s == stage) else {
        return false;
    };
    let (_, counted) = x.refunds.swap_remove(i);
    limit.refund(&counted);
    true
}
