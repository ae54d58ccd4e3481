//! Mock / early response: answers without calling the provider, always or only when a
//! request header or query parameter asks for it. The response carries
//! `x-tollgate-generated: true`, like everything tollgate makes up.

use crate::body::full;
use crate::fields::Errors;
use crate::headers::X_TOLLGATE_GENERATED;
use crate::policy::actions::Actions;
use crate::policy::chain::{Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Mock {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub when: When,
}

/// When the mock answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    Always,
    Header(HeaderName),
    Query(String),
}

/// A flag's value that means "off".
fn on(v: &[u8]) -> bool {
    !matches!(v, b"false" | b"0")
}

impl Mock {
    fn applies(&self, x: &Exchange) -> bool {
        match &self.when {
            When::Always => true,
            When::Header(h) => x.parts.headers.get(h).is_some_and(|v| on(v.as_bytes())),
            When::Query(q) => x.parts.uri.query().is_some_and(|query| {
                query.split('&').any(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    k == q && on(v.as_bytes())
                })
            }),
        }
    }
}

/// A policy's mock, counted: each answer it makes is an `answered` action in
/// `tollgate_remedy_actions_total` and `/remedy-stats`, like any remedy's.
pub struct MockStage {
    pub mock: Mock,
    pub actions: Actions<Action>,
}

crate::policy::actions::actions! {
    /// What a mock did.
    pub enum Action for "mock" {
        Answered = "answered",
    }
}

/// `mock:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "mock";
    const PHASES: Phases = Phases {
        request: "may answer (no provider call), counted `answered`",
        attempt: "",
        response: "",
    };
    const EXAMPLE: &'static str =
        "{status: 200, headers: {content-type: text/plain}, body: hello, when: {header: x-mock}}";
    type Raw = RawMock;
    type Spec = Mock;
    type Action = Action;
    type Metrics = ();

    fn validate(raw: &RawMock, cx: &mut Check<'_>) -> Option<Mock> {
        mock(cx.errors, &cx.path, raw)
    }

    fn build(spec: &Mock, b: &mut Build<'_>) -> Built {
        Built::from(Arc::new(MockStage {
            mock: spec.clone(),
            actions: b.actions(),
        }))
    }
}

impl Remedy for MockStage {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        let m = &self.mock;
        let flow = if m.applies(x) {
            self.actions.record(x, Action::Answered);
            let mut resp = Response::new(full(m.body.clone()));
            *resp.status_mut() = m.status;
            *resp.headers_mut() = m.headers.clone();
            resp.headers_mut()
                .insert(X_TOLLGATE_GENERATED, HeaderValue::from_static("true"));
            Flow::Answer(resp)
        } else {
            Flow::Continue
        };
        Phase::Now(Ok(flow))
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMock {
    /// Status of the made-up response, 200 to 599.
    #[serde(default = "ok")]
    pub status: u16,
    /// Response headers (`${ENV}` substituted).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body, inline: text, or a mapping or list, sent as JSON (with `content-type: application/json` unless set).
    pub body: Option<serde_json::Value>,
    /// Response body read from this file at load (relative to the working directory); `body` or `body_file`, not both.
    pub body_file: Option<String>,
    /// Only answer when the request says so; absent: always.
    pub when: Option<RawWhen>,
}

fn ok() -> u16 {
    200
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawWhen {
    /// Answer when this request header is present (any value but `false` or `0`).
    pub header: Option<String>,
    /// Answer when this query parameter is present (any value but `false` or `0`).
    pub query: Option<String>,
}

pub fn mock(e: &mut Errors, path: &str, m: &RawMock) -> Option<Mock> {
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
        (Some(serde_json::Value::String(s)), None) => s.clone().into_bytes(),
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
