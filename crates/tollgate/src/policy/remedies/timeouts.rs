//! Per-policy timeouts: `connect` and `response` (per attempt) override the `upstream`
//! ones (the engine passes them with each attempt, [`crate::upstream::AttemptSettings`]);
//! `total` frames the whole exchange (the engine enforces it, queue waits, attempts,
//! backoffs and the response body included).

use crate::error::ProxyError;
use crate::fields::units::{DAY_MS, Dur, HOUR_MS};
use crate::policy::chain::{BoxFuture, Exchange, Flow, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub connect: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Option<Duration>,
}

/// `timeouts:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "timeouts";
    const PHASES: Phases = Phases {
        request: "sets the policy's connect and response-head timeouts; `total` frames everything below",
        attempt: "",
        response: "cuts the body at `total`",
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
        })
    }

    fn build(spec: &Timeouts, _: &mut Build<'_>) -> Arc<dyn Remedy> {
        Arc::new(spec.clone())
    }
}

impl Remedy for Timeouts {
    fn total(&self) -> Option<Duration> {
        self.total
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        x.connect_timeout = self.connect;
        x.response_timeout = self.response;
        Box::pin(std::future::ready(Ok(Flow::Continue)))
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
}
