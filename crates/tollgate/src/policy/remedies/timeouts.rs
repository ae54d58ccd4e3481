//! Per-policy timeouts: `connect` and `response` (per attempt) override the `upstream`
//! ones (the engine passes them with each attempt, [`crate::upstream::AttemptSettings`]);
//! `total` frames the whole exchange (the engine enforces it, queue waits, attempts,
//! backoffs and the response body included); `idle` cuts a response body that sends no
//! byte for that long (a stalled stream: SSE, an MCP `subscriptions/listen`).

use crate::body::{Body, BoxError, Watch, Watched};
use crate::error::ProxyError;
use crate::fields::units::{DAY_MS, Dur, HOUR_MS};
use crate::policy::chain::{Attempt, AttemptRemedy, Built, Exchange, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;
use tokio::time::Instant;
use tokio::time::Sleep;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub connect: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Option<Duration>,
    pub idle: Option<Duration>,
}

/// `timeouts:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "timeouts";
    const PHASES: Phases = Phases {
        request: "`total` frames everything below (queue waits, attempts, backoffs)",
        attempt: "sets the policy's connect and response-head timeouts on each attempt",
        response: "cuts the body at `total`, or after `idle` without a byte",
    };
    const EXAMPLE: &'static str = "{total: 2m}";
    type Raw = RawTimeouts;
    type Spec = Timeouts;
    type Action = crate::policy::kind::NoActions;
    type Metrics = ();

    fn validate(t: &RawTimeouts, _: &mut Check<'_>) -> Option<Timeouts> {
        Some(Timeouts {
            connect: t.connect.as_ref().map(Dur::get),
            response: t.response.as_ref().map(Dur::get),
            total: t.total.as_ref().map(Dur::get),
            idle: t.idle.as_ref().map(Dur::get),
        })
    }

    fn build(spec: &Timeouts, _: &mut Build<'_>) -> Built {
        Built {
            total: spec.total,
            ..Built::with_attempts(Arc::new(spec.clone()))
        }
    }
}

/// The end of the whole exchange (`total`), for the remedies whose waits it bounds
/// (queues, retry's backoffs).
#[derive(Debug, Clone, Copy)]
pub struct Total(pub Instant);

/// The end of the exchange `x`, when its policy's `timeouts.total` sets one.
pub fn deadline(x: &Exchange) -> Option<Instant> {
    x.locals.get::<Total>().map(|t| t.0)
}

impl Remedy for Timeouts {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        // The first stage: the engine's frame starts with it.
        if let Some(t) = self.total {
            x.locals.insert(Total(Instant::now() + t));
        }
        Phase::next()
    }

    fn response(&self, _x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        match self.idle {
            None => resp,
            Some(idle) => resp.map(|b| Watched::new(b, Idle::new(idle)).boxed_unsync()),
        }
    }
}

/// Ends a body with an error when no data frame came for `idle`.
struct Idle {
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Idle {
    fn new(idle: Duration) -> Self {
        Self {
            idle,
            sleep: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

impl Watch for Idle {
    fn interrupt(&mut self, cx: &mut Context<'_>) -> Option<BoxError> {
        self.sleep.as_mut().poll(cx).is_ready().then(|| {
            format!(
                "no byte of the answer for {:?} (the policy's timeouts.idle)",
                self.idle
            )
            .into()
        })
    }

    fn data(&mut self, _data: &Bytes) {
        self.sleep.as_mut().reset(Instant::now() + self.idle);
    }
}

impl AttemptRemedy for Timeouts {
    fn before(&self, _x: &mut Exchange, a: &mut Attempt) -> Result<(), ProxyError> {
        a.settings.connect_timeout = self.connect.or(a.settings.connect_timeout);
        if let Some(r) = self.response {
            a.settings.response_timeout = r;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawTimeouts {
    /// Resolve, connect and TLS, per attempt; absent: `upstream.connect_timeout`.
    pub connect: Option<Dur<1, HOUR_MS>>,
    /// From sending until the response head, per attempt; absent: `upstream.response_timeout`.
    pub response: Option<Dur<1, DAY_MS>>,
    /// The whole exchange: queue waits, attempts, backoffs and the response body. Before the head: **504 `upstream_timeout`**; during the body: the body is cut.
    pub total: Option<Dur<1, DAY_MS>>,
    /// The longest a response body may go without a byte (a stalled stream: SSE, an MCP `subscriptions/listen`): then it is cut. Absent: no limit.
    pub idle: Option<Dur<1, DAY_MS>>,
}
