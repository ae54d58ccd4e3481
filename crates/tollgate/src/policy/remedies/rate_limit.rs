//! Rate limit: `N per window`, fixed windows aligned to the clock, optionally per consumer
//! group with shares; over the limit a request is refused (429 `rate_limited` with
//! `Retry-After` and `RateLimit-*` headers) or, with a queue, held until a later window.

use crate::body::Body;
use crate::error::{ProxyError, Refusal, Reject, Rejection};
use crate::fields::Errors;
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::clock;
use crate::policy::compile::Build;
use crate::policy::config::RawRef;
use crate::policy::kind::{Check, Phases, RemedyKind, Shared, resolve};
use crate::policy::limit::{Counted, Limit, OverLimit, Taken, keep_for_refund, refund, refusal};
use crate::policy::limit::{GroupFields, LimitSpec, groups, refund_on};
use crate::policy::queue::{Left, NextFree, Queue};
use crate::policy::queue::{QUEUE_FULL, QUEUE_TIMEOUT, queue_outcome, wait_deadline};
use crate::policy::queue::{QueueSpec, RawQueue, queue};
use crate::policy::spec::Resource;
use crate::policy::window::window;
use http::Response;
use http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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

/// A request admitted: what it was counted in kept for `refund_on`.
fn admitted(x: &mut Exchange, counted: Result<Counted, ProxyError>) -> Result<Flow, ProxyError> {
    keep_for_refund(x, Kind::NAME, counted?);
    Ok(Flow::Continue)
}

crate::policy::actions::queue_actions! {
    /// What a rate limit did with a request.
    pub enum Action for "rate_limit" {
        /// Given back under `refund_on`.
        Refunded = "refunded",
    }
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
        permanent: false,
    })
}

/// A rate limit's first try, decided: counted (what it was counted in, with
/// `refund_on`: see [`crate::policy::limit::Taken`]) or refused; `Err(first)` when the
/// request waits in the queue (`first`: the try that was refused, `None` when others
/// were queued ahead of it and it did not try).
type Decided = Result<Result<Counted, ProxyError>, Option<Result<Taken, OverLimit>>>;

/// What the first try at a limit decides (`first`: `None` when others are queued ahead).
fn decide(
    diag: &mut Option<Box<crate::diagnosis::RequestDiag>>,
    first: Option<Result<Taken, OverLimit>>,
    queue: Option<&Queue>,
    actions: &Actions<Action>,
    kind: Reject,
    what: &str,
) -> Decided {
    match (first, queue) {
        (Some(Ok(t)), _) => {
            actions.note(diag, Action::Allowed);
            Ok(Ok(t.counted))
        }
        (Some(Err(r)), None) => {
            actions.note(diag, Action::Rejected);
            Ok(Err(refusal(kind, what, &r)))
        }
        (Some(Err(r)), Some(_)) if r.blocked => {
            actions.note(diag, Action::Rejected);
            Ok(Err(refusal(kind, what, &r)))
        }
        (first, _) => Err(first),
    }
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
) -> Result<Counted, ProxyError> {
    let first = match queue {
        Some(q) if !q.is_empty() => None,
        _ => Some(limit.take(&x.parts.headers).await),
    };
    match decide(&mut x.diag, first, queue, actions, kind, what) {
        Ok(decided) => decided,
        Err(first) => wait(x, limit, queue, first, actions, kind, what).await,
    }
}

