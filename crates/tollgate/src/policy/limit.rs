//! A limit counted in fixed windows, shared by rate limits and quotas: a total, optional
//! consumer groups (a request header's value) with shares of it, and optionally a parent
//! whose limit a request must also fit. A request that is refused is not counted.

use super::chain::Exchange;
use super::clock;
use super::store::{Key, Names, Store};
use super::window::Window;
use crate::error::{ProxyError, Reject, Rejection};
use crate::fields::Errors;
use http::{HeaderMap, HeaderName};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How groups not listed are treated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultGroup {
    /// Only the total applies.
    Allow,
    /// Refused.
    Block,
    /// Each such group gets this many per window.
    Share(u64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    pub header: HeaderName,
    /// Group value → its limit per window.
    pub shares: Vec<(String, u64)>,
    pub default: DefaultGroup,
    pub max_groups: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LimitSpec {
    pub limit: u64,
    pub window: Window,
    pub groups: Option<Groups>,
    /// Response statuses that give a counted request back (`refund_on`).
    pub refund_on: Vec<u16>,
}

/// Why a request does not fit, and when it would.
#[derive(Debug, Clone)]
pub struct OverLimit {
    /// The limit that refused it (the group's share, or the total).
    pub limit: u64,
    /// Unix ms when the window ends.
    pub reset_ms: u64,
    /// Waiting cannot help (the group is blocked).
    pub blocked: bool,
}

pub struct Limit {
    pub spec: LimitSpec,
    /// The store key's resource: kind, name and definition fingerprint.
    pub resource: Arc<str>,
    pub parent: Option<Arc<Limit>>,
    store: Arc<dyn Store>,
    /// The resource, `total`, `g:other`, `groups`, then each listed group's part: what
    /// its keys name, a copy per worker.
    names: Names,
    /// Counts amounts ([`Limit::reserve`]), never batched.
    pub amounts: bool,
}

/// Where each name is in [`Limit`]'s names.
const RESOURCE: usize = 0;
const TOTAL: usize = 1;
const OTHER: usize = 2;
const SEEN: usize = 3;
const SHARES: usize = 4;

/// The group a request counts in: its part name and limit.
enum Group {
    None,
    Counted(Arc<str>, u64),
    Blocked,
}

impl Limit {
    pub fn new(
        spec: LimitSpec,
        resource: Arc<str>,
        parent: Option<Arc<Limit>>,
        store: Arc<dyn Store>,
    ) -> Self {
        let fixed = [
            resource.clone(),
            "total".into(),
            "g:other".into(),
            "groups".into(),
        ];
        let shares = spec.groups.iter().flat_map(|g| &g.shares);
        let names = Names::new(
            fixed
                .into_iter()
                .chain(shares.map(|(n, _)| format!("g:{n}").into())),
        );
        Self {
            names,
            spec,
            resource,
            parent,
            store,
            amounts: false,
        }
    }

    async fn group(&self, h: &HeaderMap, window: u64, end: u64) -> Group {
        let Some(g) = &self.spec.groups else {
            return Group::None;
        };
        let value = h.get(&g.header).map(|v| v.as_bytes()).unwrap_or(b"");
        if let Some(i) = g.shares.iter().position(|(n, _)| n.as_bytes() == value) {
            return Group::Counted(self.names.get()[SHARES + i].clone(), g.shares[i].1);
        }
        match g.default {
            DefaultGroup::Allow => Group::None,
            DefaultGroup::Block => Group::Blocked,
            DefaultGroup::Share(limit) => {
                // A digest, not the value: 12 000 groups of 60 KB values would otherwise
                // hold 700 MB for a window (listed groups keep their `g:` names).
                let part = super::group::part("h:", value);
                // A group seen for the first time in this window takes one of
                // `max_groups` places; past them, groups share the one group `other`.
                let n = self.names.get();
                let key = Key::new(&n[RESOURCE], &part, window);
                let known = self.store.get(&key).await.unwrap_or(0) > 0;
                if known {
                    return Group::Counted(part, limit);
                }
                let seen = Key::new(&n[RESOURCE], &n[SEEN], window);
                match self.store.add(&seen, 1, g.max_groups, end).await {
                    Ok(a) if a.taken => Group::Counted(part, limit),
                    _ => Group::Counted(n[OTHER].clone(), limit),
                }
            }
        }
    }

    /// Counts one request if it fits its group's share, the total and the parent's.
    /// With `refund_on`, what it was counted in comes back in [`Taken::counted`].
    pub async fn take(&self, h: &HeaderMap) -> Result<Taken, OverLimit> {
        self.take_keeping(h, 1, !self.spec.refund_on.is_empty())
            .await
    }

    /// [`Limit::take`] decided at once, where every store it counts in is this process's
    /// memory (its parents' too): `None` where one is shared, whose answer is waited for.
    /// Memory answers every call ready ([`super::store::StoreFuture::Ready`]), so one
    /// poll completes the take and nothing is boxed or waited on.
    pub fn take_now(&self, h: &HeaderMap) -> Option<Result<Taken, OverLimit>> {
        if !self.answers_now() {
            return None;
        }
        let taken = futures_util::FutureExt::now_or_never(self.take(h));
        debug_assert!(taken.is_some(), "a memory store's take waited");
        taken
    }

    /// Whether every store this limit counts in answers at once (none is shared).
    fn answers_now(&self) -> bool {
        !self.store.shared() && self.parent.as_ref().is_none_or(|p| p.answers_now())
    }

    /// Counts `n` (tokens, nano-dollars) if they fit, exactly (never through a batching
    /// store's blocks: what is reserved is corrected later by [`Limit::adjust`]); what
    /// they were counted in comes back in [`Taken::counted`].
    pub async fn reserve(&self, h: &HeaderMap, n: u64) -> Result<Taken, OverLimit> {
        self.take_keeping(h, n, true).await
    }

    /// Corrects what [`Limit::reserve`] counted in `counted` by `delta` (the real amount
    /// less the reserved one), in the window it was reserved in; an increase is added
    /// whatever the limit (the call was made), in the background.
    pub fn adjust(&self, counted: &[Key], delta: i64, expires_ms: u64) {
        for k in counted {
            match delta {
                0 => {}
                d if d < 0 => self.store.release(k, d.unsigned_abs()),
                // This process's memory answers at once: no task to spawn.
                d if !self.store.shared() => {
                    let added = self.store.add(k, d as u64, u64::MAX, expires_ms);
                    if let super::store::StoreFuture::Ready(Some(Err(e))) = added {
                        tracing::warn!("{e}; a reservation's correction was lost");
                    }
                }
                d => {
                    let (store, k) = (self.store.clone(), k.clone());
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        rt.spawn(async move {
                            if let Err(e) = store.add(&k, d as u64, u64::MAX, expires_ms).await {
                                tracing::warn!("{e}; a reservation's correction was lost");
                            }
                        });
                    }
                }
            }
        }
    }

    /// Gives back a request [`Limit::take`] counted (the provider did not charge it).
    pub fn refund(&self, counted: &[Key]) {
        for k in counted {
            self.store.release(k, 1);
        }
    }

    async fn take_keeping(&self, h: &HeaderMap, n: u64, keep: bool) -> Result<Taken, OverLimit> {
        let now = clock::now_ms();
        let (window, end) = self.spec.window.bounds(now);
        let refused = |limit, blocked| OverLimit {
            limit,
            reset_ms: end,
            blocked,
        };
        let group = match self.group(h, window, end).await {
            Group::Blocked => return Err(refused(0, true)),
            Group::None => None,
            Group::Counted(part, limit) => {
                let key = Key::new(&self.names.get()[RESOURCE], &part, window);
                match self.admit(&key, n, limit, end).await {
                    Ok(a) if !a.taken => return Err(refused(limit, false)),
                    Ok(_) => Some(key),
                    // A store that cannot answer lets the request through (fail open).
                    Err(e) => {
                        tracing::warn!("{e}; request let through");
                        None
                    }
                }
            }
        };
        let names = self.names.get();
        let total = Key::new(&names[RESOURCE], &names[TOTAL], window);
        let added = match self.admit(&total, n, self.spec.limit, end).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("{e}; request let through");
                return Ok(Taken {
                    remaining: 0,
                    counted: Counted::new(),
                    end,
                });
            }
        };
        if !added.taken {
            if let Some(k) = &group {
                let _ = self.store.sub(k, n).await;
            }
            return Err(refused(self.spec.limit, false));
        }
        let mut counted = Counted::new();
        if let Some(parent) = &self.parent {
            match Box::pin(parent.take_keeping(h, n, keep)).await {
                Ok(t) => counted = t.counted,
                Err(r) => {
                    let _ = self.store.sub(&total, n).await;
                    if let Some(k) = &group {
                        let _ = self.store.sub(k, n).await;
                    }
                    return Err(r);
                }
            }
        }
        if keep {
            counted.push(total);
            counted.extend(group);
        }
        Ok(Taken {
            remaining: self.spec.limit.saturating_sub(added.count),
            counted,
            end,
        })
    }

    /// An admission of `n`: one request through the store's `take` (which a shared
    /// store may batch), an amount exactly through `add`.
    fn admit(
        &self,
        key: &Key,
        n: u64,
        limit: u64,
        end: u64,
    ) -> super::store::StoreFuture<'_, super::store::Added> {
        match n {
            1 if !self.amounts => self.store.take(key, n, limit, end),
            _ => self.store.add(key, n, limit, end),
        }
    }

    /// The current window's count and end, for `GET /policies` and metrics.
    pub async fn used(&self) -> (u64, u64) {
        let (window, end) = self.spec.window.bounds(clock::now_ms());
        let n = self.names.get();
        let total = Key::new(&n[RESOURCE], &n[TOTAL], window);
        (self.store.get(&total).await.unwrap_or(0), end)
    }
}

