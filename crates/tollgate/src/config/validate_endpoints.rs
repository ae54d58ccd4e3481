//! Validation of `endpoints`: templates parsed (unknown parameters and answers of later
//! backends refused), timeouts bounded by the endpoint's, duplicate endpoints and
//! colliding groups refused, every error at its field path.

use super::raw_endpoints::*;
use crate::aggregate::merge::Shape;
use crate::aggregate::template::{EndpointPath, UrlTemplate};
use crate::aggregate::{Backend, Endpoint, Endpoints};
use crate::fields::Errors;
use crate::target::{Scheme, Target};
use http::Method;

/// The defaults, validated.
struct Defaults {
    timeout: std::time::Duration,
    cache_ttl: Option<std::time::Duration>,
    /// `scheme://authority` for backend URLs written as a path.
    host: Option<String>,
    user_agent: http::HeaderValue,
}

fn defaults(e: &mut Errors, d: &RawEndpointDefaults) -> Defaults {
    let p = |f: &str| format!("endpoint_defaults.{f}");
    let host = d.host.as_ref().and_then(|h| {
        let h = e.env(&p("host"), h)?;
        let h = h.trim_end_matches('/').to_owned();
        match split_url(&h) {
            Ok((_, pq)) if pq == "/" => Some(h),
            Ok(_) => {
                e.fail(
                    &p("host"),
                    format!("`{h}`: write the scheme and host only (`https://api.example.com`); paths go in each backend's `url`"),
                );
                None
            }
            Err(m) => {
                e.fail(&p("host"), m);
                None
            }
        }
    });
    Defaults {
        timeout: d.timeout.get(),
        cache_ttl: d.cache_ttl.as_ref().map(|t| t.get()),
        host,
        user_agent: d
            .user_agent
            .as_ref()
            .and_then(|ua| user_agent(e, &p("user_agent"), ua))
            .unwrap_or_else(|| {
                http::HeaderValue::from_static(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
            }),
    }
}

fn user_agent(e: &mut Errors, path: &str, ua: &str) -> Option<http::HeaderValue> {
    e.check(
        path,
        http::HeaderValue::from_str(ua)
            .map_err(|_| format!("`{ua}` cannot be a header value (no control characters)")),
    )
}

/// `["*"]`: everything; `*` beside names is refused (it would silently mean all).
fn all(e: &mut Errors, path: &str, names: &[String]) -> bool {
    let star = names.iter().any(|n| n == "*");
    if star && names.len() > 1 {
        e.fail(
            path,
            "`*` passes everything: write `[\"*\"]` alone, or list names without it".into(),
        );
    }
    star
}

pub(super) fn endpoints(
    e: &mut Errors,
    raw: &[RawEndpoint],
    raw_defaults: &RawEndpointDefaults,
) -> Endpoints {
    let defaults = defaults(e, raw_defaults);
    let mut list: Vec<Endpoint> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let p = |f: &str| format!("endpoints[{i}].{f}");
        let Some(path) = e.check(&p("path"), EndpointPath::parse(&r.path)) else {
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
        let timeout = r.timeout.as_ref().map_or(defaults.timeout, |t| t.get());
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
            if let Some(backend) = backend(e, b, j, &params, timeout, &defaults, &bp) {
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
            cache_ttl: r.cache_ttl.as_ref().map(|t| t.get()).or(defaults.cache_ttl),
            all_headers: all(e, &p("headers"), &r.headers),
            headers: r
                .headers
                .iter()
                .enumerate()
                .filter(|(_, h)| *h != "*")
                .filter_map(|(k, h)| e.header_name(&format!("endpoints[{i}].headers[{k}]"), h))
                .collect(),
            all_query: all(e, &p("query"), &r.query),
            query: r.query.iter().filter(|q| *q != "*").cloned().collect(),
            user_agent: r
                .user_agent
                .as_ref()
                .and_then(|ua| user_agent(e, &p("user_agent"), ua))
                .unwrap_or_else(|| defaults.user_agent.clone()),
            noop,
            errors_key: r.errors_key.clone(),
            max_body_bytes: r.max_body_bytes.get(),
            backends,
            label: path.text.as_str().into(),
            path,
        });
    }
    Endpoints::new(list)
}

fn method(e: &mut Errors, path: &str, m: &str) -> Method {
    e.check(path, crate::fields::method(m))
        .unwrap_or(Method::GET)
}

/// Two paths that match the same requests (`/a/{x}` and `/a/{y}`).
fn same_shape(a: &EndpointPath, b: &EndpointPath) -> bool {
    let norm = |t: &EndpointPath| {
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
    defaults: &Defaults,
    p: &dyn Fn(&str) -> String,
) -> Option<Backend> {
    // `${VAR}` from the environment first, as in routes' upstreams; `{name}` stays a template.
    let mut text = e.env(&p("url"), &b.url)?;
    if text.starts_with('/') {
        let Some(host) = &defaults.host else {
            e.fail(
                &p("url"),
                format!("`{text}` is a path: write the whole URL (`https://api.example.com{text}`), or set `endpoint_defaults.host`"),
            );
            return None;
        };
        text = format!("{host}{text}");
    }
    let (target, pq) = e.check(&p("url"), split_url(&text))?;
    let url = e.check(&p("url"), UrlTemplate::parse(&pq, params, index))?;
    let timeout = match &b.timeout {
        Some(t) => {
            let d = t.get();
            if d > endpoint_timeout {
                e.fail(
                    &p("timeout"),
                    format!(
                        "`{t:?}` is longer than the endpoint's timeout ({}), which bounds every backend",
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
