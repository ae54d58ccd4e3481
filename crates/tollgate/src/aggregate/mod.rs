//! Aggregated endpoints (`endpoints:`): a path and method on the proxy listener answered
//! by calling several backends, in parallel (or after the backends whose answers their
//! URLs use), and merging their JSON answers; or, with `encoding: no-op`, relaying one
//! backend's response untouched. docs/aggregation.md is the user's guide. This module is
//! what an endpoint is (validated definitions, templates, merging, the outcome record); the
//! fan-out that runs one lives with the request path, in `request/aggregate.rs`.

pub mod inflate;
pub mod merge;
pub mod outcome;
pub mod template;

use crate::target::Target;
use http::{HeaderName, Method};
use merge::Shape;
use std::sync::Arc;
use std::time::Duration;
use template::{EndpointPath, UrlTemplate};

/// One backend of an endpoint (validated).
#[derive(Debug, Clone)]
pub struct Backend {
    /// Its metric label and the name partial answers give it.
    pub name: Arc<str>,
    pub target: Target,
    pub url: UrlTemplate,
    pub method: Method,
    pub timeout: Duration,
    pub shape: Shape,
    /// Which round of the fan-out it runs in: 0 for backends that need no other's
    /// answer, else one more than the latest round of the backends it uses.
    pub round: usize,
}

/// One aggregated endpoint (validated).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub path: EndpointPath,
    /// The path template, shared with each call's outcome (a metric label).
    pub label: Arc<str>,
    pub method: Method,
    pub timeout: Duration,
    pub cache_ttl: Option<Duration>,
    pub headers: Vec<HeaderName>,
    /// `headers: ["*"]`: every end-to-end client header goes on.
    pub all_headers: bool,
    pub query: Vec<String>,
    /// `query: ["*"]`: the whole client query goes on.
    pub all_query: bool,
    /// Sent unless the client's `User-Agent` is passed on.
    pub user_agent: http::HeaderValue,
    pub noop: bool,
    pub errors_key: Option<String>,
    pub max_body_bytes: usize,
    pub backends: Vec<Backend>,
}

impl Endpoint {
    /// Whether a client's body goes to this endpoint's backends: one of them sends a
    /// method that carries a body (POST, PUT, PATCH, DELETE, …).
    pub fn wants_body(&self) -> bool {
        self.backends.iter().any(|b| carries_body(&b.method))
    }
}

/// A method whose requests carry a body here (RFC 9110 §9.3: GET and HEAD requests have
/// no defined body semantics, so none is sent with them).
pub fn carries_body(m: &Method) -> bool {
    m != Method::GET && m != Method::HEAD
}

/// The endpoints of a config, tried in declaration order.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    list: Vec<Endpoint>,
}

impl Endpoints {
    pub fn new(list: Vec<Endpoint>) -> Self {
        Self { list }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> {
        self.list.iter()
    }

    pub fn get(&self, i: usize) -> Option<&Endpoint> {
        self.list.get(i)
    }

    /// The endpoint answering `method` on `path`, and its parameters' values.
    /// The endpoint a request calls: of those matching, the most specific (literal
    /// segments win over parameters whatever the declaration order: `/users/me` over
    /// `/users/{id}`).
    pub fn find<'a>(&self, method: &Method, path: &'a str) -> Option<(usize, Vec<&'a str>)> {
        let mut best: Option<(usize, Vec<&'a str>)> = None;
        for (i, e) in self.list.iter().enumerate() {
            if e.method != method {
                continue;
            }
            if let Some(params) = e.path.matches(path)
                && best
                    .as_ref()
                    .is_none_or(|(b, _)| e.path.beats(&self.list[*b].path))
            {
                best = Some((i, params));
            }
        }
        best
    }

    /// The effective form, for `/config`.
    pub fn effective(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.list
                .iter()
                .map(|e| {
                    serde_json::json!({
                        "path": e.path.text,
                        "method": e.method.as_str(),
                        "timeout": crate::fields::units::format_duration(e.timeout),
                        "cache_ttl": e.cache_ttl.map(crate::fields::units::format_duration),
                        "headers": if e.all_headers { vec!["*"] } else { e.headers.iter().map(|h| h.as_str()).collect::<Vec<_>>() },
                        "query": if e.all_query { vec!["*".to_owned()] } else { e.query.clone() },
                        "user_agent": e.user_agent.to_str().unwrap_or(""),
                        "encoding": if e.noop { "no-op" } else { "json" },
                        "errors_key": e.errors_key,
                        "max_body_bytes": e.max_body_bytes,
                        "backends": e.backends.iter().map(|b| serde_json::json!({
                            "name": &*b.name,
                            "host": b.target.authority.as_str(),
                            "method": b.method.as_str(),
                            "timeout": crate::fields::units::format_duration(b.timeout),
                            "group": b.shape.group,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        )
    }
}