/// A request the first try sent to the queue: held until a later window admits it, or
/// refused at once when that window starts after the wait's deadline.
async fn wait(
    x: &mut Exchange,
    limit: &Limit,
    queue: Option<&Queue>,
    first: Option<Result<Taken, OverLimit>>,
    actions: &Actions<Action>,
    kind: Reject,
    what: &str,
) -> Result<Counted, ProxyError> {
    let Some(q) = queue else {
        return Err(ProxyError::Internal("a rate limit waited without a queue"));
    };
    let deadline = wait_deadline(super::timeouts::deadline(x), q);
    let (headers, diag) = (&x.parts.headers, &mut x.diag);
    let give_up = x.give_up.as_deref();
    // When the next window is known to start after the deadline, waiting cannot help.
    // (The limit that refused: a group's share or a parent's, when the first try says.)
    let (opens, refused_by) = match first {
        Some(Err(r)) => (Some(clock::instant_at(r.reset_ms)), r.limit),
        _ => (q.opens_at(), limit.spec.limit),
    };
    if let Some(at) = opens.filter(|&at| at > deadline) {
        actions.note(diag, Action::Rejected);
        return Err(not_in_time(kind, what, refused_by, q, at));
    }
    actions.note(diag, Action::Queued);
    let counted = std::sync::Mutex::new(Counted::new());
    let waited = q
        .wait(q.spec.priority(headers), deadline, give_up, || {
            let counted = &counted;
            Box::pin(async move {
                let t = limit
                    .take(headers)
                    .await
                    .map_err(|r| NextFree::At(clock::instant_at(r.reset_ms)))?;
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

/// Over a rate limit.
pub static RATE_LIMITED: Refusal = Refusal::refusal(
    "rate_limited",
    StatusCode::TOO_MANY_REQUESTS,
    "a policy's rate limit reached, or its queue cannot serve before `max_wait` (`Retry-After` to the next window, `RateLimit-*`)",
);

/// `rate_limit:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "rate_limit";
    const PHASES: Phases = Phases {
        request: "counts, refuses or queues (refuses at once when the next window is past `max_wait`)",
        attempt: "",
        response: "gives the request back on a `refund_on` status",
    };
    const EXAMPLE: &'static str = "github";
    const REFUSALS: &'static [&'static Refusal] = &[&RATE_LIMITED, &QUEUE_FULL, &QUEUE_TIMEOUT];
    type Raw = RawRef<RawRateLimit>;
    type Spec = Resource<RateLimitSpec>;
    type Action = Action;
    type Metrics = ();

    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec> {
        resolve::<Self>(raw, cx)
    }

    fn build(r: &Self::Spec, b: &mut Build<'_>) -> Built {
        let id = b.id("rate", &r.name, &r.spec);
        let resource = b.reuse(id.clone(), |b| RateLimitResource {
            name: Arc::from(r.name.as_str()),
            what: format!("rate limit `{}`", r.name),
            limit: Limit::new(
                r.spec.limit.clone(),
                Arc::from(id.as_str()),
                None,
                b.store_for(r.spec.shared),
            ),
            queue: b.queue(&r.name, &r.spec.queue),
        });
        Built::from(Arc::new(RateLimit {
            resource,
            actions: b.actions(),
        }))
    }
}

impl Shared for Kind {
    type Def = RawRateLimit;
    type DefSpec = RateLimitSpec;
    const DECLARED_EXAMPLE: &'static str = "{github: {limit: 5000, window: hour, group_by: x-consumer, groups: {ci: 20%}, refund_on: [304], queue: {size: 100, max_wait: 30s, priority_header: x-priority, priorities: {interactive: 0}}}}";

    fn define(
        e: &mut Errors,
        path: &str,
        def: &RawRateLimit,
        _section: &BTreeMap<String, RawRateLimit>,
    ) -> RateLimitSpec {
        rate_limit(e, path, def)
    }
}

impl Remedy for RateLimit {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let r = &self.resource;
            let (used, end) = r.limit.used().await;
            serde_json::json!({
                "name": &*r.name,
                "limit": r.limit.spec.limit,
                "used": used,
                "remaining": r.limit.spec.limit.saturating_sub(used),
                "resets_in_s": end.saturating_sub(clock::now_ms()).div_ceil(1000),
                "queued": r.queue.as_ref().map(|q| q.len()),
            })
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        let r = &self.resource;
        let (queue, what) = (r.queue.as_ref(), &r.what);
        // A limit in this process's memory, with no one queued ahead: decided at once.
        let decided = match queue {
            Some(q) if !q.is_empty() => None,
            _ => r.limit.take_now(&x.parts.headers).map(|first| {
                decide(
                    &mut x.diag,
                    Some(first),
                    queue,
                    &self.actions,
                    &RATE_LIMITED,
                    what,
                )
            }),
        };
        match decided {
            Some(Ok(counted)) => Phase::Now(admitted(x, counted)),
            Some(Err(first)) => Phase::wait(async move {
                let counted = wait(
                    x,
                    &r.limit,
                    queue,
                    first,
                    &self.actions,
                    &RATE_LIMITED,
                    what,
                )
                .await;
                admitted(x, counted)
            }),
            None => Phase::wait(async move {
                let counted =
                    take_or_wait(x, &r.limit, queue, &self.actions, &RATE_LIMITED, what).await;
                admitted(x, counted)
            }),
        }
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        let r = &self.resource;
        if refund(x, Kind::NAME, &r.limit, resp.status()) {
            if let Some(q) = &r.queue {
                q.freed();
            }
            self.actions.record(x, Action::Refunded);
        }
        resp
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitSpec {
    pub limit: LimitSpec,
    pub queue: Option<QueueSpec>,
    /// Counted on the shared store (`store.backend: redis`) rather than this process's.
    pub shared: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Requests per window.
    pub limit: crate::fields::units::Int<1, { crate::fields::MAX_COUNT }>,
    /// `second`, `minute`, `hour` or `day`: fixed windows aligned to the clock (UTC).
    pub window: String,
    /// Count per consumer: the value of this request header names the group.
    pub group_by: Option<String>,
    /// A share of `limit` per group (`{ci: "20%", web: "50%"}`); shares add up to 100% at most. A request must fit its group's share **and** the whole limit.
    #[serde(default)]
    pub groups: BTreeMap<String, crate::fields::units::Percent>,
    /// Groups not listed and requests without the header: `allow` (only the whole limit applies), `block` (429), or a share each (`"10%"`).
    #[serde(default = "allow")]
    pub default_group: String,
    /// Distinct unlisted groups counted per window (1 to 1000000); further ones share one group, `other`, with the default share. Memory stays bounded whatever values clients send: a group is stored under a 16-byte digest (SHA-256) of the header's value, never the value itself, and values longer than 1 KiB are grouped by their first 1 KiB.
    #[serde(default = "max_groups")]
    pub max_groups: crate::fields::units::Int<1, 1_000_000>,
    /// Hold requests over the limit until a later window instead of rejecting them (see [queues](#queues)).
    pub queue: Option<RawQueue>,
    /// Response statuses that give the request back to the limit, because the provider does not charge them: GitHub does not count a conditional request it answers **304**, so `refund_on: [304]` keeps tollgate's count equal to GitHub's. Counted as the action `refunded`.
    #[serde(default)]
    pub refund_on: Vec<u16>,
    /// With `store.backend: redis`: `false` keeps this limit in each replica's own memory (a per-replica limit: each replica gets all of it); `true` counts it once for all replicas. No effect on the memory store.
    #[serde(default = "crate::fields::yes")]
    pub shared: bool,
}

fn allow() -> String {
    "allow".into()
}

fn max_groups() -> crate::fields::units::Int<1, 1_000_000> {
    crate::fields::units::Int::of(10_000)
}

pub fn rate_limit(e: &mut Errors, path: &str, r: &RawRateLimit) -> RateLimitSpec {
    let limit = r.limit.get();
    let groups = groups(
        e,
        path,
        limit,
        GroupFields {
            group_by: &r.group_by,
            groups: &r.groups,
            default_group: &r.default_group,
            max_groups: r.max_groups.get(),
        },
    );
    RateLimitSpec {
        limit: LimitSpec {
            limit,
            window: window(e, &format!("{path}.window"), &r.window),
            groups,
            refund_on: refund_on(e, path, &r.refund_on),
        },
        queue: queue(e, &format!("{path}.queue"), &r.queue),
        shared: r.shared,
    }
}
