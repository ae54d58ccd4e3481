//! Amounts reserved on admission and settled when the call ends (token limits, budgets):
//! a request is admitted when its estimate fits (counted atomically, on the shared store
//! too), and its end hook corrects the count to what the answer says it used. So the
//! count is exact once no call is in flight, and while calls are, usage can pass the
//! limit by at most what the calls in flight use beyond their reservations
//! (docs/llm.md#the-bound).

use super::actions::{Action, Actions};
use super::chain::{Exchange, Flow};
use super::clock;
use super::compile::Build;
use super::limit::{GroupFields, Limit, LimitSpec, OverLimit, groups};
use super::window::Window;
use crate::error::{ProxyError, Reject, Rejection};
use crate::fields::Errors;
use crate::metrics::NameLabels;
use prometheus_client::metrics::family::Family;
use std::sync::Arc;

/// A token limit's or a budget's counters: its name, how messages name it, and the limit
/// (counted exactly, never in lease blocks), shared by every policy naming it.
pub struct Amounts {
    pub name: Arc<str>,
    pub what: String,
    pub limit: Arc<Limit>,
    pub gauges: Gauges,
}

/// What an amount limit shows Prometheus, set at each admission: the share of the whole
/// limit used in the current window (reserved or spent, this replica's view of the
/// shared count), and when that window ends. Alerting rules read the share only while
/// its window lasts, so a renewal without traffic does not leave a stale 90 % firing.
#[derive(Clone, Default)]
pub struct Gauges {
    pub used_ratio: crate::metrics::FloatGauge,
    pub window_end_seconds: prometheus_client::metrics::gauge::Gauge,
}

/// The families of [`Gauges`], one pair per remedy (`budget`, `token_limit`).
#[derive(Default)]
pub struct Families {
    used_ratio: Family<NameLabels, crate::metrics::FloatGauge>,
    window_end_seconds: Family<NameLabels, prometheus_client::metrics::gauge::Gauge>,
}

impl Families {
    /// Registers `PREFIX_used_ratio` and `PREFIX_window_end_seconds`; `what` names the
    /// limit in their help.
    pub fn register(f: &mut crate::metrics::Families<'_>, prefix: &str, what: &str) -> Self {
        Families {
            used_ratio: f.add(
                &format!("{prefix}_used_ratio"),
                &format!("Share of each {what} used in its current window (0 to 1: reserved by calls in flight or spent), as this replica last counted it, by name"),
            ),
            window_end_seconds: f.add(
                &format!("{prefix}_window_end_seconds"),
                &format!("When each {what}'s current window ends (Unix seconds), by name: the used ratio holds until then"),
            ),
        }
    }

    fn of(&self, name: &str) -> Gauges {
        let labels = NameLabels { name: name.into() };
        Gauges {
            used_ratio: self.used_ratio.get_or_create(&labels).clone(),
            window_end_seconds: self.window_end_seconds.get_or_create(&labels).clone(),
        }
    }
}

impl Gauges {
    fn set(&self, limit: &Limit, used: u64, end_ms: u64) {
        let whole = limit.spec.limit.max(1) as f64;
        self.used_ratio.set((used as f64 / whole).min(1.0));
        self.window_end_seconds.set((end_ms / 1000) as i64);
    }
}

/// The resource `name` of `kind` (`tokens`, `budget`: its store keys), defined by `spec`
/// and counting `limit`; built once per definition. `noun` names it in messages.
pub fn resource<S: std::fmt::Debug>(
    b: &mut Build<'_>,
    (kind, noun): (&str, &str),
    name: &str,
    spec: &S,
    (limit, shared): (&LimitSpec, bool),
    families: &Families,
) -> Arc<Amounts> {
    let id = b.id(kind, name, spec);
    b.reuse(id.clone(), |b| {
        let mut l = Limit::new(
            limit.clone(),
            Arc::from(id.as_str()),
            None,
            b.store_for(shared),
        );
        l.amounts = true;
        Amounts {
            name: Arc::from(name),
            what: format!("{noun} `{name}`"),
            limit: Arc::new(l),
            gauges: families.of(name),
        }
    })
}

