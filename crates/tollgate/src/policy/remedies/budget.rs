//! Budget: money per day or month per consumer group, for LLM calls priced by the
//! policy's table (crate::llm::prices). Admission reserves what the request's estimate
//! would cost (its prompt's tokens and its output cap); the end of the call settles the
//! count to what its usage cost (policy::reserve). Spent: 429 `budget_exceeded` with
//! `Retry-After` to the renewal. A model the table does not price is refused (403
//! `model_unpriced`) unless `unpriced: allow`.

use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::Errors;
use crate::llm::Call;
use crate::llm::prices::{Prices, cost_nanos, dollars};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::clock;
use crate::policy::compile::Build;
use crate::policy::config::RawRef;
use crate::policy::kind::{Check, Phases, RemedyKind, Shared, resolve};
use crate::policy::limit::GroupFields;
use crate::policy::limit::LimitSpec;
use crate::policy::remedies::llm;
use crate::policy::remedies::quota::period;
use crate::policy::remedies::token_limit::{allow, max_groups};
use crate::policy::reserve;
use crate::policy::spec::Resource;
use http::{Response, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct Budget {
    /// Counted in nano-dollars.
    resource: Arc<reserve::Amounts>,
    block_unpriced: bool,
    settings: llm::Settings,
    actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What a budget did with a request.
    pub enum Action for "budget" {
        Allowed = "allowed",
        Rejected = "rejected",
        Unpriced = "unpriced",
    }
}

/// A budget spent.
pub static BUDGET_EXCEEDED: Refusal = Refusal::refusal(
    "budget_exceeded",
    StatusCode::TOO_MANY_REQUESTS,
    "a money budget spent: the request's estimated cost does not fit what is left (`Retry-After` to the renewal)",
);

/// A call to a model no price is known for, under a budget.
pub static MODEL_UNPRICED: Refusal = Refusal::refusal(
    "model_unpriced",
    StatusCode::FORBIDDEN,
    "a budget cannot price the requested model: add it under the policy's `llm.prices` (or set the budget's `unpriced: allow`)",
);

/// `budget:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "budget";
    const PHASES: Phases = Phases {
        request: "reserves the call's estimated cost, or refuses",
        attempt: "",
        response: "settles the reservation to the answer's cost when the call ends",
    };
    const EXAMPLE: &'static str = "team-daily";
    const REFUSALS: &'static [&'static Refusal] = &[&BUDGET_EXCEEDED, &MODEL_UNPRICED];
    type Raw = RawRef<RawBudget>;
    type Spec = Resource<BudgetSpec>;
    type Action = Action;
    type Metrics = reserve::Families;

    fn register(f: &mut crate::metrics::Families<'_>) -> Self::Metrics {
        reserve::Families::register(f, "budget", "budget")
    }

    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec> {
        resolve::<Self>(raw, cx)
    }

    fn build(r: &Self::Spec, b: &mut Build<'_>) -> Built {
        let limit = (&r.spec.limit, r.spec.shared);
        let gauges = b.metrics_of::<Kind>();
        let resource = reserve::resource(b, ("budget", "budget"), &r.name, &r.spec, limit, &gauges);
        Built::from(Arc::new(Budget {
            resource,
            block_unpriced: !r.spec.allow_unpriced,
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
    type Def = RawBudget;
    type DefSpec = BudgetSpec;
    const DECLARED_EXAMPLE: &'static str =
        "{team-daily: {limit: \"$50\", per: day, group_by: x-team, default_group: \"20%\"}}";

    fn define(
        e: &mut Errors,
        path: &str,
        def: &RawBudget,
        _section: &BTreeMap<String, RawBudget>,
    ) -> BudgetSpec {
        let limit = match money(&def.limit) {
            Some(n) if n > 0 => n,
            _ => {
                e.fail(
                    &format!("{path}.limit"),
                    format!(
                        "`{}`: write an amount of US dollars above 0 and at most $1000000000 (a billion), e.g. \"$50\" or 0.5",
                        def.limit
                    ),
                );
                1
            }
        };
        let window = period(e, path, &def.per, def.renews_on.get() as i8, &def.time_zone);
        let unpriced = match def.unpriced.as_str() {
            "allow" => true,
            "block" => false,
            other => {
                e.fail(
                    &format!("{path}.unpriced"),
                    format!("`{other}`: write `block` or `allow`"),
                );
                false
            }
        };
        let fields = GroupFields {
            group_by: &def.group_by,
            groups: &def.groups,
            default_group: &def.default_group,
            max_groups: def.max_groups.get(),
        };
        BudgetSpec {
            limit: reserve::spec(e, path, limit, window, fields),
            shared: def.shared,
            allow_unpriced: unpriced,
        }
    }
}

impl Remedy for Budget {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let r = &self.resource;
            let (used, end) = r.limit.used().await;
            serde_json::json!({
                "name": &*r.name,
                "limit_usd": dollars(r.limit.spec.limit),
                "spent_usd": dollars(used),
                "remaining_usd": dollars(r.limit.spec.limit.saturating_sub(used)),
                "renews_in_s": end.saturating_sub(clock::now_ms()).div_ceil(1000),
            })
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            if !llm::call(x, &self.settings).await? {
                return Ok(Flow::Continue);
            }
            llm::count_prompt(x, &self.settings);
            let r = &self.resource;
            let (estimate, model) = match x.locals.get::<Call>() {
                Some(c) => {
                    let price = c
                        .model
                        .as_deref()
                        .and_then(|m| Prices::remembered(&c.prices, m));
                    (price.map(|p| cost_nanos(&c.reserve(), &p)), c.model.clone())
                }
                None => return Ok(Flow::Continue),
            };
            // A request whose model is not known on admission (its body larger than
            // `llm.max_body`) reserves nothing and is charged when it ends.
            let estimate = if model.is_none() { Some(0) } else { estimate };
            let Some(n) = estimate else {
                self.actions.record(x, Action::Unpriced);
                let model = model.as_deref().unwrap_or("(none)").to_owned();
                if !self.block_unpriced {
                    return Ok(Flow::Continue);
                }
                return Err(ProxyError::Rejected(Rejection {
                    kind: &MODEL_UNPRICED,
                    message: format!(
                        "{}: no price is known for model `{model}`; add it under the policy's `llm.prices` (USD per million tokens), or set `unpriced: allow`",
                        r.what
                    ),
                    retry_after: None,
                    rate: None,
                    // The same model stays unpriced until the config changes.
                    permanent: true,
                }));
            };
            let admission = reserve::Admission {
                kind: &BUDGET_EXCEEDED,
                unit: dollars,
                actions: &self.actions,
                allowed: Action::Allowed,
                rejected: Action::Rejected,
            };
            reserve::admit(x, Kind::NAME, r, n, admission).await
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
        if let Some(call) = x.locals.get::<Call>() {
            // Priced as diagnosis prices it: the answer's model, else the one asked for.
            let spent = call.meter.read().cost_nanos().unwrap_or(0);
            reserve::settle(x, Kind::NAME, spent);
        }
    }
}

/// US dollars as written (`"$50"`, `"0.25"`, `12`), in nano-dollars.
fn money(v: &serde_json::Value) -> Option<u64> {
    let f = match v {
        serde_json::Value::Number(n) => n.as_f64()?,
        serde_json::Value::String(s) => {
            let s = s.trim();
            let s = s.strip_prefix('$').unwrap_or(s);
            let s = s.strip_suffix("USD").unwrap_or(s).trim();
            s.parse::<f64>().ok()?
        }
        _ => return None,
    };
    (f.is_finite() && (0.0..=MAX_USD).contains(&f)).then(|| (f * 1e9).round() as u64)
}

/// The largest budget, in US dollars: counted in nano-dollars, 10^18, well inside the
/// signed 64-bit counters Redis keeps (9.2 × 10^18), with room for the calls in flight.
pub const MAX_USD: f64 = 1e9;

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSpec {
    pub limit: LimitSpec,
    pub shared: bool,
    pub allow_unpriced: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    /// US dollars per period: `"$50"`, `"0.50"` or a number.
    #[schemars(with = "MoneySchema")]
    pub limit: serde_json::Value,
    /// `day` or `month`.
    #[serde(default = "day")]
    pub per: String,
    /// For `month`: the day of the month the budget renews, at midnight.
    #[serde(default = "one")]
    pub renews_on: crate::fields::units::Int<1, 28>,
    /// IANA name (`America/New_York`); periods start at midnight there.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// Count per consumer: the value of this request header names the group.
    pub group_by: Option<String>,
    /// A share of `limit` per group (`{research: "50%"}`); shares add up to 100% at most. A request must fit its group's share **and** the whole budget.
    #[serde(default)]
    pub groups: BTreeMap<String, crate::fields::units::Percent>,
    /// Groups not listed and requests without the header: `allow` (only the whole budget applies), `block` (429), or a share each (`"10%"`: each consumer its own tenth).
    #[serde(default = "allow")]
    pub default_group: String,
    /// Distinct unlisted groups counted per period; further ones share one group, `other`.
    #[serde(default = "max_groups")]
    pub max_groups: crate::fields::units::Int<1, 1_000_000>,
    /// A model with no price in the table: `block` (403 `model_unpriced`) or `allow` (let through, counted as costing nothing, and as the action `unpriced`).
    #[serde(default = "block")]
    pub unpriced: String,
    /// With `store.backend: redis`: `false` keeps this budget in each replica's own memory; `true` counts it once for all replicas.
    #[serde(default = "crate::fields::yes")]
    pub shared: bool,
}

/// Money as the schema shows it: a string such as `"$50"`, or a number of dollars.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum MoneySchema {
    Text(String),
    Dollars(f64),
}

fn day() -> String {
    "day".into()
}

fn one() -> crate::fields::units::Int<1, 28> {
    crate::fields::units::Int::of(1)
}

fn utc() -> String {
    "UTC".into()
}

fn block() -> String {
    "block".into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn money_is_read_in_nano_dollars() {
        use serde_json::json;
        assert_eq!(super::money(&json!("$50")), Some(50_000_000_000));
        assert_eq!(super::money(&json!("0.25 USD")), Some(250_000_000));
        assert_eq!(super::money(&json!(12)), Some(12_000_000_000));
        assert_eq!(super::money(&json!("fifty")), None);
        assert_eq!(super::money(&json!(-1)), None);
        assert_eq!(
            super::money(&json!("$1000000000")),
            Some(1_000_000_000_000_000_000),
            "the bound the message states is taken"
        );
        assert_eq!(super::money(&json!(1e9 + 1.0)), None);
    }
}
