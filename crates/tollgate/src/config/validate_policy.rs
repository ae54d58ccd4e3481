//! Validation of policies and of the shared limits they name: every value range-checked,
//! every reference resolved, errors at the field path with what to write.

use super::Config;
use super::raw::*;
use super::units::{format_duration, parse_size};
use super::validate::{DAY, Errors, HOUR, MS, SEC, as_written};
use crate::glob::HostGlob;
use crate::policy::failure::Statuses;
use crate::policy::limit::{DefaultGroup, Groups, LimitSpec};
use crate::policy::queue::QueueSpec;
use crate::policy::remedies::breaker::BreakerSpec;
use crate::policy::remedies::cache::CacheSpec;
use crate::policy::remedies::concurrency::ConcurrencySpec;
use crate::policy::remedies::credentials::Credential;
use crate::policy::remedies::mock::{Mock, When};
use crate::policy::remedies::retry::RetrySpec;
use crate::policy::remedies::throttle::ThrottleSpec;
use crate::policy::remedies::timeouts::Timeouts;
use crate::policy::remedies::transform::{
    HeaderEdits, JsonEdits, Piece, RequestTransform, ResponseTransform,
};
use crate::policy::spec::{ConcurrencyLimitSpec, PolicySpec, QuotaSpec, RateLimitSpec, Resource};
use crate::policy::window::Window;
use crate::policy::{Matcher, PathTemplate, Policy, PolicySet};
use crate::secret::Secret;
use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const MAX_COUNT: u64 = 1_000_000_000_000;

impl Errors {
    fn fail(&mut self, path: &str, message: String) {
        self.check::<()>(path, Err(message));
    }

    fn size(&mut self, path: &str, s: &str, min: usize, max: usize, range: &str) -> usize {
        match parse_size(s) {
            Ok(n) if (min..=max).contains(&n) => n,
            Ok(_) => {
                self.fail(
                    path,
                    format!("`{s}` is out of range; write a size from {range}"),
                );
                min
            }
            Err(m) => {
                self.fail(path, m);
                min
            }
        }
    }

    /// `"20%"` as a fraction.
    fn percent(&mut self, path: &str, s: &str) -> f64 {
        let v = s
            .trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<f64>().ok())
            .filter(|p| (0.0..=100.0).contains(p));
        match v {
            Some(p) => p / 100.0,
            None => {
                self.fail(
                    path,
                    format!("`{s}`: write a percentage from \"0%\" to \"100%\", e.g. \"20%\""),
                );
                0.0
            }
        }
    }

    /// A request header name a remedy reads (never an `x-tollgate-*` control header,
    /// which is removed before remedies run).
    fn read_header(&mut self, path: &str, s: &str) -> Option<HeaderName> {
        let n = self.header_name(path, s)?;
        if n.as_str().starts_with("x-tollgate-") {
            self.fail(path, format!("`{s}`: x-tollgate-* headers are removed before policies run; choose another header"));
            return None;
        }
        Some(n)
    }

    fn header_name(&mut self, path: &str, s: &str) -> Option<HeaderName> {
        self.check(
            path,
            HeaderName::from_bytes(s.trim().to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("`{s}` is not a header name")),
        )
    }

    /// A header value, `${ENV}` substituted; secrets (substituted values) marked sensitive.
    fn header_value(&mut self, path: &str, written: &str) -> Option<HeaderValue> {
        let v = self.env_checked(path, written, |v| {
            HeaderValue::from_str(v).map_err(|_| format!("`{v}` is not a valid header value"))
        })?;
        let mut v = v;
        v.set_sensitive(written.contains("${"));
        Some(v)
    }

    fn headers(
        &mut self,
        path: &str,
        map: &BTreeMap<String, String>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        map.iter()
            .filter_map(|(k, v)| {
                let p = format!("{path}.{k}");
                Some((self.header_name(&p, k)?, self.header_value(&p, v)?))
            })
            .collect()
    }

    fn methods(&mut self, path: &str, list: &[String]) -> Vec<Method> {
        list.iter()
            .enumerate()
            .filter_map(|(j, m)| {
                self.check(
                    &format!("{path}[{j}]"),
                    Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                        .map_err(|_| format!("`{m}` is not an HTTP method")),
                )
            })
            .collect()
    }

    fn count(&mut self, path: &str, n: u64) -> u64 {
        self.number(path, n, 1, MAX_COUNT)
    }
}

fn window(e: &mut Errors, path: &str, s: &str) -> Window {
    Window::parse_fixed(s).unwrap_or_else(|| {
        e.fail(
            path,
            format!("`{s}`: write `second`, `minute`, `hour` or `day`"),
        );
        Window::Fixed(1000)
    })
}