/// An amount limit as written: its total, window and consumer groups.
pub fn spec(
    e: &mut Errors,
    path: &str,
    limit: u64,
    window: Window,
    g: GroupFields<'_>,
) -> LimitSpec {
    LimitSpec {
        limit,
        window,
        groups: groups(e, path, limit, g),
        refund_on: Vec::new(),
    }
}

/// How an admission is refused and told: the refusal, how its amounts are written, and
/// the remedy's actions with its `allowed` and `rejected`.
pub struct Admission<'a, A: Action> {
    pub kind: Reject,
    pub unit: fn(u64) -> String,
    pub actions: &'a Actions<A>,
    pub allowed: A,
    pub rejected: A,
}

/// Reserves `n` on `r` for `stage` and counts the action, or refuses.
pub async fn admit<A: Action>(
    x: &mut Exchange,
    stage: &'static str,
    r: &Amounts,
    n: u64,
    a: Admission<'_, A>,
) -> Result<Flow, ProxyError> {
    match reserve(x, stage, &r.limit, n).await {
        Ok((remaining, end)) => {
            let used = r.limit.spec.limit.saturating_sub(remaining);
            r.gauges.set(&r.limit, used, end);
            a.actions.record(x, a.allowed);
            Ok(Flow::Continue)
        }
        Err(over) => {
            // A refusal knows only that the request did not fit: the count is read (a
            // refused call pays one more store read, an admitted one none).
            let (used, end) = r.limit.used().await;
            r.gauges.set(&r.limit, used, end);
            a.actions.record(x, a.rejected);
            Err(refusal(a.kind, &r.what, n, &over, a.unit))
        }
    }
}

/// One reservation of a request.
struct Reserved {
    stage: &'static str,
    limit: Arc<Limit>,
    counted: crate::policy::limit::Counted,
    amount: u64,
    expires_ms: u64,
}

/// The reservations of a request, by remedy (a token limit's and a budget's, inline).
#[derive(Default)]
pub struct Reservations(smallvec::SmallVec<[Reserved; 2]>);

/// Reserves `n` on `limit` for `stage`: the amount left in the window and when it ends
/// (Unix ms), or why it does not fit.
async fn reserve(
    x: &mut Exchange,
    stage: &'static str,
    limit: &Arc<Limit>,
    n: u64,
) -> Result<(u64, u64), OverLimit> {
    let t = limit.reserve(&x.parts.headers, n).await?;
    // The window the reservation was counted in: its settling adds to that one.
    let expires_ms = t.end;
    x.locals.get_or_default::<Reservations>().0.push(Reserved {
        stage,
        limit: limit.clone(),
        counted: t.counted,
        amount: n,
        expires_ms,
    });
    Ok((t.remaining, expires_ms))
}

/// Settles `stage`'s reservation to `actual`: what it had reserved, if it had.
pub fn settle(x: &Exchange, stage: &'static str, actual: u64) -> Option<u64> {
    let r = x
        .locals
        .get::<Reservations>()?
        .0
        .iter()
        .find(|r| r.stage == stage)?;
    let delta = actual as i128 - r.amount as i128;
    let delta = delta.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    r.limit.adjust(&r.counted, delta, r.expires_ms);
    Some(r.amount)
}

/// The refusal of an amount that does not fit: 429 with `Retry-After` to the next window,
/// or without one when the amount exceeds the whole limit (no window can take it).
pub fn refusal(
    kind: Reject,
    what: &str,
    n: u64,
    r: &OverLimit,
    unit: fn(u64) -> String,
) -> ProxyError {
    let secs = clock::secs_until(r.reset_ms);
    let permanent = r.blocked || n > r.limit;
    let (message, retry_after) = if r.blocked {
        (
            format!("{what}: this consumer group is not allowed (default_group: block)"),
            None,
        )
    } else if n > r.limit {
        (
            format!(
                "{what}: this request needs {} and the whole limit is {}: it can never fit (lower its max_tokens)",
                unit(n),
                unit(r.limit)
            ),
            None,
        )
    } else {
        (
            format!(
                "{what}: {} per window, and this request needs {}, more than is left; the next window starts in {secs}s",
                unit(r.limit),
                unit(n)
            ),
            Some(secs),
        )
    };
    ProxyError::Rejected(Rejection {
        kind,
        message,
        retry_after,
        rate: None,
        permanent,
    })
}
