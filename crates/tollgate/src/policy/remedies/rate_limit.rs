//! Rate limit: `N per window`, fixed windows aligned to the clock, optionally per consumer
//! group with shares; over the limit a request is refused (429 `rate_limited` with
//! `Retry-After` and `RateLimit-*` headers) or, with a queue, held until a later window.

use crate::error::{ProxyError, Reject, Rejection};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Exchange, Flow, Remedy, Stage};
use crate::policy::clock;
use crate::policy::limit::{Limit, Refused};
use crate::policy::queue::{Left, Queue, Retry};
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
    pub actions: Actions,
}

/// The actions of a limit that can queue (rate limits and concurrency limits).
pub const ACTIONS: &[&str] = &[
    "allowed",
    "rejected",
    "queued",
    "dequeued",
    "timed_out",
    "queue_full",
];

pub fn refusal(kind: Reject, what: &str, r: &Refused) -> ProxyError {
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

/// Takes a limit, waiting in its queue when it has one.
pub async fn take_or_wait(
    x: &mut Exchange,
    limit: &Limit,
    queue: Option<&Queue>,
    actions: &Actions,
    kind: Reject,
    what: &str,
) -> Result<(), ProxyError> {
    let (headers, deadline, diag) = (&x.parts.headers, x.deadline, &mut x.diag);
    let give_up = x.give_up.as_ref();
    let first = match queue {
        Some(q) if !q.is_empty() => None,
        _ => Some(limit.take(headers).await),
    };
    let refused = match (first, queue) {
        (Some(Ok(_)), _) => {
            actions.note(diag, "allowed");
            return Ok(());
        }
        (Some(Err(r)), None) => {
            actions.note(diag, "rejected");
            return Err(refusal(kind, what, &r));
        }
        (Some(Err(r)), Some(_)) if r.blocked => {
            actions.note(diag, "rejected");
            return Err(refusal(kind, what, &r));
        }
        (first, Some(q)) => (first, q),
        (None, None) => unreachable!("no first try only with a queue"),
    };
    let q = refused.1;
    actions.note(diag, "queued");
    let deadline = wait_deadline(deadline, q);
    let waited = q
        .wait(q.spec.priority(headers), deadline, give_up, || {
            Box::pin(async move {
                limit
                    .take(headers)
                    .await
                    .map(|_| ())
                    .map_err(|r| Retry::At(clock::instant_at(r.reset_ms)))
            })
        })
        .await;
    queue_outcome(waited, actions, diag, q, what)
}

/// The queue's deadline: `max_wait`, or the exchange's own when that is sooner.
pub fn wait_deadline(deadline: Option<Instant>, q: &Queue) -> Instant {
    let d = Instant::now() + q.spec.max_wait;
    deadline.map_or(d, |t| t.min(d))
}

pub fn queue_outcome(
    waited: Result<std::time::Duration, Left>,
    actions: &Actions,
    diag: &mut Option<Box<crate::diagnosis::RequestDiag>>,
    q: &Queue,
    what: &str,
) -> Result<(), ProxyError> {
    match waited {
        Ok(_) => {
            actions.note(diag, "dequeued");
            Ok(())
        }
        Err(Left::Full) => {
            actions.note(diag, "queue_full");
            Err(ProxyError::Rejected(Rejection {
                kind: Reject::QueueFull,
                message: format!("{what}: the queue is full ({} waiting)", q.spec.size),
                retry_after: Some(1),
                rate: None,
            }))
        }
        // Never sent: the client may send it again to another instance.
        Err(Left::ShuttingDown) => Err(ProxyError::ShuttingDown),
        Err(Left::TimedOut) => {
            actions.note(diag, "timed_out");
            Err(ProxyError::Rejected(Rejection {
                kind: Reject::QueueTimeout,
                message: format!(
                    "{what}: waited in the queue for {:?} (max_wait) without capacity",
                    q.spec.max_wait
                ),
                retry_after: Some(1),
                rate: None,
            }))
        }
    }
}

impl Remedy for RateLimit {
    fn stage(&self) -> Stage {
        Stage::RateLimit
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let r = &self.resource;
            take_or_wait(
                x,
                &r.limit,
                r.queue.as_ref(),
                &self.actions,
                Reject::RateLimited,
                &r.what,
            )
            .await?;
            Ok(Flow::Continue)
        })
    }
}