pub struct Taken {
    pub remaining: u64,
    /// The counters this request went into (its parent's too), kept only with
    /// `refund_on` or for a reservation: empty otherwise.
    pub counted: Counted,
    /// The end of the window it was counted in (unix ms).
    pub end: u64,
}

/// The counters a request went into: most often one (the limit's total), held inline.
pub type Counted = smallvec::SmallVec<[Key; 1]>;

// ---- config: as written, and its validation ----

/// `refund_on`: statuses a provider does not charge.
pub fn refund_on(e: &mut Errors, path: &str, statuses: &[u16]) -> Vec<u16> {
    for (i, s) in statuses.iter().enumerate() {
        if !(100..=599).contains(s) {
            e.fail(
                &format!("{path}.refund_on[{i}]"),
                format!("`{s}` is not an HTTP status: write one from 100 to 599, e.g. 304"),
            );
        }
    }
    statuses.to_vec()
}

/// A limit's consumer groups as written (rate limits, token limits, budgets).
pub struct GroupFields<'a> {
    pub group_by: &'a Option<String>,
    pub groups: &'a BTreeMap<String, crate::fields::units::Percent>,
    pub default_group: &'a str,
    pub max_groups: u64,
}

/// Validates a limit's consumer groups: each listed group's share of `limit`, the
/// default group's treatment.
pub fn groups(e: &mut Errors, path: &str, limit: u64, r: GroupFields<'_>) -> Option<Groups> {
    match &r.group_by {
        None => {
            if !r.groups.is_empty() {
                e.fail(&format!("{path}.groups"), "groups need `group_by: HEADER` (the request header whose value names the group)".into());
            }
            None
        }
        Some(h) => {
            let header = e.read_header(&format!("{path}.group_by"), h);
            let mut sum = 0.0;
            let shares = r
                .groups
                .iter()
                .map(|(name, pct)| {
                    let f = pct.fraction();
                    sum += f;
                    (name.clone(), ((limit as f64) * f).floor() as u64)
                })
                .collect();
            if sum > 1.0 + 1e-9 {
                e.fail(
                    &format!("{path}.groups"),
                    format!(
                        "the shares add up to {:.0}%; they may add up to 100% at most",
                        sum * 100.0
                    ),
                );
            }
            let default = match r.default_group.trim() {
                "allow" => DefaultGroup::Allow,
                "block" => DefaultGroup::Block,
                s if s.ends_with('%') => {
                    let f = e.percent(&format!("{path}.default_group"), s);
                    DefaultGroup::Share(((limit as f64) * f).floor() as u64)
                }
                s => {
                    e.fail(
                        &format!("{path}.default_group"),
                        format!("`{s}`: write `allow`, `block` or a share like \"10%\""),
                    );
                    DefaultGroup::Allow
                }
            };
            header.map(|header| Groups {
                header,
                shares,
                default,
                max_groups: r.max_groups,
            })
        }
    }
}

