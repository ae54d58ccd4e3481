//! Provider throttling: when the provider answers 429 or 503 with `Retry-After`
//! (seconds or HTTP-date), or says its budget is spent (`RateLimit-Remaining: 0` or
//! `X-RateLimit-Remaining: 0` with a reset), the policy stops sending until then: its
//! requests are refused at once (429 `provider_throttled` with the remaining
//! `Retry-After`) or wait for the reset when it is near enough. Retry attempts are
//! checked too, so retries never hammer a provider that asked for a pause.

use crate::error::{ProxyError, Reject, Rejection};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Exchange, Flow, Outcome, Remedy, Stage};
use crate::policy::store::{Key, Store};
use crate::policy::{clock, provider_hints};
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
        let fits = x
            .deadline
            .is_none_or(|d| tokio::time::Instant::now() + left <= d);
        if may_wait && self.spec.wait && left <= self.spec.max_wait && fits {
            self.actions.record(x, Action::Waited);
            tokio::time::sleep(left).await;
            return Ok(());
        }
        self.actions.record(x, Action::Rejected);
        let secs = clock::secs_until(until);
        Err(ProxyError::Rejected(Rejection {
            kind: Reject::ProviderThrottled,
            message: format!(
                "policy `{}`: the provider asked for a pause; sending again in {secs}s",
                x.policy()
            ),
            retry_after: Some(secs),
            rate: None,
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

impl Remedy for Throttle {
    fn stage(&self) -> Stage {
        Stage::ProviderThrottle
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            self.check(x, true).await?;
            Ok(Flow::Continue)
        })
    }

    fn attempts(&self) -> bool {
        true
    }

    fn before_retry<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<(), ProxyError>> {
        Box::pin(self.check(x, false))
    }

    fn after_attempt<'a>(&'a self, x: &'a mut Exchange, o: Outcome<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Ok(head) = o
                && let Some(pause) = self.pause(head)
            {
                self.actions.record(x, Action::Throttled);
                let until = clock::now_ms().saturating_add(pause.as_millis() as u64);
                let _ = self.store.raise(&self.key, until, until).await;
            }
        })
    }
}
