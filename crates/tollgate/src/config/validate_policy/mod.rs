//! Validation of policies and of the shared limits they name: every value range-checked,
//! every reference resolved, errors at the field path with what to write.

mod limits;
mod remedies;
mod values;

use super::Config;
use super::raw::*;
use super::validate::{DAY, Errors, HOUR, MS};
use crate::glob::HostGlob;
use crate::policy::remedies::timeouts::Timeouts;
use crate::policy::remedies::transform::{JsonEdits, RequestTransform, ResponseTransform};
use crate::policy::spec::{PolicySpec, Resource};
use crate::policy::{Matcher, PathTemplate, Policy, PolicySet};
use limits::*;
use remedies::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

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
    // Every key as written (defaults filled in, shared definitions resolved, secrets
    // masked), and the chain the policy compiled to.
    let written = c.written["policies"].as_array();
    json!(
        c.policies
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut v = written
                    .and_then(|w| w.get(i))
                    .cloned()
                    .unwrap_or_else(|| json!({"name": p.name}));
                v["remedies"] = json!(p.spec.remedies());
                v
            })
            .collect::<Vec<_>>()
    )
}
