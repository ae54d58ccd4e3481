//! Circuit breaker: opens on consecutive failures, or on a failure ratio over a minimum
//! number of requests in a rolling window; stays open for `open_for` (503 `circuit_open`
//! with `Retry-After`); then half-open lets `half_open_probes` requests through: all
//! succeeding closes it, one failing opens it again. Every attempt passes through it
//! (retries included). Its state lives in the store, under keys of the breaker.

use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::Errors;
use crate::fields::units::{Dur, HOUR_MS, Int, Percent, SEC_MS};
use crate::metrics::{Families, NameLabels};
use crate::policy::actions::Actions;
use crate::policy::chain::{
    AttemptRemedy, BoxFuture, Built, Exchange, Flow, Hook, Outcome, Phase, Remedy,
};
use crate::policy::clock;
use crate::policy::compile::Build;
use crate::policy::config::RawRef;
use crate::policy::failure::{Failure, Statuses, classify};
use crate::policy::kind::{Check, Phases, RemedyKind, Shared, resolve};
use crate::policy::spec::Resource;
use crate::policy::store::{Key, Names, Store};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSpec {
    pub consecutive_failures: u32,
    /// Share of failures (0..=1) that opens it, if set.
    pub failure_ratio: Option<f64>,
    pub min_requests: u64,
    pub window: Duration,
    pub open_for: Duration,
    pub half_open_probes: u32,
    pub failure_statuses: Statuses,
    pub connect_errors: bool,
    pub timeouts: bool,
    /// Kept on the shared store (`store.backend: redis`) rather than this process's.
    pub shared: bool,
}

/// A declared (or inline) breaker, shared by the policies that refer to it.
pub struct BreakerResource {
    pub name: Arc<str>,
    pub spec: BreakerSpec,
    pub store: Arc<dyn Store>,
    pub resource: Arc<str>,
    /// `tollgate_breaker_state{breaker}`: 0 closed, 1 open, 2 half-open.
    pub gauge: prometheus_client::metrics::gauge::Gauge,
    /// Each part's name (`OPEN`, …), then the resource: a copy per worker.
    names: Names,
}

/// This request is one of a half-open breaker's probes (of the opening that ended at
/// this unix ms), not yet answered.
struct Probe(u64);

const OPEN: usize = 0;
const CLOSED_AT: usize = 1;
const CONSECUTIVE: usize = 2;
const PROBES: usize = 3;
const PROBES_OK: usize = 4;
const FAILED: usize = 5;
const TOTAL: usize = 6;
const RESOURCE: usize = 7;

/// How long a breaker's state outlives its last change (an opening, a failure): on Redis
/// every key it writes expires, so a renamed or redefined breaker (a new fingerprint)
/// leaves nothing behind for good. A breaker left half-open and unused for a day closes.
const KEEP_MS: u64 = 24 * 3_600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed,
    Open { until: u64 },
    HalfOpen { opened_until: u64 },
}

