//! Rate limits, quotas (with parents and time zones), concurrency limits, queues and breakers.

use super::super::raw::*;
use super::super::validate::{Errors, HOUR, MS, SEC};
use crate::policy::failure::Statuses;
use crate::policy::limit::{DefaultGroup, Groups, LimitSpec};
use crate::policy::queue::QueueSpec;
use crate::policy::remedies::breaker::BreakerSpec;
use crate::policy::remedies::concurrency::ConcurrencySpec;
use crate::policy::spec::{ConcurrencyLimitSpec, QuotaSpec, RateLimitSpec, Resource};
use crate::policy::window::Window;
use std::collections::BTreeMap;

pub(super) fn window(e: &mut Errors, path: &str, s: &str) -> Window {
    Window::parse_fixed(s).unwrap_or_else(|| {
        e.fail(
            path,
            format!("`{s}`: write `second`, `minute`, `hour` or `day`"),
        );
        Window::Fixed(1000)
    })
}

pub(super) fn queue(e: &mut Errors, path: &str, q: &Option<RawQueue>) -> Option<QueueSpec> {
    let q = q.as_ref()?;
    Some(QueueSpec {
        size: e.number(&format!("{path}.size"), q.size, 1, 1_000_000),
        max_wait: e.duration(&format!("{path}.max_wait"), &q.max_wait, MS, HOUR),
        priority_header: q
            .priority_header
            .as_deref()
            .and_then(|h| e.read_header(&format!("{path}.priority_header"), h)),
        priorities: q.priorities.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        default_priority: q.default_priority,
    })
}

/// `refund_on`: statuses a provider does not charge.
fn refund_on(e: &mut Errors, path: &str, statuses: &[u16]) -> Vec<u16> {
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

pub(super) fn rate_limit(e: &mut Errors, path: &str, r: &RawRateLimit) -> RateLimitSpec {
    let limit = e.count(&format!("{path}.limit"), r.limit);
    let groups = match &r.group_by {
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
                    let f = e.percent(&format!("{path}.groups.{name}"), pct);
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
                max_groups: e.number(&format!("{path}.max_groups"), r.max_groups, 1, 1_000_000)
                    as u64,
            })
        }
    };
    RateLimitSpec {
        limit: LimitSpec {
            limit,
            window: window(e, &format!("{path}.window"), &r.window),
            groups,
            refund_on: refund_on(e, path, &r.refund_on),
        },
        queue: queue(e, &format!("{path}.queue"), &r.queue),
    }
}

pub(super) fn quota(
    e: &mut Errors,
    path: &str,
    q: &RawQuota,
    declared: &BTreeMap<String, RawQuota>,
    depth: usize,
) -> QuotaSpec {
    let tz = match jiff::tz::TimeZone::get(q.time_zone.trim()) {
        Ok(tz) => tz,
        Err(_) => {
            e.fail(
                &format!("{path}.time_zone"),
                format!(
                    "`{}` is not a time zone; write an IANA name such as `Europe/Paris` or `UTC`",
                    q.time_zone
                ),
            );
            jiff::tz::TimeZone::UTC
        }
    };
    let window = match q.per.as_str() {
        "day" => Window::Day(tz),
        "month" => Window::Month {
            renews_on: e.number(&format!("{path}.renews_on"), q.renews_on, 1, 28) as i8,
            tz,
        },
        other => {
            e.fail(
                &format!("{path}.per"),
                format!("`{other}`: write `day` or `month`"),
            );
            Window::Day(tz)
        }
    };
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
                let f = e.percent(&format!("{path}.share"), share);
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
                parent: Some(p),
            }
        }
        None => {
            let limit = match q.limit {
                Some(n) => e.count(&format!("{path}.limit"), n),
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
                parent: None,
            }
        }
    }
}

pub(super) fn concurrency(e: &mut Errors, path: &str, c: &RawConcurrency) -> ConcurrencyLimitSpec {
    ConcurrencyLimitSpec {
        limit: ConcurrencySpec {
            max: e.number(&format!("{path}.max"), c.max, 1, 1_000_000),
            group_by: c
                .group_by
                .as_deref()
                .and_then(|h| e.read_header(&format!("{path}.group_by"), h)),
        },
        queue: queue(e, &format!("{path}.queue"), &c.queue),
    }
}

pub(super) fn breaker(e: &mut Errors, path: &str, b: &RawBreaker) -> BreakerSpec {
    let at = |f: &str| format!("{path}.{f}");
    let spec = BreakerSpec {
        consecutive_failures: e.number(
            &at("consecutive_failures"),
            b.consecutive_failures,
            0,
            1_000_000,
        ),
        failure_ratio: b
            .failure_ratio
            .as_deref()
            .map(|r| e.percent(&at("failure_ratio"), r)),
        min_requests: e.number(&at("min_requests"), b.min_requests, 1, 1_000_000),
        window: e.duration(&at("window"), &b.window, SEC, HOUR),
        open_for: e.duration(&at("open_for"), &b.open_for, 10 * MS, HOUR),
        half_open_probes: e.number(&at("half_open_probes"), b.half_open_probes, 1, 1000),
        failure_statuses: e
            .check(
                &at("failure_statuses"),
                Statuses::parse(&b.failure_statuses),
            )
            .unwrap_or_default(),
        connect_errors: b.connect_errors,
        timeouts: b.timeouts,
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