fn queue(e: &mut Errors, path: &str, q: &Option<RawQueue>) -> Option<QueueSpec> {
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

fn rate_limit(e: &mut Errors, path: &str, r: &RawRateLimit) -> RateLimitSpec {
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
        },
        queue: queue(e, &format!("{path}.queue"), &r.queue),
    }
}

fn quota(
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
                },
                parent: None,
            }
        }
    }
}

fn concurrency(e: &mut Errors, path: &str, c: &RawConcurrency) -> ConcurrencyLimitSpec {
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

fn breaker(e: &mut Errors, path: &str, b: &RawBreaker) -> BreakerSpec {
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

/// A `name | definition` field: the declared resource, or the policy's own.
fn resolve<R, T>(
    e: &mut Errors,
    path: &str,
    policy: &str,
    r: &Option<RawRef<R>>,
    section: &str,
    declared: &BTreeMap<String, T>,
    mut build: impl FnMut(&mut Errors, &str, &R) -> T,
) -> Option<Resource<T>>
where
    T: Clone,
{
    match r.as_ref()? {
        RawRef::Name(n) => match declared.get(n) {
            Some(spec) => Some(Resource {
                name: n.clone(),
                declared: true,
                spec: spec.clone(),
            }),
            None => {
                let known: Vec<_> = declared.keys().map(String::as_str).collect();
                e.fail(
                    path,
                    format!(
                        "no {section} entry named `{n}`; declare it under `{section}:`{}",
                        if known.is_empty() {
                            String::new()
                        } else {
                            format!(" (declared: {})", known.join(", "))
                        }
                    ),
                );
                None
            }
        },
        RawRef::Inline(raw) => Some(Resource {
            name: format!("policy {policy}"),
            declared: false,
            spec: build(e, path, raw),
        }),
    }
}

fn mock(e: &mut Errors, path: &str, m: &RawMock) -> Option<Mock> {
    let status = e.check(
        &format!("{path}.status"),
        StatusCode::from_u16(m.status)
            .ok()
            .filter(|s| s.as_u16() >= 200)
            .ok_or_else(|| format!("{} is not a final status; write 200 to 599", m.status)),
    );
    let mut headers = HeaderMap::new();
    for (n, v) in e.headers(&format!("{path}.headers"), &m.headers) {
        headers.append(n, v);
    }
    let body = match (&m.body, &m.body_file) {
        (Some(_), Some(_)) => {
            e.fail(path, "write `body` or `body_file`, not both".into());
            Vec::new()
        }
        (Some(Value::String(s)), None) => s.clone().into_bytes(),
        (Some(v), None) => {
            headers
                .entry(http::header::CONTENT_TYPE)
                .or_insert(HeaderValue::from_static("application/json"));
            serde_json::to_vec(v).unwrap_or_default()
        }
        (None, Some(f)) => e
            .env_checked(&format!("{path}.body_file"), f, |f| {
                std::fs::read(f).map_err(|err| format!("cannot read `{f}`: {err}"))
            })
            .unwrap_or_default(),
        (None, None) => Vec::new(),
    };
    let when = match &m.when {
        None => When::Always,
        Some(w) => match (&w.header, &w.query) {
            (Some(h), None) => When::Header(e.read_header(&format!("{path}.when.header"), h)?),
            (None, Some(q)) => When::Query(q.clone()),
            _ => {
                e.fail(
                    &format!("{path}.when"),
                    "write one of `header: NAME` or `query: NAME`".into(),
                );
                When::Always
            }
        },
    };
    Some(Mock {
        status: status?,
        headers,
        body: body.into(),
        when,
    })
}

fn edits(
    e: &mut Errors,
    path: &str,
    set: &BTreeMap<String, String>,
    add: &BTreeMap<String, String>,
    remove: &[String],
) -> HeaderEdits {
    HeaderEdits {
        remove: remove
            .iter()
            .enumerate()
            .filter_map(|(i, h)| e.header_name(&format!("{path}.remove_headers[{i}]"), h))
            .collect(),
        set: e.headers(&format!("{path}.set_headers"), set),
        add: e.headers(&format!("{path}.add_headers"), add),
    }
}

/// `/v2/{owner}/{*}` against the match template.
fn rewrite(e: &mut Errors, path: &str, s: &str, template: Option<&PathTemplate>) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut rest = s;
    if !s.starts_with('/') {
        e.fail(path, format!("`{s}` must start with `/`"));
    }
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let Some(close) = rest[open..].find('}') else {
            e.fail(path, format!("`{s}`: a `{{` is never closed"));
            return pieces;
        };
        let name = &rest[open + 1..open + close];
        if name == "*" {
            if !template.is_some_and(PathTemplate::has_rest) {
                e.fail(
                    path,
                    format!("`{s}` uses `{{*}}`, but `match.path` has no trailing `*`"),
                );
            }
            pieces.push(Piece::Rest);
        } else {
            match template.and_then(|t| t.param(name)) {
                Some(i) => pieces.push(Piece::Param(i)),
                None => e.fail(
                    path,
                    format!("`{s}` uses `{{{name}}}`, which `match.path` does not define"),
                ),
            }
        }
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    pieces
}

fn credential(e: &mut Errors, path: &str, a: &RawAccount) -> Option<Credential> {
    let given = [
        a.bearer.is_some(),
        a.basic.is_some(),
        a.header.is_some(),
        a.query.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        e.fail(
            path,
            "write exactly one of `bearer`, `basic`, `header`, `query`".into(),
        );
        return None;
    }
    let sensitive = |mut v: HeaderValue| {
        v.set_sensitive(true);
        v
    };
    if let Some(b) = &a.bearer {
        let t = e.env(&format!("{path}.bearer"), b)?;
        let v = e.check(
            &format!("{path}.bearer"),
            HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| as_written("the token is not a valid header value".into(), &t, b)),
        )?;
        return Some(Credential::Header(
            http::header::AUTHORIZATION,
            sensitive(v),
        ));
    }
    if let Some(b) = &a.basic {
        let u = e.env(&format!("{path}.basic.username"), &b.username)?;
        let p = e.env(&format!("{path}.basic.password"), &b.password)?;
        let enc = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        let v = HeaderValue::from_str(&format!("Basic {enc}")).ok()?;
        return Some(Credential::Header(
            http::header::AUTHORIZATION,
            sensitive(v),
        ));
    }
    if let Some(h) = &a.header {
        let n = e.header_name(&format!("{path}.header.name"), &h.name)?;
        let v = e.env_checked(&format!("{path}.header.value"), &h.value, |v| {
            HeaderValue::from_str(v).map_err(|_| "not a valid header value".to_owned())
        })?;
        return Some(Credential::Header(n, sensitive(v)));
    }
    let q = a.query.as_ref()?;
    let v = e.env(&format!("{path}.query.value"), &q.value)?;
    let encoded: String = v
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    Some(Credential::Query(q.name.clone(), Secret::new(encoded)))
}

