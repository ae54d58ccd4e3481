//! Retries inside the proxy: attempts with exponential backoff and full jitter; on the
//! statuses and errors listed; idempotent methods only (RFC 9110 §9.2.2) unless the
//! policy lists others or the request carries `Idempotency-Key`, except that a request
//! that never reached the provider (DNS, connect, TLS) may always go again; the body kept
//! for replay up to a cap; a retryable response's `Retry-After` honoured within the cap;
//! a budget (retries at most a share of requests over a rolling window, plus a floor);
//! an overall deadline; `x-tollgate-retries: N` on the response.
//!
//! One mechanism with the upstream pool's resend: for a policy that retries, the pool
//! no longer resends a request a stale keep-alive connection lost (it may have reached
//! the provider); it reports `Connect { sent: true }` and this remedy decides, as an
//! attempt through the breaker and the budget (`UpstreamClient::send_within`'s
//! `resend_lost`).
//! Only a request the connection refused before sending any of it is still resent by
//! the pool, invisibly: it never left.

use super::credentials::Account;
use crate::body::Body;
use crate::error::ProxyError;
use crate::fields::Errors;
use crate::fields::units::{DAY_MS, Dur, HOUR_MS, Int, Percent, SEC_MS, Size};
use crate::headers::{X_SHOULD_RETRY, X_TOLLGATE_RETRIES};
use crate::policy::actions::Actions;
use crate::policy::chain::{Attempts, BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::clock;
use crate::policy::compile::Build;
use crate::policy::failure::{Failure, Statuses, classify};
use crate::policy::kind::{Check, Phases, RemedyKind};
use crate::policy::store::{Key, Names, Store};
use http::{Method, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct RetrySpec {
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    pub statuses: Statuses,
    pub connect_errors: bool,
    pub timeouts: bool,
    pub methods: Vec<Method>,
    pub max_body: usize,
    pub budget: f64,
    pub budget_window: Duration,
    pub budget_min: u64,
    pub deadline: Option<Duration>,
}

pub struct Retry {
    pub spec: RetrySpec,
    pub store: Arc<dyn Store>,
    pub resource: Arc<str>,
    pub actions: Actions<Action>,
    /// `requests`, `retries`, then the resource: a copy per worker.
    names: Names,
}

crate::policy::actions::actions! {
    /// What retry decided after an attempt.
    pub enum Action for "retry" {
        Retried = "retried",
        BudgetExhausted = "budget_exhausted",
        GaveUp = "gave_up",
    }
}

/// The end of a request's retries (`retry.deadline`).
struct Deadline(tokio::time::Instant);

/// What retry did with one request: attempts after the first, whether the request is
/// kept for replay, and whether it declined to send a retryable answer again (attempts,
/// budget or deadline spent, or a `Retry-After` past the cap: a client retry now is what
/// tollgate just declined).
#[derive(Debug, Default, Clone, Copy)]
struct Tries {
    retries: u32,
    replayable: bool,
    declined: bool,
}

const REQUESTS: usize = 0;
const RETRIES: usize = 1;
const RESOURCE: usize = 2;

impl Retry {
    pub fn new(
        spec: RetrySpec,
        resource: Arc<str>,
        store: Arc<dyn Store>,
        actions: Actions<Action>,
    ) -> Self {
        Self {
            spec,
            store,
            names: Names::new(["requests".into(), "retries".into(), resource.clone()]),
            resource,
            actions,
        }
    }

    fn idempotent(&self, x: &Exchange) -> bool {
        matches!(
            x.method,
            Method::GET
                | Method::HEAD
                | Method::OPTIONS
                | Method::TRACE
                | Method::PUT
                | Method::DELETE
        ) || self.spec.methods.contains(&x.method)
            || x.parts.headers.contains_key("idempotency-key")
    }

    fn window(&self) -> (u64, u64, f64) {
        let len = self.spec.budget_window.as_millis().max(1) as u64;
        let now = clock::now_ms();
        (now / len, len, 1.0 - (now % len) as f64 / len as f64)
    }

    /// Counts a request in the budget's window.
    async fn count_request(&self) {
        let (w, len, _) = self.window();
        let n = self.names.get();
        let k = Key::new(&n[RESOURCE], &n[REQUESTS], w);
        let _ = self.store.add(&k, 1, u64::MAX, (w + 2) * len).await;
    }

    /// Takes one retry from the budget: retries over the rolling window stay within
    /// `budget_min + budget × requests`.
    async fn take_budget(&self) -> bool {
        let (w, len, weight) = self.window();
        let get = |part: usize, w: u64| {
            let n = self.names.get();
            let k = Key::new(&n[RESOURCE], &n[part], w);
            async move { self.store.get(&k).await.unwrap_or(0) as f64 }
        };
        let requests = get(REQUESTS, w).await + get(REQUESTS, w - 1).await * weight;
        let earlier = get(RETRIES, w - 1).await * weight;
        let allowed = self.spec.budget_min as f64 + self.spec.budget * requests - earlier;
        if allowed < 1.0 {
            return false;
        }
        let n = self.names.get();
        let k = Key::new(&n[RESOURCE], &n[RETRIES], w);
        matches!(self.store.add(&k, 1, allowed as u64, (w + 2) * len).await, Ok(a) if a.taken)
    }

    /// After an attempt: how long to wait before the next one, or `None` to stop here.
    /// `outcome` is the attempt's status and `Retry-After`, or its error.
    pub async fn again(
        &self,
        x: &mut Exchange,
        outcome: Result<(u16, Option<Duration>), &ProxyError>,
    ) -> Option<Duration> {
        let s = &self.spec;
        let asked = match outcome {
            Ok((status, retry_after)) if s.statuses.contains(status) => {
                if !self.idempotent(x) {
                    return None;
                }
                retry_after
            }
            Ok(_) => return None,
            Err(e) => {
                let ok = match classify(e) {
                    Failure::NotSent => s.connect_errors,
                    Failure::Timeout => s.timeouts && self.idempotent(x),
                    Failure::AfterSending => s.connect_errors && self.idempotent(x),
                    Failure::Ours => false,
                };
                if !ok {
                    return None;
                }
                None
            }
        };
        let tries = x.locals.get::<Tries>().copied().unwrap_or_default();
        if !tries.replayable || tries.retries + 1 >= s.attempts {
            return self.give_up(x);
        }
        // A provider asking for longer than the cap gets its answer relayed instead.
        let wait = match asked {
            // The wait was the tired account's; another one is free now.
            _ if x.locals.get::<Account>().is_some_and(|a| a.fresh) => Duration::ZERO,
            Some(d) if d > s.max_delay => return self.give_up(x),
            Some(d) => d,
            None => {
                let exp = s
                    .base_delay
                    .saturating_mul(1u32.checked_shl(tries.retries).unwrap_or(u32::MAX))
                    .min(s.max_delay);
                Duration::from_nanos(fastrand::u64(0..=exp.as_nanos() as u64))
            }
        };
        if let Some(&Deadline(d)) = x.locals.get::<Deadline>()
            && tokio::time::Instant::now() + wait >= d
        {
            return self.give_up(x);
        }
        if !self.take_budget().await {
            self.actions.record(x, Action::BudgetExhausted);
            x.locals.get_or_default::<Tries>().declined = true;
            return None;
        }
        self.actions.record(x, Action::Retried);
        Some(wait)
    }

    /// Stops here: the answer is relayed, and the client told not to retry it.
    fn give_up(&self, x: &mut Exchange) -> Option<Duration> {
        self.actions.record(x, Action::GaveUp);
        x.locals.get_or_default::<Tries>().declined = true;
        None
    }
}

/// The chain's retry stage: on the request, keeps the body for replay and counts the
/// request in the budget; between the request and attempt stacks, the layer that sends
/// the attempts ([`Attempts`]), asking [`Retry::again`] after each.
pub struct RetryStage(pub Arc<Retry>);

/// `retry:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "retry";
    const PHASES: Phases = Phases {
        request: "keeps the body for replay, counts the request in the budget",
        attempt: "decides whether to go again: backoff, budget, deadline",
        response: "`x-tollgate-retries`, `x-should-retry: false`",
    };
    const EXAMPLE: &'static str = "{}";
    type Raw = RawRetry;
    type Spec = RetrySpec;
    type Action = Action;
    type Metrics = ();

    fn validate(raw: &RawRetry, cx: &mut Check<'_>) -> Option<RetrySpec> {
        Some(retry(cx.errors, &cx.path, raw))
    }

    fn build(spec: &RetrySpec, b: &mut Build<'_>) -> Built {
        let id = b.id("retry", b.policy, spec);
        let actions = b.actions();
        let r = b.reuse(id.clone(), |b| {
            Retry::new(
                spec.clone(),
                Arc::from(id.as_str()),
                b.store.clone(),
                actions,
            )
        });
        let stage = Arc::new(RetryStage(r));
        Built {
            attempts: Some(stage.clone()),
            ..Built::from(stage)
        }
    }
}

impl Attempts for RetryStage {
    fn keeps(&self, x: &Exchange) -> bool {
        x.locals.get::<Tries>().is_some_and(|t| t.replayable)
    }

    fn again<'a>(
        &'a self,
        x: &'a mut Exchange,
        o: Result<&'a Response<Body>, &'a ProxyError>,
    ) -> BoxFuture<'a, Option<Duration>> {
        // The status and the provider's `Retry-After`, read only where retry decides.
        let o = o.map(|r| {
            (
                r.status().as_u16(),
                crate::policy::provider_hints::retry_after(r.headers()),
            )
        });
        Box::pin(async move {
            let wait = self.0.again(x, o).await;
            if wait.is_some() {
                x.locals.get_or_default::<Tries>().retries += 1;
            }
            wait
        })
    }

    fn resend_lost(&self) -> bool {
        // The request may have reached the provider: retry decides, counting the attempt
        // through its breaker and budget.
        false
    }

    /// Tells the client what retry did, on tollgate's own error too.
    fn answer(&self, x: &Exchange, error: ProxyError) -> ProxyError {
        match x.locals.get::<Tries>() {
            Some(t) if t.retries > 0 || t.declined => {
                ProxyError::Retried(Box::new(crate::error::Retried {
                    error,
                    retries: t.retries,
                    declined: t.declined,
                }))
            }
            _ => error,
        }
    }
}

