//! Quotas: long windows (a day, or a calendar month renewing on a given day in a time
//! zone) and parent/child allocation (a child gets a share of its parent; a request must
//! fit both). Over quota: 429 `quota_exceeded` with `Retry-After` to the renewal.

use crate::body::Body;
use crate::error::{ProxyError, Refusal};
use crate::fields::Errors;
use crate::metrics::{Families, NameLabels};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::config::RawRef;
use crate::policy::kind::{Check, Phases, RemedyKind, Shared, resolve};
use crate::policy::limit::LimitSpec;
use crate::policy::limit::{Limit, OverLimit, Taken};
use crate::policy::limit::{keep_for_refund, refund, refund_on, refusal};
use crate::policy::spec::Resource;
use crate::policy::window::Window;
use http::Response;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct QuotaResource {
    pub name: Arc<str>,
    pub what: String,
    pub limit: Arc<Limit>,
    /// `tollgate_quota_remaining{quota}`, set as requests are counted.
    pub remaining: prometheus_client::metrics::gauge::Gauge,
}

pub struct Quota {
    pub resource: Arc<QuotaResource>,
    pub actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What a quota did with a request.
    pub enum Action for "quota" {
        Allowed = "allowed",
        Rejected = "rejected",
        Refunded = "refunded",
    }
}

/// A quota used up.
pub static QUOTA_EXCEEDED: Refusal = Refusal::refusal(
    "quota_exceeded",
    http::StatusCode::TOO_MANY_REQUESTS,
    "a quota used up (`Retry-After` to the renewal)",
);

/// `tollgate_quota_remaining`.
#[derive(Default)]
pub struct Metrics {
    remaining: Family<NameLabels, Gauge>,
}

/// `quota:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "quota";
    const PHASES: Phases = Phases {
        request: "counts (with its parent), or refuses",
        attempt: "",
        response: "gives the request back on a `refund_on` status",
    };
    const EXAMPLE: &'static str = "team";
    const REFUSALS: &'static [&'static Refusal] = &[&QUOTA_EXCEEDED];
    type Raw = RawRef<RawQuota>;
    type Spec = Resource<QuotaSpec>;
    type Action = Action;
    type Metrics = Metrics;

    fn register(f: &mut Families<'_>) -> Metrics {
        Metrics {
            remaining: f.add(
                "quota_remaining",
                "Requests left in a quota's current period, by quota name",
            ),
        }
    }

    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec> {
        resolve::<Self>(raw, cx)
    }

    fn build(r: &Self::Spec, b: &mut Build<'_>) -> Built {
        Built::from(Arc::new(Quota {
            resource: resource(b, r),
            actions: b.actions(),
        }))
    }
}

impl Shared for Kind {
    type Def = RawQuota;
    type DefSpec = QuotaSpec;
    const DECLARED_EXAMPLE: &'static str =
        "{org: {limit: 100000, per: month, refund_on: [304]}, team: {parent: org, share: 25%}}";

    fn define(
        e: &mut Errors,
        path: &str,
        def: &RawQuota,
        section: &BTreeMap<String, RawQuota>,
    ) -> QuotaSpec {
        quota(e, path, def, section, 0)
    }
}

/// The quota `r` (and its parents), shared by every policy naming it.
fn resource(b: &mut Build<'_>, r: &Resource<QuotaSpec>) -> Arc<QuotaResource> {
    let id = b.id("quota", &r.name, &r.spec);
    b.reuse(id.clone(), |b| {
        let parent = r.spec.parent.as_ref().map(|p| resource(b, p).limit.clone());
        QuotaResource {
            name: Arc::from(r.name.as_str()),
            what: format!("quota `{}`", r.name),
            limit: Arc::new(Limit::new(
                r.spec.limit.clone(),
                Arc::from(id.as_str()),
                parent,
                b.store_for(r.spec.shared),
            )),
            remaining: b
                .metrics_of::<Kind>()
                .remaining
                .get_or_create(&NameLabels {
                    name: r.name.clone(),
                })
                .clone(),
        }
    })
}

impl Quota {
    /// The take's outcome: counted (kept for `refund_on`), or refused.
    fn taken(&self, x: &mut Exchange, taken: Result<Taken, OverLimit>) -> Result<Flow, ProxyError> {
        let r = &self.resource;
        match taken {
            Ok(t) => {
                r.remaining.set(t.remaining as i64);
                self.actions.record(x, Action::Allowed);
                keep_for_refund(x, Kind::NAME, t.counted);
                Ok(Flow::Continue)
            }
            Err(refused) => {
                r.remaining.set(0);
                self.actions.record(x, Action::Rejected);
                Err(refusal(&QUOTA_EXCEEDED, &r.what, &refused))
            }
        }
    }
}

