//! Validation of `endpoints`: templates parsed (unknown parameters and answers of later
//! backends refused), timeouts bounded by the endpoint's, duplicate endpoints and
//! colliding groups refused, every error at its field path.

use super::raw_endpoints::*;
use super::validate::{Errors, HOUR, MS};
use crate::aggregate::merge::Shape;
use crate::aggregate::template::{PathTemplate, UrlTemplate};
use crate::aggregate::{Backend, Endpoint, Endpoints};
use crate::target::{Scheme, Target};
use http::Method;

pub(super) fn endpoints(e: &mut Errors, raw: &[RawEndpoint]) -> Endpoints {
    let mut list: Vec<Endpoint> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let p = |f: &str| format!("endpoints[{i}].{f}");
        let Some(path) = e.check(&p("path"), PathTemplate::parse(&r.path)) else {
            continue;
        };
        let method = method(e, &p("method"), &r.method);
        if let Some(other) = list
            .iter()
            .find(|o| o.method == method && same_shape(&o.path, &path))
        {
            e.fail(
                &p("path"),
                format!(
                    "`{} {}` is declared twice (as `{}` before)",
                    method, r.path, other.path.text
                ),
            );
        }
        let timeout = e.duration(&p("timeout"), &r.timeout, MS, HOUR);
        let noop = match r.encoding.as_str() {
            "json" => false,
            "no-op" => true,
            other => {
                e.fail(
                    &p("encoding"),
                    format!("`{other}` is not one of `json`, `no-op`"),
                );
                false
            }
        };
        if r.backends.is_empty() {
            e.fail(&p("backends"), "declare at least one backend".into());
        }
        if noop && r.backends.len() > 1 {
            e.fail(
                &p("encoding"),
                format!(
                    "`no-op` relays one backend's response untouched; this endpoint has {}: use `json` to merge them",
                    r.backends.len()
                ),
            );
        }
        let params: Vec<&str> = path.params().collect();
        let mut backends: Vec<Backend> = Vec::new();
        // Each kept backend's place in the file (one that failed validation is skipped).
        let mut places: Vec<usize> = Vec::new();
        for (j, b) in r.backends.iter().enumerate() {
            let bp = |f: &str| format!("endpoints[{i}].backends[{j}].{f}");
            if let Some(backend) = backend(e, b, j, &params, timeout, &bp) {
                if noop && backend.url.needs().next().is_some() {
                    e.fail(
                        &bp("url"),
                        "a `no-op` endpoint has no earlier answer to use".into(),
                    );
                }
                backends.push(backend);
                places.push(j);
            }
        }
        groups_collide(e, i, &backends, &places);
        // A backend runs one round after the latest of the backends its URL uses.
        for j in 0..backends.len() {
            backends[j].round = backends[j]
                .url
                .needs()
                .filter_map(|n| backends.get(n).map(|b| b.round + 1))
                .max()
                .unwrap_or(0);
        }
        list.push(Endpoint {
            method,
            timeout,
            cache_ttl: r
                .cache_ttl
                .as_ref()
                .map(|t| e.duration(&p("cache_ttl"), t, MS, super::validate::DAY * 365)),
            headers: r
                .headers
                .iter()
                .enumerate()
                .filter_map(|(k, h)| e.header_name(&format!("endpoints[{i}].headers[{k}]"), h))
                .collect(),
            query: r.query.clone(),
            noop,
            errors_key: r.errors_key.clone(),
            max_body_bytes: e.size(
                &p("max_body_bytes"),
                &r.max_body_bytes,
                1024,
                1 << 30,
                "1KiB to 1GiB",
            ),
            backends,
            label: path.text.as_str().into(),
            path,
        });
    }
    Endpoints::new(list)
}

fn method(e: &mut Errors, path: &str, m: &str) -> Method {
    e.check(
        path,
        Method::from_bytes(m.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("`{m}` is not an HTTP method")),
    )
    .unwrap_or(Method::GET)
}

