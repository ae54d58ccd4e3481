//! Header guard: refuses a request that lacks a header the provider (or the team)
//! requires — an `x-app-id` that attributes usage, a `traceparent`, an API version — with
//! 400 `bad_request` naming the header, before it reaches a cache, a limit or the
//! provider. It checks the request as the client sent it (it runs before the request
//! transforms), so a header a policy adds does not satisfy it.

use crate::error::ProxyError;
use crate::policy::actions::Actions;
use crate::policy::chain::{Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use http::HeaderName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Refuse requests lacking a required header (400 `bad_request`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderGuard {
    /// Request headers that must be present with a non-empty value (`x-app-id`).
    pub require: Vec<String>,
}

/// The headers required, validated.
#[derive(Debug, Clone)]
pub struct HeaderGuardSpec {
    pub require: Vec<HeaderName>,
}

crate::policy::actions::actions! {
    /// What a header guard did with a request.
    pub enum Action for "header_guard" {
        Allowed = "allowed",
        Rejected = "rejected",
    }
}

/// `header_guard:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "header_guard";
    const PHASES: Phases = Phases {
        request: "refuses a request lacking a required header (400)",
        attempt: "",
        response: "",
    };
    const EXAMPLE: &'static str = "{require: [x-app-id]}";
    type Raw = RawHeaderGuard;
    type Spec = HeaderGuardSpec;
    type Action = Action;
    type Metrics = ();

    fn validate(raw: &RawHeaderGuard, cx: &mut Check<'_>) -> Option<HeaderGuardSpec> {
        if raw.require.is_empty() {
            cx.errors.fail(
                &cx.at("require"),
                "list at least one header, e.g. `require: [x-app-id]`".into(),
            );
            return None;
        }
        let require: Vec<_> = raw
            .require
            .iter()
            .enumerate()
            .filter_map(|(i, h)| cx.errors.header_name(&cx.at(&format!("require[{i}]")), h))
            .collect();
        (require.len() == raw.require.len()).then_some(HeaderGuardSpec { require })
    }

    fn build(spec: &HeaderGuardSpec, b: &mut Build<'_>) -> Built {
        Built::from(Arc::new(HeaderGuard {
            spec: spec.clone(),
            actions: b.actions(),
        }))
    }
}

pub struct HeaderGuard {
    spec: HeaderGuardSpec,
    actions: Actions<Action>,
}

impl Remedy for HeaderGuard {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        let missing = self.spec.require.iter().find(|h| {
            x.parts
                .headers
                .get_all(*h)
                .iter()
                .all(|v| v.as_bytes().iter().all(u8::is_ascii_whitespace))
        });
        let result = match missing {
            None => {
                self.actions.record(x, Action::Allowed);
                Ok(Flow::Continue)
            }
            Some(h) => {
                self.actions.record(x, Action::Rejected);
                Err(ProxyError::BadRequest(format!(
                    "policy `{}` requires the request header `{h}`; send it with a value",
                    x.policy()
                )))
            }
        };
        Phase::Now(result)
    }
}