impl Remedy for Quota {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let q = &self.resource;
            let (used, end) = q.limit.used().await;
            serde_json::json!({
                "name": &*q.name,
                "limit": q.limit.spec.limit,
                "used": used,
                "remaining": q.limit.spec.limit.saturating_sub(used),
                "renews_in_s": end.saturating_sub(crate::policy::clock::now_ms()).div_ceil(1000),
                "parent": q.limit.parent.as_ref().map(|p| p.resource.to_string()),
            })
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        // A quota in this process's memory is decided at once.
        match self.resource.limit.take_now(&x.parts.headers) {
            Some(taken) => Phase::Now(self.taken(x, taken)),
            None => Phase::wait(async move {
                let taken = self.resource.limit.take(&x.parts.headers).await;
                self.taken(x, taken)
            }),
        }
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        if refund(x, Kind::NAME, &self.resource.limit, resp.status()) {
            self.actions.record(x, Action::Refunded);
        }
        resp
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, PartialEq)]
pub struct QuotaSpec {
    pub limit: LimitSpec,
    /// Counted on the shared store (`store.backend: redis`) rather than this process's.
    pub shared: bool,
    /// The declared quota this one takes a share of.
    pub parent: Option<Box<Resource<QuotaSpec>>>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawQuota {
    /// Requests per period; required unless the quota has a `parent`.
    pub limit: Option<crate::fields::units::Int<1, { crate::fields::MAX_COUNT }>>,
    /// `day` or `month`.
    #[serde(default = "day")]
    pub per: String,
    /// For `month`: the day of the month the quota renews, at midnight.
    #[serde(default = "one")]
    pub renews_on: crate::fields::units::Int<1, 28>,
    /// IANA name (`America/New_York`); periods start at midnight there, daylight saving included.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// A declared quota this one takes a share of (with `share`); the period is the parent's. A request must fit both, and counts in both.
    pub parent: Option<String>,
    /// This quota's share of the parent's limit (`"25%"`).
    pub share: Option<crate::fields::units::Percent>,
    /// Response statuses that give the request back, because the provider does not charge them (`[304]`). A child's refund gives back its parent's count too.
    #[serde(default)]
    pub refund_on: Vec<u16>,
    /// With `store.backend: redis`: `false` keeps this quota in each replica's own memory (a per-replica quota: each replica gets all of it); `true` counts it once for all replicas. No effect on the memory store.
    #[serde(default = "crate::fields::yes")]
    pub shared: bool,
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

pub fn quota(
    e: &mut Errors,
    path: &str,
    q: &RawQuota,
    declared: &BTreeMap<String, RawQuota>,
    depth: usize,
) -> QuotaSpec {
    let window = period(e, path, &q.per, q.renews_on.get() as i8, &q.time_zone);
    let parent = match (&q.parent, &q.share) {
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            e.fail(
                path,
                "a child quota needs both `parent: NAME` and `share: \"N%\"`".into(),
            );
            None
        }
        (Some(name), Some(share)) => match declared.get(name) {
            None => {
                e.fail(
                    &format!("{path}.parent"),
                    format!("no quota named `{name}` is declared under `quotas`"),
                );
                None
            }
            Some(_) if depth > 8 => {
                e.fail(
                    &format!("{path}.parent"),
                    "quota parents form a loop (or nest deeper than 8)".into(),
                );
                None
            }
            Some(raw) => {
                let f = share.fraction();
                let spec = quota(e, &format!("quotas.{name}"), raw, declared, depth + 1);
                Some((
                    f,
                    Box::new(Resource {
                        name: name.clone(),
                        declared: true,
                        spec,
                    }),
                ))
            }
        },
    };
    match parent {
        Some((f, p)) => {
            if q.limit.is_some() {
                e.fail(
                    &format!("{path}.limit"),
                    "a child quota's limit is its `share` of the parent's; remove `limit`".into(),
                );
            }
            QuotaSpec {
                limit: LimitSpec {
                    limit: ((p.spec.limit.limit as f64) * f).floor() as u64,
                    window: p.spec.limit.window.clone(),
                    groups: None,
                    refund_on: refund_on(e, path, &q.refund_on),
                },
                shared: q.shared,
                parent: Some(p),
            }
        }
        None => {
            let limit = match &q.limit {
                Some(n) => n.get(),
                None => {
                    e.fail(
                        &format!("{path}.limit"),
                        "write the requests allowed per period, e.g. `limit: 100000`".into(),
                    );
                    1
                }
            };
            QuotaSpec {
                limit: LimitSpec {
                    limit,
                    window,
                    groups: None,
                    refund_on: refund_on(e, path, &q.refund_on),
                },
                shared: q.shared,
                parent: None,
            }
        }
    }
}

/// A period as written (`per`, `renews_on`, `time_zone`): a day, or a calendar month
/// renewing on a given day, starting at midnight in the time zone (quotas, budgets).
pub fn period(e: &mut Errors, path: &str, per: &str, renews_on: i8, time_zone: &str) -> Window {
    let tz = match jiff::tz::TimeZone::get(time_zone.trim()) {
        Ok(tz) => tz,
        Err(_) => {
            e.fail(
                &format!("{path}.time_zone"),
                format!(
                    "`{}` is not a time zone; write an IANA name such as `Europe/Paris` or `UTC`",
                    time_zone
                ),
            );
            jiff::tz::TimeZone::UTC
        }
    };
    match per {
        "day" => Window::day(tz),
        "month" => Window::month(renews_on, tz),
        other => {
            e.fail(
                &format!("{path}.per"),
                format!("`{other}`: write `day` or `month`"),
            );
            Window::day(tz)
        }
    }
}
