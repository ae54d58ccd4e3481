//! Provider throttling: when the provider answers 429 or 503 with `Retry-After`
//! (seconds or HTTP-date), or says its budget is spent (`RateLimit-Remaining: 0` or
//! `X-RateLimit-Remaining: 0` with a reset), the policy stops sending until then: its
//! requests are refused at once (429 `provider_throttled` with the remaining
//! `Retry-After`) or wait for the reset when it is near enough. Retry attempts are
//! checked too, so retries never hammer a provider that asked for a pause.

use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::Errors;
use crate::fields::units::{DAY_MS, Dur, HOUR_MS, SEC_MS};
use crate::policy::actions::Actions;
use crate::policy::chain::{
    AttemptRemedy, BoxFuture, Built, Exchange, Flow, Hook, Outcome, Phase, Remedy,
};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use crate::policy::store::{Key, Store};
use crate::policy::{clock, provider_hints};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleSpec {
    /// Wait (up to `max_wait`) instead of refusing.
    pub wait: bool,
    pub max_wait: Duration,
    pub statuses: Vec<u16>,
    pub max_throttle: Duration,
}

pub struct Throttle {
    pub spec: ThrottleSpec,
    pub store: Arc<dyn Store>,
    pub key: Key,
    pub actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What provider throttling did.
    pub enum Action for "provider_throttling" {
        Throttled = "throttled",
        Rejected = "rejected",
        Waited = "waited",
    }
}

impl Throttle {
    /// Refuses (or waits) while throttled.
    async fn check(&self, x: &mut Exchange, may_wait: bool) -> Result<(), ProxyError> {
        let until = self.store.deadline(&self.key).await.unwrap_or(0);
        let now = clock::now_ms();
        if until <= now {
            return Ok(());
        }
        let left = Duration::from_millis(until - now);
        let fits =
            super::timeouts::deadline(x).is_none_or(|d| tokio::time::Instant::now() + left <= d);
        if may_wait && self.spec.wait && left <= self.spec.max_wait && fits {
            self.actions.record(x, Action::Waited);
            tokio::time::sleep(left).await;
            return Ok(());
        }
        self.actions.record(x, Action::Rejected);
        let secs = clock::secs_until(until);
        Err(ProxyError::Rejected(Rejection {
            kind: &PROVIDER_THROTTLED,
            message: format!(
                "policy `{}`: the provider asked for a pause; sending again in {secs}s",
                x.policy()
            ),
            retry_after: Some(secs),
            rate: None,
            permanent: false,
        }))
    }

    /// What pause a response asks for.
    pub fn pause(&self, head: &http::response::Parts) -> Option<Duration> {
        let asked = if self.spec.statuses.contains(&head.status.as_u16()) {
            provider_hints::retry_after(&head.headers)
        } else {
            None
        };
        asked
            .or_else(|| provider_hints::exhausted_until(&head.headers))
            .filter(|d| !d.is_zero())
            .map(|d| d.min(self.spec.max_throttle))
    }

    /// The throttle's end (unix ms; 0 when not throttled), for `GET /policies`.
    pub async fn until(&self) -> u64 {
        let until = self.store.deadline(&self.key).await.unwrap_or(0);
        if until > clock::now_ms() { until } else { 0 }
    }
}

/// `provider_throttling:` in a policy.
pub struct Kind;

/// The provider asked for a pause.
pub static PROVIDER_THROTTLED: Refusal = Refusal::refusal(
    "provider_throttled",
    http::StatusCode::TOO_MANY_REQUESTS,
    "the provider asked for a pause (`Retry-After`, `RateLimit-Remaining: 0`)",
);