fn cache(e: &mut Errors, path: &str, c: &RawCache) -> CacheSpec {
    let at = |f: &str| format!("{path}.{f}");
    let methods = e.methods(&at("methods"), &c.methods);
    if !c.key_body
        && let Some(m) = methods
            .iter()
            .find(|m| !matches!(**m, Method::GET | Method::HEAD))
    {
        e.fail(
            &at("methods"),
            format!("caching {m} needs `key_body: true`: its body must be part of the key"),
        );
    }
    let statuses = c
        .statuses
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            e.check(
                &format!("{path}.statuses[{i}]"),
                if (200..=599).contains(s) {
                    Ok(*s)
                } else {
                    Err(format!("{s}: write a status from 200 to 599"))
                },
            )
        })
        .collect();
    CacheSpec {
        ttl: e.duration(&at("ttl"), &c.ttl, SEC, 30 * DAY),
        methods,
        statuses,
        key_headers: c
            .key_headers
            .iter()
            .enumerate()
            .filter_map(|(i, h)| e.header_name(&format!("{path}.key_headers[{i}]"), h))
            .collect(),
        key_body: c.key_body,
        max_entry: e.size(&at("max_entry"), &c.max_entry, 1, 1 << 30, "1B to 1GiB"),
        max_size: e.size(
            &at("max_size"),
            &c.max_size,
            1024,
            64 << 30,
            "1KiB to 64GiB",
        ) as u64,
        shared: c.shared,
        ignore_cache_control: c.ignore_cache_control,
        revalidate: c.revalidate,
    }
}