impl Remedy for RetryStage {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        let a = &self.0.actions;
        Some(Box::pin(std::future::ready(serde_json::json!({
            "retried": a.get(Action::Retried),
            "budget_exhausted": a.get(Action::BudgetExhausted),
        }))))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            let r = &self.0;
            r.count_request().await;
            if let Some(d) = r.spec.deadline {
                x.locals.insert(Deadline(tokio::time::Instant::now() + d));
            }
            // A body over the cap is sent once; a smaller one is kept for replay.
            let replayable = x.buffer(r.spec.max_body).await?.is_some();
            x.locals.get_or_default::<Tries>().replayable = replayable;
            Ok(Flow::Continue)
        })
    }

    fn response(&self, x: &mut Exchange, mut resp: Response<Body>) -> Response<Body> {
        let tries = x.locals.get::<Tries>().copied().unwrap_or_default();
        if tries.retries > 0 {
            resp.headers_mut()
                .insert(X_TOLLGATE_RETRIES, tries.retries.into());
        }
        if tries.declined && self.0.spec.statuses.contains(resp.status().as_u16()) {
            resp.headers_mut()
                .insert(X_SHOULD_RETRY, http::HeaderValue::from_static("false"));
        }
        resp
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawRetry {
    /// Attempts in all, the first included.
    pub attempts: Int<2, 20>,
    /// Backoff before retry n: a random time between 0 and min(`max_delay`, `base_delay` × 2^n) ("full jitter").
    pub base_delay: Dur<0, HOUR_MS>,
    /// Cap of one backoff. A retryable response's `Retry-After` is honoured when it is within this cap; a longer one ends the retries and the response is relayed (unless another `credentials` account is free: the retry goes there at once). A `Retry-After` too large for any clock counts as "very long", never as none.
    pub max_delay: Dur<1, HOUR_MS>,
    /// Response statuses retried.
    pub statuses: Vec<String>,
    /// Retry DNS, connect and TLS failures, and resets of a connection before the response.
    pub connect_errors: bool,
    /// Retry a response-head timeout.
    pub timeouts: bool,
    /// Methods retried besides the idempotent ones (GET, HEAD, OPTIONS, TRACE, PUT, DELETE). A request with `Idempotency-Key` is always retryable.
    pub methods: Vec<String>,
    /// Request bodies up to this are kept for replay; a larger body is sent once and not retried.
    pub max_body: Size<0, { 64 << 20 }>,
    /// Retries allowed, as a share of requests over `budget_window`…
    pub budget: Percent,
    /// …a rolling window…
    pub budget_window: Dur<SEC_MS, HOUR_MS>,
    /// …plus this many retries per window in any case, so low traffic can retry. When the budget is spent, failures are relayed at once: retries never multiply an outage.
    pub budget_min: Int<0, 1_000_000>,
    /// All attempts and backoffs end within this.
    pub deadline: Option<Dur<1, DAY_MS>>,
}

impl Default for RawRetry {
    fn default() -> Self {
        Self {
            attempts: Int::of(3),
            base_delay: Dur::ms(100),
            max_delay: Dur::secs(5),
            statuses: vec!["502-504".into()],
            connect_errors: true,
            timeouts: true,
            methods: Vec::new(),
            max_body: Size::bytes(1 << 20),
            budget: Percent::of(20.0),
            budget_window: Dur::secs(10),
            budget_min: Int::of(10),
            deadline: None,
        }
    }
}

pub fn retry(e: &mut Errors, path: &str, r: &RawRetry) -> RetrySpec {
    let at = |f: &str| format!("{path}.{f}");
    RetrySpec {
        attempts: r.attempts.u32(),
        base_delay: r.base_delay.get(),
        max_delay: r.max_delay.get(),
        statuses: e
            .check(&at("statuses"), Statuses::parse(&r.statuses))
            .unwrap_or_default(),
        connect_errors: r.connect_errors,
        timeouts: r.timeouts,
        methods: e.methods(&at("methods"), &r.methods),
        max_body: r.max_body.get(),
        budget: r.budget.fraction(),
        budget_window: r.budget_window.get(),
        budget_min: r.budget_min.get(),
        deadline: r.deadline.as_ref().map(Dur::get),
    }
}