impl BreakerResource {
    pub fn new(
        name: Arc<str>,
        spec: BreakerSpec,
        resource: Arc<str>,
        store: Arc<dyn Store>,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> Self {
        let parts = [
            "open",
            "closed_at",
            "consecutive",
            "probes",
            "probes_ok",
            "failed",
            "total",
        ]
        .map(Arc::from);
        let names = Names::new(parts.into_iter().chain([resource.clone()]));
        Self {
            name,
            spec,
            store,
            resource,
            gauge,
            names,
        }
    }

    fn key(&self, part: usize, window: u64) -> Key {
        let n = self.names.get();
        Key::new(&n[RESOURCE], &n[part], window)
    }

    pub async fn state(&self) -> State {
        let until = self.store.deadline(&self.key(OPEN, 0)).await.unwrap_or(0);
        let now = clock::now_ms();
        if until > now {
            return State::Open { until };
        }
        if until > 0 {
            let closed_at = self
                .store
                .deadline(&self.key(CLOSED_AT, 0))
                .await
                .unwrap_or(0);
            if closed_at < until {
                return State::HalfOpen {
                    opened_until: until,
                };
            }
        }
        State::Closed
    }

    /// Lets the attempt through, or refuses it.
    async fn admit(&self, x: &mut Exchange, actions: &Actions<Action>) -> Result<(), ProxyError> {
        let refuse = |retry_after: u64, detail: &str| {
            ProxyError::Rejected(Rejection {
                kind: &CIRCUIT_OPEN,
                message: format!("circuit breaker `{}` is {detail}", self.name),
                retry_after: Some(retry_after),
                rate: None,
                permanent: false,
            })
        };
        match self.state().await {
            State::Closed => Ok(()),
            State::Open { until } => {
                self.gauge.set(1);
                actions.record(x, Action::Rejected);
                Err(refuse(clock::secs_until(until), "open"))
            }
            State::HalfOpen { opened_until } => {
                self.gauge.set(2);
                let k = self.key(PROBES, opened_until);
                let probes = u64::from(self.spec.half_open_probes);
                match self.store.add(&k, 1, probes, self.probes_expire()).await {
                    Ok(a) if a.taken => {
                        x.locals.insert(Probe(opened_until));
                        Ok(())
                    }
                    _ => {
                        actions.record(x, Action::Rejected);
                        Err(refuse(1, "half-open and its probes are in flight"))
                    }
                }
            }
        }
    }

    fn is_failure(&self, o: &Outcome<'_>) -> bool {
        match o {
            Ok(head) => self.spec.failure_statuses.contains(head.status.as_u16()),
            Err(e) => match classify(e) {
                Failure::NotSent => self.spec.connect_errors,
                Failure::Timeout => self.spec.timeouts,
                Failure::AfterSending => true,
                Failure::Ours => false,
            },
        }
    }

    /// When one opening's probe counts expire: an `open_for` (at least a minute) after
    /// the last probe of its half-open phase. Each opening has keys of its own, so a
    /// flapping breaker holds at most the few of its recent openings, never one per
    /// opening for good.
    fn probes_expire(&self) -> u64 {
        let keep = (self.spec.open_for.as_millis() as u64).max(60_000);
        clock::now_ms() + keep
    }

    /// Opens the breaker (the caller counts `tripped`).
    async fn open(&self) {
        self.gauge.set(1);
        let until = clock::now_ms() + self.spec.open_for.as_millis() as u64;
        // Kept past `until`: that it was open is what makes it half-open afterwards.
        let _ = self
            .store
            .raise(&self.key(OPEN, 0), until, until + KEEP_MS)
            .await;
        let _ = self.store.reset(&self.key(CONSECUTIVE, 0)).await;
    }

    async fn record(&self, x: &mut Exchange, o: Outcome<'_>, actions: &Actions<Action>) {
        let failed = self.is_failure(&o);
        let s = &self.spec;
        if let Some(Probe(opened_until)) = x.locals.take::<Probe>() {
            if failed {
                actions.record(x, Action::Tripped);
                return self.open().await;
            }
            let ok = self.key(PROBES_OK, opened_until);
            let n = u64::from(s.half_open_probes);
            if let Ok(a) = self.store.add(&ok, 1, n, self.probes_expire()).await
                && a.count >= n
            {
                actions.record(x, Action::Closed);
                self.gauge.set(0);
                let _ = self
                    .store
                    // Expires with the opening it closes (`open`'s expiry).
                    .raise(
                        &self.key(CLOSED_AT, 0),
                        opened_until,
                        opened_until + KEEP_MS,
                    )
                    .await;
            }
            return;
        }
        // Rolling window: this fixed window's counts plus the previous one's, weighted by
        // how much of it still overlaps the last `window`.
        let len = s.window.as_millis().max(1) as u64;
        let now = clock::now_ms();
        let w = now / len;
        let expires = (w + 2) * len;
        let mut ratio_trips = false;
        if let Some(ratio) = s.failure_ratio {
            let cur = self
                .store
                .add(&self.key(TOTAL, w), 1, u64::MAX, expires)
                .await;
            let cur_fail = if failed {
                self.store
                    .add(&self.key(FAILED, w), 1, u64::MAX, expires)
                    .await
                    .map(|a| a.count)
            } else {
                self.store.get(&self.key(FAILED, w)).await
            };
            let prev = self.store.get(&self.key(TOTAL, w - 1)).await.unwrap_or(0);
            let prev_fail = self.store.get(&self.key(FAILED, w - 1)).await.unwrap_or(0);
            let weight = 1.0 - (now % len) as f64 / len as f64;
            let total = cur.map_or(0, |a| a.count) as f64 + prev as f64 * weight;
            let fails = cur_fail.unwrap_or(0) as f64 + prev_fail as f64 * weight;
            ratio_trips = failed && total >= s.min_requests as f64 && fails / total >= ratio;
        }
        let consecutive = if failed && s.consecutive_failures > 0 {
            self.store
                .add(&self.key(CONSECUTIVE, 0), 1, u64::MAX, now + KEEP_MS)
                .await
                .map_or(0, |a| a.count)
        } else {
            if !failed && s.consecutive_failures > 0 {
                let _ = self.store.reset(&self.key(CONSECUTIVE, 0)).await;
            }
            0
        };
        if ratio_trips
            || (s.consecutive_failures > 0 && consecutive >= u64::from(s.consecutive_failures))
        {
            actions.record(x, Action::Tripped);
            self.open().await;
        }
    }
}

pub struct Breaker {
    pub resource: Arc<BreakerResource>,
    pub actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What a breaker did.
    pub enum Action for "breaker" {
        Rejected = "rejected",
        Tripped = "tripped",
        Closed = "closed",
    }
}

/// A breaker that is open.
pub static CIRCUIT_OPEN: Refusal = Refusal::refusal(
    "circuit_open",
    http::StatusCode::SERVICE_UNAVAILABLE,
    "circuit breaker open (`Retry-After`)",
);

/// `tollgate_breaker_state`.
#[derive(Default)]
pub struct Metrics {
    state: Family<NameLabels, Gauge>,
}

/// `breaker:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "breaker";
    const PHASES: Phases = Phases {
        request: "refuses while open; half-open lets probes through",
        attempt: "refuses a retry while open",
        response: "records success or failure of each attempt",
    };
    const EXAMPLE: &'static str = "github";
    const REFUSALS: &'static [&'static Refusal] = &[&CIRCUIT_OPEN];
    type Raw = RawRef<RawBreaker>;
    type Spec = Resource<BreakerSpec>;
    type Action = Action;
    type Metrics = Metrics;

    fn register(f: &mut Families<'_>) -> Metrics {
        Metrics {
            state: f.add(
                "breaker_state",
                "Circuit breaker state by breaker name: 0 closed, 1 open, 2 half-open",
            ),
        }
    }

    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec> {
        resolve::<Self>(raw, cx)
    }

    fn build(r: &Self::Spec, b: &mut Build<'_>) -> Built {
        let id = b.id("breaker", &r.name, &r.spec);
        let resource = b.reuse(id.clone(), |b| {
            BreakerResource::new(
                Arc::from(r.name.as_str()),
                r.spec.clone(),
                Arc::from(id.as_str()),
                b.store_for(r.spec.shared),
                b.metrics_of::<Kind>()
                    .state
                    .get_or_create(&NameLabels {
                        name: r.name.clone(),
                    })
                    .clone(),
            )
        });
        Built::with_attempts(Arc::new(Breaker {
            resource,
            actions: b.actions(),
        }))
    }
}