fn retry(e: &mut Errors, path: &str, r: &RawRetry) -> RetrySpec {
    let at = |f: &str| format!("{path}.{f}");
    RetrySpec {
        attempts: e.number(&at("attempts"), r.attempts, 2, 20),
        base_delay: e.duration(&at("base_delay"), &r.base_delay, Duration::ZERO, HOUR),
        max_delay: e.duration(&at("max_delay"), &r.max_delay, MS, HOUR),
        statuses: e
            .check(&at("statuses"), Statuses::parse(&r.statuses))
            .unwrap_or_default(),
        connect_errors: r.connect_errors,
        timeouts: r.timeouts,
        methods: e.methods(&at("methods"), &r.methods),
        max_body: e.size(&at("max_body"), &r.max_body, 0, 64 << 20, "0 to 64MiB"),
        budget: e.percent(&at("budget"), &r.budget),
        budget_window: e.duration(&at("budget_window"), &r.budget_window, SEC, HOUR),
        budget_min: e.number(&at("budget_min"), r.budget_min, 0, 1_000_000),
        deadline: r
            .deadline
            .as_deref()
            .map(|d| e.duration(&at("deadline"), d, MS, DAY)),
    }
}

fn throttle(e: &mut Errors, path: &str, t: &RawThrottle) -> ThrottleSpec {
    let wait = match t.action.as_str() {
        "reject" => false,
        "wait" => true,
        other => {
            e.fail(
                &format!("{path}.action"),
                format!("`{other}`: write `reject` or `wait`"),
            );
            false
        }
    };
    ThrottleSpec {
        wait,
        max_wait: e.duration(&format!("{path}.max_wait"), &t.max_wait, MS, HOUR),
        statuses: t.statuses.clone(),
        max_throttle: e.duration(&format!("{path}.max_throttle"), &t.max_throttle, SEC, DAY),
    }
}

pub(super) fn policies(e: &mut Errors, raw: &RawConfig) -> PolicySet {
    let rate_limits: BTreeMap<_, _> = raw
        .rate_limits
        .iter()
        .map(|(n, r)| (n.clone(), rate_limit(e, &format!("rate_limits.{n}"), r)))
        .collect();
    let quotas: BTreeMap<_, _> = raw
        .quotas
        .iter()
        .map(|(n, q)| {
            (
                n.clone(),
                quota(e, &format!("quotas.{n}"), q, &raw.quotas, 0),
            )
        })
        .collect();
    let concurrency_limits: BTreeMap<_, _> = raw
        .concurrency_limits
        .iter()
        .map(|(n, c)| {
            (
                n.clone(),
                concurrency(e, &format!("concurrency_limits.{n}"), c),
            )
        })
        .collect();
    let breakers: BTreeMap<_, _> = raw
        .breakers
        .iter()
        .map(|(n, b)| (n.clone(), breaker(e, &format!("breakers.{n}"), b)))
        .collect();

    let mut policies = Vec::new();
    for (i, p) in raw.policies.iter().enumerate() {
        let at = |f: &str| format!("policies[{i}].{f}");
        if p.name.trim().is_empty() {
            e.fail(&at("name"), "must not be empty".into());
        }
        if policies.iter().any(|o: &Policy| o.name == p.name) {
            e.fail(
                &at("name"),
                format!("policy name `{}` is used twice", p.name),
            );
        }
        let host = p
            .matcher
            .host
            .as_deref()
            .and_then(|h| e.check(&at("match.host"), HostGlob::new(h)));
        let path = p
            .matcher
            .path
            .as_deref()
            .and_then(|t| e.check(&at("match.path"), PathTemplate::new(t)));
        let methods = e.methods(&at("match.methods"), &p.matcher.methods);
        let name = p.name.as_str();

        let timeouts = p.timeouts.as_ref().map(|t| Timeouts {
            connect: t
                .connect
                .as_deref()
                .map(|d| e.duration(&at("timeouts.connect"), d, MS, HOUR)),
            response: t
                .response
                .as_deref()
                .map(|d| e.duration(&at("timeouts.response"), d, MS, DAY)),
            total: t
                .total
                .as_deref()
                .map(|d| e.duration(&at("timeouts.total"), d, MS, DAY)),
        });
        let request = p.request.as_ref().map(|r| {
            let json = (!r.json_set.is_empty() || !r.json_remove.is_empty()).then(|| {
                let ptr = |e: &mut Errors, path: &str, s: &str| {
                    if !s.starts_with('/') {
                        e.fail(path, format!("`{s}` is not a JSON pointer; write e.g. `/model` or `/options/temperature`"));
                    }
                };
                for k in r.json_set.keys() {
                    ptr(e, &at(&format!("request.json_set.{k}")), k);
                }
                for (j, k) in r.json_remove.iter().enumerate() {
                    ptr(e, &at(&format!("request.json_remove[{j}]")), k);
                }
                JsonEdits {
                    set: r.json_set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    remove: r.json_remove.clone(),
                    max_body: e.size(&at("request.max_body"), r.max_body.as_deref().unwrap_or("1MiB"), 1, 64 << 20, "1B to 64MiB"),
                }
            });
            RequestTransform {
                headers: edits(e, &at("request"), &r.set_headers, &r.add_headers, &r.remove_headers),
                path: r.path.as_deref().map(|s| (rewrite(e, &at("request.path"), s, path.as_ref()), path.clone())),
                json,
            }
        });
        let response = p.response.as_ref().map(|r| ResponseTransform {
            headers: edits(
                e,
                &at("response"),
                &r.set_headers,
                &r.add_headers,
                &r.remove_headers,
            ),
        });
        let credentials = p.credentials.as_ref().and_then(|c| {
            let single = RawAccount {
                bearer: c.bearer.clone(),
                basic: c.basic.clone(),
                header: c.header.clone(),
                query: c.query.clone(),
            };
            let has_single = single.bearer.is_some() || single.basic.is_some() || single.header.is_some() || single.query.is_some();
            let accounts: Vec<_> = match (has_single, c.accounts.is_empty()) {
                (true, true) => credential(e, &at("credentials"), &single).into_iter().collect(),
                (false, false) => c
                    .accounts
                    .iter()
                    .enumerate()
                    .filter_map(|(j, a)| credential(e, &at(&format!("credentials.accounts[{j}]")), a))
                    .collect(),
                _ => {
                    e.fail(&at("credentials"), "write one credential (`bearer`, `basic`, `header` or `query`) or `accounts: [...]`, not both".into());
                    Vec::new()
                }
            };
            let cooldown = e.duration(&at("credentials.cooldown"), c.cooldown.as_deref().unwrap_or("60s"), Duration::ZERO, DAY);
            (!accounts.is_empty()).then_some((accounts, cooldown))
        });
        let spec = PolicySpec {
            timeouts,
            mock: p.mock.as_ref().and_then(|m| mock(e, &at("mock"), m)),
            request,
            cache: p.cache.as_ref().map(|c| cache(e, &at("cache"), c)),
            breaker: resolve(
                e,
                &at("breaker"),
                name,
                &p.breaker,
                "breakers",
                &breakers,
                breaker,
            ),
            throttle: p
                .provider_throttling
                .as_ref()
                .map(|t| throttle(e, &at("provider_throttling"), t)),
            quota: resolve(
                e,
                &at("quota"),
                name,
                &p.quota,
                "quotas",
                &quotas,
                |e, path, q| quota(e, path, q, &raw.quotas, 0),
            ),
            rate_limit: resolve(
                e,
                &at("rate_limit"),
                name,
                &p.rate_limit,
                "rate_limits",
                &rate_limits,
                rate_limit,
            ),
            concurrency: resolve(
                e,
                &at("concurrency"),
                name,
                &p.concurrency,
                "concurrency_limits",
                &concurrency_limits,
                concurrency,
            ),
            response,
            credentials,
            retry: p.retry.as_ref().map(|r| retry(e, &at("retry"), r)),
        };
        policies.push(Policy {
            name: p.name.clone(),
            matcher: Matcher {
                host,
                path,
                methods,
            },
            spec,
        });
    }
    PolicySet { policies }
}

