//! The per-policy remedies: mock, transformations, credentials, cache, retry, provider throttling.

use super::super::raw::*;
use super::super::validate::{DAY, Errors, HOUR, MS, SEC, as_written};
use crate::policy::PathTemplate;
use crate::policy::failure::Statuses;
use crate::policy::remedies::cache::CacheSpec;
use crate::policy::remedies::credentials::Credential;
use crate::policy::remedies::mock::{Mock, When};
use crate::policy::remedies::retry::RetrySpec;
use crate::policy::remedies::throttle::ThrottleSpec;
use crate::policy::remedies::transform::{HeaderEdits, Piece};
use crate::secret::Secret;
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) fn mock(e: &mut Errors, path: &str, m: &RawMock) -> Option<Mock> {
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

pub(super) fn edits(
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
pub(super) fn rewrite(
    e: &mut Errors,
    path: &str,
    s: &str,
    template: Option<&PathTemplate>,
) -> Vec<Piece> {
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

pub(super) fn credential(e: &mut Errors, path: &str, a: &RawAccount) -> Option<Credential> {
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

pub(super) fn cache(e: &mut Errors, path: &str, c: &RawCache) -> CacheSpec {
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

pub(super) fn retry(e: &mut Errors, path: &str, r: &RawRetry) -> RetrySpec {
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

pub(super) fn throttle(e: &mut Errors, path: &str, t: &RawThrottle) -> ThrottleSpec {
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