impl Shared for Kind {
    type Def = RawBreaker;
    type DefSpec = BreakerSpec;
    const DECLARED_EXAMPLE: &'static str =
        "{github: {consecutive_failures: 5, failure_ratio: 50%}}";

    fn define(
        e: &mut Errors,
        path: &str,
        def: &RawBreaker,
        _section: &BTreeMap<String, RawBreaker>,
    ) -> BreakerSpec {
        breaker(e, path, def)
    }
}

impl AttemptRemedy for Breaker {
    /// Refused while the breaker is open.
    fn before_retry<'a>(&'a self, x: &'a mut Exchange) -> Hook<'a, Result<(), ProxyError>> {
        Hook::wait(self.resource.admit(x, &self.actions))
    }

    fn after<'a>(&'a self, x: &'a mut Exchange, o: Outcome<'a>) -> Hook<'a, ()> {
        Hook::wait(async move { self.resource.record(x, o, &self.actions).await })
    }
}

impl Remedy for Breaker {
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let s = match self.resource.state().await {
                State::Closed => serde_json::json!({"state": "closed"}),
                State::Open { until } => serde_json::json!({
                    "state": "open",
                    "retry_in_s": until.saturating_sub(clock::now_ms()).div_ceil(1000),
                }),
                State::HalfOpen { .. } => serde_json::json!({"state": "half_open"}),
            };
            serde_json::json!({"name": &*self.resource.name, "state": s})
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            self.resource.admit(x, &self.actions).await?;
            Ok(Flow::Continue)
        })
    }

    /// A probe that never got its answer (refused later in the chain, client gone) gives
    /// its place back, so the breaker cannot stay half-open for good.
    fn end(&self, x: &Exchange) {
        if let Some(&Probe(opened_until)) = x.locals.get::<Probe>() {
            let r = &self.resource;
            r.store.release(&r.key(PROBES, opened_until), 1);
        }
    }
}