pub fn refusal(kind: Reject, what: &str, r: &OverLimit) -> ProxyError {
    let retry_after = clock::secs_until(r.reset_ms);
    let message = if r.blocked {
        format!("{what}: this consumer group is not allowed (default_group: block)")
    } else {
        format!(
            "{what}: {} per window used; the next window starts in {retry_after}s",
            crate::error::count_of(r.limit, "request")
        )
    };
    ProxyError::Rejected(Rejection {
        kind,
        message,
        retry_after: (!r.blocked).then_some(retry_after),
        rate: Some((r.limit, 0, retry_after)),
        permanent: false,
    })
}

/// What a limit with `refund_on` counted a request in, by remedy (quota, rate limit),
/// to give back if the answer is one the provider does not charge.
#[derive(Default)]
pub struct Refunds(pub Vec<(&'static str, Counted)>);

/// Keeps what `stage` counted the request in (with `refund_on`; nothing otherwise) for
/// [`refund`].
pub fn keep_for_refund(x: &mut Exchange, stage: &'static str, counted: Counted) {
    if !counted.is_empty() {
        x.locals
            .get_or_default::<Refunds>()
            .0
            .push((stage, counted));
    }
}

/// Gives back what `stage` counted when the provider's answer is one of the limit's
/// `refund_on` statuses (it did not charge the request). Whether it did.
pub fn refund(x: &mut Exchange, stage: &str, limit: &Limit, status: http::StatusCode) -> bool {
    if !limit.spec.refund_on.contains(&status.as_u16()) {
        return false;
    }
    let Some(refunds) = x.locals.get_mut::<Refunds>() else {
        return false;
    };
    let Some(i) = refunds.0.iter().position(|(s, _)| *s == stage) else {
        return false;
    };
    let (_, counted) = refunds.0.swap_remove(i);
    limit.refund(&counted);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::store::memory::Memory;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn windows_roll_over_on_the_clock() {
        let spec = LimitSpec {
            limit: 2,
            window: Window::Fixed(60_000),
            groups: None,
            refund_on: Vec::new(),
        };
        let l = Limit::new(spec, Arc::from("t"), None, Arc::new(Memory::default()));
        let h = HeaderMap::new();
        // Start at the beginning of a window, whatever the real time is.
        let (_, end) = l.spec.window.bounds(clock::now_ms());
        tokio::time::advance(Duration::from_millis(end - clock::now_ms())).await;
        assert!(l.take(&h).await.is_ok());
        assert_eq!(l.take(&h).await.map(|t| t.remaining).ok(), Some(0));
        let refused = l.take(&h).await.err().unwrap();
        assert_eq!(clock::secs_until(refused.reset_ms), 60);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(l.take(&h).await.is_err(), "still the same minute");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(l.take(&h).await.is_ok(), "a new minute");
        assert_eq!(l.used().await.0, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_amount_spent_renews_with_its_window() {
        // A budget's day: $1 in nano-dollars, reserved and settled as calls end.
        let spec = LimitSpec {
            limit: 1_000_000_000,
            window: Window::day(jiff::tz::TimeZone::UTC),
            groups: None,
            refund_on: Vec::new(),
        };
        let mut l = Limit::new(spec, Arc::from("b"), None, Arc::new(Memory::default()));
        l.amounts = true;
        let h = HeaderMap::new();
        let (_, end) = l.spec.window.bounds(clock::now_ms());
        tokio::time::advance(Duration::from_millis(end - clock::now_ms())).await;
        let (_, end) = l.spec.window.bounds(clock::now_ms());
        // Reserved $0.40 each, spent $0.45 each: the third does not fit what is left.
        for _ in 0..2 {
            let t = l.reserve(&h, 400_000_000).await.unwrap();
            l.adjust(&t.counted, 50_000_000, end);
        }
        assert_eq!(l.used().await.0, 900_000_000);
        let refused = l.reserve(&h, 400_000_000).await.err().unwrap();
        assert_eq!(clock::secs_until(refused.reset_ms), 86_400);
        assert!(
            l.reserve(&h, 100_000_000).await.is_ok(),
            "what is left still fits"
        );
        tokio::time::advance(Duration::from_secs(86_400)).await;
        assert!(l.reserve(&h, 400_000_000).await.is_ok(), "a new day");
        assert_eq!(l.used().await.0, 400_000_000);
    }

    #[tokio::test]
    async fn a_group_costs_a_few_bytes_whatever_its_value() {
        let spec = LimitSpec {
            limit: 1_000_000,
            window: Window::Fixed(60_000),
            groups: Some(Groups {
                header: HeaderName::from_static("x-consumer"),
                shares: vec![("ci".into(), 10)],
                default: DefaultGroup::Share(10),
                max_groups: 10_000,
            }),
            refund_on: Vec::new(),
        };
        let store = Arc::new(Memory::default());
        let l = Limit::new(spec, Arc::from("t"), None, store.clone());
        let groups = 500;
        for i in 0..groups {
            let mut h = HeaderMap::new();
            let value = format!("{i:06}{}", "v".repeat(60_000));
            h.insert("x-consumer", value.parse().unwrap());
            assert!(l.take(&h).await.is_ok());
        }
        // Each group is one counter: its name is a fixed-size digest, not the 60 KB value.
        let per_group = store.key_bytes() / groups;
        assert!(per_group < 100, "{per_group} bytes per group");
        // Each value is its own group (the digest keeps them apart): ten fit, not eleven.
        let mut h = HeaderMap::new();
        h.insert("x-consumer", "000001".parse().unwrap());
        for _ in 0..10 {
            assert!(l.take(&h).await.is_ok());
        }
        assert!(l.take(&h).await.is_err());
    }
}
