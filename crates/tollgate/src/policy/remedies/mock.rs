//! Mock / early response: answers without calling the provider, always or only when a
//! request header or query parameter asks for it. The response carries
//! `x-tollgate-generated: true`, like everything tollgate makes up.

use crate::body::full;
use crate::error::ProxyError;
use crate::headers::X_TOLLGATE_GENERATED;
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Exchange, Flow, Remedy, Stage};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

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

impl Remedy for MockStage {
    fn stage(&self) -> Stage {
        Stage::Mock
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
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
        Box::pin(std::future::ready(Ok(flow)))
    }
}