impl Default for BreakerSpec {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            failure_ratio: None,
            min_requests: 20,
            window: Duration::from_secs(30),
            open_for: Duration::from_secs(30),
            half_open_probes: 1,
            failure_statuses: Statuses(vec![(500, 599)]),
            connect_errors: true,
            timeouts: true,
            shared: true,
        }
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawBreaker {
    /// Open after this many failures in a row; 0 switches this rule off.
    pub consecutive_failures: Int<0, 1_000_000>,
    /// Open when failures reach this share (`"50%"`) of requests in the rolling `window` (absent: this rule is off)…
    pub failure_ratio: Option<Percent>,
    /// …once the window holds at least this many.
    pub min_requests: Int<1, 1_000_000>,
    /// Rolling window of the ratio (estimated from the current and previous fixed windows, weighted by their overlap).
    pub window: Dur<SEC_MS, HOUR_MS>,
    /// How long it stays open; then half-open.
    pub open_for: Dur<10, HOUR_MS>,
    /// Requests let through half-open: all succeeding closes it, one failing opens it again. A probe refused later in the chain or abandoned by its client gives its place back.
    pub half_open_probes: Int<1, 1000>,
    /// Statuses that count as failures: `503` or ranges `"500-599"`.
    pub failure_statuses: Vec<String>,
    /// DNS, connect and TLS failures count.
    pub connect_errors: bool,
    /// Response timeouts count.
    pub timeouts: bool,
    /// With `store.backend: redis`: `false` keeps this breaker in each replica's own memory (each replica opens on its own failures); `true` counts it once for all replicas. No effect on the memory store.
    pub shared: bool,
}

impl Default for RawBreaker {
    fn default() -> Self {
        Self {
            consecutive_failures: Int::of(5),
            failure_ratio: None,
            min_requests: Int::of(20),
            window: Dur::secs(30),
            open_for: Dur::secs(30),
            half_open_probes: Int::of(1),
            failure_statuses: vec!["500-599".into()],
            connect_errors: true,
            timeouts: true,
            shared: true,
        }
    }
}

pub fn breaker(e: &mut Errors, path: &str, b: &RawBreaker) -> BreakerSpec {
    let at = |f: &str| format!("{path}.{f}");
    let spec = BreakerSpec {
        consecutive_failures: b.consecutive_failures.u32(),
        failure_ratio: b.failure_ratio.as_ref().map(Percent::fraction),
        min_requests: b.min_requests.get(),
        window: b.window.get(),
        open_for: b.open_for.get(),
        half_open_probes: b.half_open_probes.u32(),
        failure_statuses: e
            .check(
                &at("failure_statuses"),
                Statuses::parse(&b.failure_statuses),
            )
            .unwrap_or_default(),
        connect_errors: b.connect_errors,
        timeouts: b.timeouts,
        shared: b.shared,
    };
    if spec.consecutive_failures == 0 && spec.failure_ratio.is_none() {
        e.fail(
            path,
            "the breaker can never open: set `consecutive_failures` above 0 or a `failure_ratio`"
                .into(),
        );
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::chain::Chain;
    use crate::policy::store::memory::Memory;
    use crate::target::{Scheme, Target};

    fn exchange() -> Exchange {
        let chain = Arc::new(Chain::new("p", Vec::new(), Vec::new()));
        let req = http::Request::new(crate::body::empty());
        Exchange::new(
            chain,
            req,
            Target::parse(Scheme::Http, "example.com").unwrap(),
        )
    }

    fn head(status: u16) -> http::response::Parts {
        let mut r = http::Response::new(());
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        r.into_parts().0
    }

    #[tokio::test(start_paused = true)]
    async fn opens_half_opens_and_closes_on_the_clock() {
        let spec = BreakerSpec {
            consecutive_failures: 2,
            open_for: Duration::from_secs(30),
            ..BreakerSpec::default()
        };
        let b = BreakerResource::new(
            Arc::from("b"),
            spec,
            Arc::from("breaker:b"),
            Arc::new(Memory::default()),
            Default::default(),
        );
        let a = Actions::<Action>::default();
        let mut x = exchange();
        let (ok, bad) = (head(200), head(503));
        b.record(&mut x, Ok(&bad), &a).await;
        b.record(&mut x, Ok(&ok), &a).await;
        b.record(&mut x, Ok(&bad), &a).await;
        assert_eq!(
            b.state().await,
            State::Closed,
            "a success in between resets the run"
        );
        b.record(&mut x, Ok(&bad), &a).await;
        assert!(matches!(b.state().await, State::Open { .. }));
        assert!(b.admit(&mut x, &a).await.is_err());
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(matches!(b.state().await, State::Open { .. }));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(matches!(b.state().await, State::HalfOpen { .. }));
        // One probe goes through; a second request waits for its verdict.
        assert!(b.admit(&mut x, &a).await.is_ok());
        let mut y = exchange();
        assert!(b.admit(&mut y, &a).await.is_err());
        // The probe fails: open again for the whole period.
        b.record(&mut x, Ok(&bad), &a).await;
        assert!(matches!(b.state().await, State::Open { .. }));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(b.admit(&mut x, &a).await.is_ok());
        b.record(&mut x, Ok(&ok), &a).await;
        assert_eq!(b.state().await, State::Closed);
        assert!(b.admit(&mut y, &a).await.is_ok());
    }
}