/// Two paths that match the same requests (`/a/{x}` and `/a/{y}`).
fn same_shape(a: &PathTemplate, b: &PathTemplate) -> bool {
    let norm = |t: &PathTemplate| {
        t.text
            .split('/')
            .map(|s| if s.starts_with('{') { "{}" } else { s })
            .collect::<Vec<_>>()
            .join("/")
    };
    norm(a) == norm(b)
}

fn backend(
    e: &mut Errors,
    b: &RawBackend,
    index: usize,
    params: &[&str],
    endpoint_timeout: std::time::Duration,
    p: &dyn Fn(&str) -> String,
) -> Option<Backend> {
    // `${VAR}` from the environment first, as in routes' upstreams; `{name}` stays a template.
    let text = e.env(&p("url"), &b.url)?;
    let (target, pq) = e.check(&p("url"), split_url(&text))?;
    let url = e.check(&p("url"), UrlTemplate::parse(&pq, params, index))?;
    let timeout = match &b.timeout {
        Some(t) => {
            let d = e.duration(&p("timeout"), t, MS, HOUR);
            if d > endpoint_timeout {
                e.fail(
                    &p("timeout"),
                    format!(
                        "`{t}` is longer than the endpoint's timeout ({}), which bounds every backend",
                        super::units::format_duration(endpoint_timeout)
                    ),
                );
            }
            d
        }
        None => endpoint_timeout,
    };
    let dotted = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
    for (k, f) in b.allow.iter().chain(&b.deny).enumerate() {
        if f.is_empty() || f.split('.').any(str::is_empty) {
            e.fail(
                &p(if k < b.allow.len() { "allow" } else { "deny" }),
                format!("`{f}` is not a field path; write e.g. `name` or `user.name`"),
            );
        }
    }
    Some(Backend {
        name: b
            .name
            .clone()
            .or_else(|| b.group.clone())
            .unwrap_or_else(|| format!("backend{index}"))
            .into(),
        target,
        url,
        method: method(e, &p("method"), &b.method),
        timeout,
        shape: Shape {
            collection: b.collection.clone(),
            target: b.target.as_deref().map(dotted),
            allow: b.allow.iter().map(|s| dotted(s)).collect(),
            deny: b.deny.iter().map(|s| dotted(s)).collect(),
            mapping: b
                .mapping
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            group: b.group.clone(),
        },
        round: 0,
    })
}

/// `scheme://host[:port]` as a target, and the rest (path and query, `/` when empty).
fn split_url(url: &str) -> Result<(Target, String), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{url}` must start with http:// or https://"))?;
    let scheme = Scheme::parse(scheme)
        .ok_or_else(|| format!("`{url}` must start with http:// or https://"))?;
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, pq) = rest.split_at(cut);
    if authority.contains('{') {
        return Err(format!(
            "`{url}`: the host is fixed; parameters go in the path and query"
        ));
    }
    let target = Target::parse(scheme, authority).map_err(|m| format!("`{url}`: {m}"))?;
    let pq = if pq.starts_with('/') {
        pq.to_owned()
    } else {
        format!("/{pq}")
    };
    Ok((target, pq))
}

/// Two backends grouped under one key, or a group named like a field another backend
/// maps to, would overwrite each other in the merge.
fn groups_collide(e: &mut Errors, i: usize, backends: &[Backend], places: &[usize]) {
    for (j, b) in backends.iter().enumerate() {
        let Some(g) = &b.shape.group else { continue };
        let at = format!("endpoints[{i}].backends[{}].group", places[j]);
        for (k, o) in backends.iter().enumerate() {
            let other = places[k];
            if k < j && o.shape.group.as_deref() == Some(g) {
                e.fail(
                    &at,
                    format!("group `{g}` is also backends[{other}]'s: one would overwrite the other; choose another name"),
                );
            }
            if k != j && o.shape.mapping.iter().any(|(_, to)| to == g) {
                e.fail(
                    &at,
                    format!("group `{g}` is a field backends[{other}] maps to: one would overwrite the other; choose another name"),
                );
            }
        }
    }
}
