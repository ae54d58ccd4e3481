//! Token limit: tokens (prompt and output) per window per consumer group, like the
//! request rate limit, for LLM calls (crate::llm). Admission reserves the request's
//! estimate (its prompt's tokens and its output cap); the end of the call settles the
//! count to the answer's usage (policy::reserve). Over the limit: 429 `token_limited`
//! with `Retry-After` to the next window.

use crate::error::Refusal;
use crate::fields::Errors;
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::clock;
use crate::policy::compile::Build;
use crate::policy::config::RawRef;
use crate::policy::kind::{Check, Phases, RemedyKind, Shared, resolve};
use crate::policy::limit::GroupFields;
use crate::policy::limit::LimitSpec;
use crate::policy::remedies::llm;
use crate::policy::reserve;
use crate::policy::spec::Resource;
use crate::policy::window::window;
use http::{Response, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct TokenLimit {
    resource: Arc<reserve::Amounts>,
    /// How calls are read when the policy has no `llm:` of its own.
    settings: llm::Settings,
    actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What a token limit did with a request.
    pub enum Action for "token_limit" {
        Allowed = "allowed",
        Rejected = "rejected",
    }
}

/// Over a token limit.
pub static TOKEN_LIMITED: Refusal = Refusal::refusal(
    "token_limited",
    StatusCode::TOO_MANY_REQUESTS,
    "a token limit reached: the request's estimate (prompt and output cap) does not fit what is left of the window (`Retry-After` to the next window)",
);

fn tokens(n: u64) -> String {
    crate::error::count_of(n, "token")
}

/// `token_limit:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "token_limit";
    const PHASES: Phases = Phases {
        request: "reserves the call's estimated tokens, or refuses",
        attempt: "",
        response: "settles the reservation to the answer's usage when the call ends",
    };
    const EXAMPLE: &'static str = "openai-tpm";
    const REFUSALS: &'static [&'static Refusal] = &[&TOKEN_LIMITED];
    type Raw = RawRef<RawTokenLimit>;
    type Spec = Resource<TokenLimitSpec>;
    type Action = Action;
    type Metrics = reserve::Families;

    fn register(f: &mut crate::metrics::Families<'_>) -> Self::Metrics {
        reserve::Families::register(f, "token_limit", "token limit")
    }

    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec> {
        resolve::<Self>(raw, cx)
    }

    fn build(r: &Self::Spec, b: &mut Build<'_>) -> Built {
        let limit = (&r.spec.limit, r.spec.shared);
        let gauges = b.metrics_of::<Kind>();
        let resource = reserve::resource(
            b,
            ("tokens", "token limit"),
            &r.name,
            &r.spec,
            limit,
            &gauges,
        );
        Built::from(Arc::new(TokenLimit {
            resource,
            settings: llm::Settings {
                keep_prompt: b.counts_prompts,
                prompt_strings: llm::PromptStrings::of(b.metrics),
                ..llm::Settings::default()
            },
            actions: b.actions(),
        }))
    }
}

impl Shared for Kind {
    type Def = RawTokenLimit;
    type DefSpec = TokenLimitSpec;
    const DECLARED_EXAMPLE: &'static str =
        "{openai-tpm: {limit: 200000, window: minute, group_by: x-consumer, groups: {batch: 25%}}}";

    fn define(
        e: &mut Errors,
        path: &str,
        def: &RawTokenLimit,
        _section: &BTreeMap<String, RawTokenLimit>,
    ) -> TokenLimitSpec {
        let fields = GroupFields {
            group_by: &def.group_by,
            groups: &def.groups,
            default_group: &def.default_group,
            max_groups: def.max_groups.get(),
        };
        let window = window(e, &format!("{path}.window"), &def.window);
        TokenLimitSpec {
            limit: reserve::spec(e, path, def.limit.get(), window, fields),
            shared: def.shared,
        }
    }
}

impl Remedy for TokenLimit {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let r = &self.resource;
            let (used, end) = r.limit.used().await;
            serde_json::json!({
                "name": &*r.name,
                "limit_tokens": r.limit.spec.limit,
                "used_tokens": used,
                "remaining_tokens": r.limit.spec.limit.saturating_sub(used),
                "resets_in_s": end.saturating_sub(clock::now_ms()).div_ceil(1000),
            })
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            if !llm::call(x, &self.settings).await? {
                return Ok(Flow::Continue);
            }
            llm::count_prompt(x, &self.settings);
            let n = x
                .locals
                .get::<crate::llm::Call>()
                .map_or(0, |c| c.reserve().total());
            let admission = reserve::Admission {
                kind: &TOKEN_LIMITED,
                unit: tokens,
                actions: &self.actions,
                allowed: Action::Allowed,
                rejected: Action::Rejected,
            };
            reserve::admit(x, Kind::NAME, &self.resource, n, admission).await
        })
    }

    fn response(
        &self,
        x: &mut Exchange,
        resp: Response<crate::body::Body>,
    ) -> Response<crate::body::Body> {
        llm::meter(x, resp)
    }

    fn end(&self, x: &Exchange) {
        if let Some(call) = x.locals.get::<crate::llm::Call>() {
            reserve::settle(x, Kind::NAME, call.meter.read().usage().total());
        }
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, PartialEq)]
pub struct TokenLimitSpec {
    pub limit: LimitSpec,
    /// Counted on the shared store (`store.backend: redis`) rather than this process's.
    pub shared: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTokenLimit {
    /// Tokens (prompt and output, as the answers' usage counts them) per window.
    pub limit: crate::fields::units::Int<1, { crate::fields::MAX_COUNT }>,
    /// `second`, `minute`, `hour` or `day`: fixed windows aligned to the clock (UTC).
    pub window: String,
    /// Count per consumer: the value of this request header names the group.
    pub group_by: Option<String>,
    /// A share of `limit` per group (`{batch: "25%"}`); shares add up to 100% at most. A request must fit its group's share **and** the whole limit.
    #[serde(default)]
    pub groups: BTreeMap<String, crate::fields::units::Percent>,
    /// Groups not listed and requests without the header: `allow` (only the whole limit applies), `block` (429), or a share each (`"10%"`).
    #[serde(default = "allow")]
    pub default_group: String,
    /// Distinct unlisted groups counted per window (1 to 1000000); further ones share one group, `other`. A group is stored under a digest of the header's value.
    #[serde(default = "max_groups")]
    pub max_groups: crate::fields::units::Int<1, 1_000_000>,
    /// With `store.backend: redis`: `false` keeps this limit in each replica's own memory; `true` counts it once for all replicas.
    #[serde(default = "crate::fields::yes")]
    pub shared: bool,
}

pub(crate) fn allow() -> String {
    "allow".into()
}

pub(crate) fn max_groups() -> crate::fields::units::Int<1, 1_000_000> {
    crate::fields::units::Int::of(10_000)
}