impl RemedyKind for Kind {
    const NAME: &'static str = "provider_throttling";
    const PHASES: Phases = Phases {
        request: "refuses (or waits) while the provider asked for a pause",
        attempt: "refuses a retry during a pause; after each, reads `Retry-After` / `RateLimit-Remaining: 0`",
        response: "",
    };
    const EXAMPLE: &'static str = "{action: reject}";
    const REFUSALS: &'static [&'static Refusal] = &[&PROVIDER_THROTTLED];
    type Raw = RawThrottle;
    type Spec = ThrottleSpec;
    type Action = Action;
    type Metrics = ();

    fn validate(raw: &RawThrottle, cx: &mut Check<'_>) -> Option<ThrottleSpec> {
        Some(throttle(cx.errors, &cx.path, raw))
    }

    fn build(spec: &ThrottleSpec, b: &mut Build<'_>) -> Built {
        // The pause lives in the store under the definition's key: it outlives reloads
        // that keep the definition.
        let id = b.id("throttle", b.policy, spec);
        Built::with_attempts(Arc::new(Throttle {
            spec: spec.clone(),
            store: b.store.clone(),
            key: Key::new(&Arc::from(id.as_str()), &Arc::from("until"), 0),
            actions: b.actions(),
        }))
    }
}

impl Remedy for Throttle {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let until = self.until().await;
            serde_json::json!({
                "throttled": until > 0,
                "retry_in_s": (until > 0).then(|| clock::secs_until(until)),
            })
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        // No pause in this process's memory (most requests): decided at once.
        if !self.store.shared() {
            let until = futures_util::FutureExt::now_or_never(self.store.deadline(&self.key));
            if until.is_some_and(|u| u.unwrap_or(0) <= clock::now_ms()) {
                return Phase::next();
            }
        }
        Phase::wait(async move {
            self.check(x, true).await?;
            Ok(Flow::Continue)
        })
    }
}

impl AttemptRemedy for Throttle {
    /// Refused while the provider asked for a pause.
    fn before_retry<'a>(&'a self, x: &'a mut Exchange) -> Hook<'a, Result<(), ProxyError>> {
        Hook::wait(self.check(x, false))
    }

    /// Starts a pause when the provider asked for one; an answer that asks none (most)
    /// is decided at once.
    fn after<'a>(&'a self, x: &'a mut Exchange, o: Outcome<'a>) -> Hook<'a, ()> {
        let Some(pause) = o.ok().and_then(|head| self.pause(head)) else {
            return Hook::Now(());
        };
        self.actions.record(x, Action::Throttled);
        let until = clock::now_ms().saturating_add(pause.as_millis() as u64);
        Hook::wait(async move {
            let _ = self.store.raise(&self.key, until, until).await;
        })
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawThrottle {
    /// `reject`: refuse at once with **429 `provider_throttled`** and the remaining `Retry-After`. `wait`: hold the request until the pause ends when that is within `max_wait` (and the `total` timeout), else refuse.
    pub action: String,
    /// Longest a request is held with `action: wait`; a longer pause refuses it at once.
    pub max_wait: Dur<1, HOUR_MS>,
    /// Responses whose `Retry-After` (seconds or HTTP-date) starts a pause.
    pub statuses: Vec<u16>,
    /// Longest pause honoured.
    pub max_throttle: Dur<SEC_MS, DAY_MS>,
}

impl Default for RawThrottle {
    fn default() -> Self {
        Self {
            action: "reject".into(),
            max_wait: Dur::secs(30),
            statuses: vec![429, 503],
            max_throttle: Dur::secs(3600),
        }
    }
}

pub fn throttle(e: &mut Errors, path: &str, t: &RawThrottle) -> ThrottleSpec {
    let wait = match t.action.as_str() {
        "reject" => false,
        "wait" => true,
        other => {
            e.fail(
                &format!("{path}.action"),
                format!("`{other}`: write `reject` or `wait`"),
            );
            false
        }
    };
    ThrottleSpec {
        wait,
        max_wait: t.max_wait.get(),
        statuses: t.statuses.clone(),
        max_throttle: t.max_throttle.get(),
    }
}