/// The policies as `/config` shows them (secrets masked).
pub(super) fn effective(c: &Config) -> Value {
    json!(c.policies.policies.iter().map(|p| {
        let s = &p.spec;
        let m = &p.matcher;
        json!({
            "name": p.name,
            "match": m.to_json(),
            "remedies": s.remedies(),
            "rate_limit": s.rate_limit.as_ref().map(|r| json!({"name": r.name, "limit": r.spec.limit.limit, "window": format!("{:?}", r.spec.limit.window), "queue": r.spec.queue.as_ref().map(|q| json!({"size": q.size, "max_wait": format_duration(q.max_wait)}))})),
            "quota": s.quota.as_ref().map(|q| json!({"name": q.name, "limit": q.spec.limit.limit})),
            "concurrency": s.concurrency.as_ref().map(|c| json!({"name": c.name, "max": c.spec.limit.max})),
            "breaker": s.breaker.as_ref().map(|b| json!({"name": b.name})),
            "credentials": s.credentials.as_ref().map(|(a, _)| a.iter().map(|c| c.describe()).collect::<Vec<_>>()),
            "cache": s.cache.as_ref().map(|c| json!({"ttl": format_duration(c.ttl), "max_size": c.max_size, "max_entry": c.max_entry})),
            "retry": s.retry.as_ref().map(|r| json!({"attempts": r.attempts})),
        })
    }).collect::<Vec<_>>())
}
