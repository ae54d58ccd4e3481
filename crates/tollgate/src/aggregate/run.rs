//! Running an aggregated endpoint: the backend calls, round by round (a round's calls in
//! parallel; a backend whose URL uses an earlier answer runs in a later round), each
//! through the policy its request matches (or the plain client), each bounded by its own
//! timeout and by the endpoint's deadline; then the merge and the honest answer: complete,
//! partial (`x-tollgate-completed: false`, the failed backends named), or the error
//! contract when every backend failed.

use super::{Backend, Endpoint};
use crate::body::{Body, full};
use crate::error::ProxyError;
use crate::policy::chain::Exchange;
use crate::policy::engine;
use crate::state::{Runtime, Worker};
use crate::upstream::deadline::ResponseTimer;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri, header};
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

/// `x-tollgate-completed`: `true` when every backend answered, `false` on a partial answer.
pub const X_TOLLGATE_COMPLETED: HeaderName = HeaderName::from_static("x-tollgate-completed");
/// `x-tollgate-failed-backends`: the names of the backends that failed, comma separated.
pub const X_TOLLGATE_FAILED_BACKENDS: HeaderName =
    HeaderName::from_static("x-tollgate-failed-backends");

/// What a client's request brings to an endpoint: which endpoint, its path parameters,
/// and only the headers and query parameters the endpoint declares.
pub struct Call {
    pub index: usize,
    pub params: Vec<String>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `name=value` pairs joined with `&` (as the client wrote them), or empty.
    pub query: String,
}

impl Call {
    /// Picks what the endpoint declares out of the client's request.
    pub fn new(
        e: &Endpoint,
        index: usize,
        params: Vec<&str>,
        headers: &http::HeaderMap,
        uri: &Uri,
    ) -> Self {
        let headers = e
            .headers
            .iter()
            .flat_map(|n| {
                headers
                    .get_all(n)
                    .iter()
                    .map(move |v| (n.clone(), v.clone()))
            })
            .collect();
        let query = uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter(|kv| {
                        let name = kv.split_once('=').map_or(*kv, |(k, _)| k);
                        e.query.iter().any(|d| d == name)
                    })
                    .collect::<Vec<_>>()
                    .join("&")
            })
            .unwrap_or_default();
        Self {
            index,
            params: params.into_iter().map(str::to_owned).collect(),
            headers,
            query,
        }
    }
}

/// Why a backend did not contribute.
enum Failure {
    Timeout,
    Failed(String),
}

impl Failure {
    fn code(&self) -> &'static str {
        match self {
            Failure::Timeout => "upstream_timeout",
            Failure::Failed(_) => "upstream_error",
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Timeout => "no answer within its timeout".into(),
            Failure::Failed(m) => m.clone(),
        }
    }
}

/// Answers one call of an endpoint.
pub async fn run(
    call: Call,
    worker: &Worker,
    rt: &Runtime,
    timer: &ResponseTimer,
) -> Result<Response<Body>, ProxyError> {
    let e = rt
        .config
        .endpoints
        .get(call.index)
        .ok_or_else(|| ProxyError::Upstream("the endpoint left with a reload".into()))?;
    let f = Fanout {
        e,
        call: &call,
        worker,
        rt,
        timer,
        deadline: Instant::now() + e.timeout,
    };
    if e.noop {
        let b = &e.backends[0];
        let pq = b
            .url
            .render(&call.params, &[])
            .ok_or_else(|| ProxyError::BadTarget("the backend URL cannot be built".into()))?;
        return f.send(b, with_query(pq, &call.query), f.limit(b)).await;
    }
    let rounds = e.backends.iter().map(|b| b.round).max().unwrap_or(0);
    let mut answers: Vec<Option<Value>> = vec![None; e.backends.len()];
    let mut failures: Vec<Option<Failure>> = (0..e.backends.len()).map(|_| None).collect();
    for round in 0..=rounds {
        let calls: Vec<_> = e
            .backends
            .iter()
            .enumerate()
            .filter(|(_, b)| b.round == round)
            .map(|(i, b)| f.one(b, i, &answers))
            .collect();
        for (i, r) in futures_util::future::join_all(calls).await {
            match r {
                Ok(v) => answers[i] = Some(v),
                Err(fail) => failures[i] = Some(fail),
            }
        }
    }
    respond(e, answers, failures)
}

/// What every backend call of one endpoint call shares.
struct Fanout<'a> {
    e: &'a Endpoint,
    call: &'a Call,
    worker: &'a Worker,
    rt: &'a Runtime,
    timer: &'a ResponseTimer,
    /// The endpoint's deadline, which bounds every backend's own timeout.
    deadline: Instant,
}

/// The merged answer, partial or complete, or the error when every backend failed.
fn respond(
    e: &Endpoint,
    answers: Vec<Option<Value>>,
    failures: Vec<Option<Failure>>,
) -> Result<Response<Body>, ProxyError> {
    let failed: Vec<(&Backend, &Failure)> = e
        .backends
        .iter()
        .zip(&failures)
        .filter_map(|(b, f)| f.as_ref().map(|f| (b, f)))
        .collect();
    if failed.len() == e.backends.len() {
        if failed.iter().all(|(_, f)| matches!(f, Failure::Timeout)) {
            return Err(ProxyError::UpstreamTimeout {
                target: format!("every backend of endpoint `{}`", e.path.text),
                stage: "answer",
                limit: e.timeout,
            });
        }
        return Err(ProxyError::Upstream(format!(
            "every backend of endpoint `{}` failed: {}",
            e.path.text,
            failed
                .iter()
                .map(|(b, f)| format!("{}: {}", b.name, f.message()))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    let mut merged = Map::new();
    let mut failed_now = Vec::new();
    for ((b, answer), failure) in e.backends.iter().zip(answers).zip(&failures) {
        if failure.is_some() {
            continue;
        }
        let Some(answer) = answer else { continue };
        match b.shape.apply(answer) {
            Ok(part) => super::merge::merge(&mut merged, part),
            Err(m) => failed_now.push((b, Failure::Failed(m.into()))),
        }
    }
    let mut names: Vec<&str> = failed.iter().map(|(b, _)| b.name.as_str()).collect();
    names.extend(failed_now.iter().map(|(b, _)| b.name.as_str()));
    let complete = names.is_empty();
    if !complete && let Some(key) = &e.errors_key {
        let errors: Map<String, Value> = failed
            .iter()
            .map(|(b, f)| (*b, *f))
            .chain(failed_now.iter().map(|(b, f)| (*b, f)))
            .map(|(b, f)| {
                (
                    b.name.clone(),
                    json!({"error": f.code(), "message": f.message()}),
                )
            })
            .collect();
        merged.insert(key.clone(), Value::Object(errors));
    }
    let body = serde_json::to_vec(&Value::Object(merged)).unwrap_or_default();
    let mut resp = Response::new(full(Bytes::from(body)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        X_TOLLGATE_COMPLETED,
        HeaderValue::from_static(if complete { "true" } else { "false" }),
    );
    if !complete && let Ok(v) = HeaderValue::from_str(&names.join(",")) {
        h.insert(X_TOLLGATE_FAILED_BACKENDS, v);
    }
    if let (true, Some(ttl)) = (complete, e.cache_ttl)
        && let Ok(v) = HeaderValue::from_str(&format!("public, max-age={}", ttl.as_secs()))
    {
        h.insert(header::CACHE_CONTROL, v);
    }
    Ok(resp)
}

fn with_query(pq: String, query: &str) -> String {
    if query.is_empty() {
        pq
    } else if pq.contains('?') {
        format!("{pq}&{query}")
    } else {
        format!("{pq}?{query}")
    }
}

impl Fanout<'_> {
    /// A backend's time limit: its own timeout, cut to what is left of the endpoint's.
    fn limit(&self, b: &Backend) -> std::time::Duration {
        b.timeout
            .min(self.deadline.saturating_duration_since(Instant::now()))
    }

    /// One backend's call in its round: its URL built (from the parameters and the
    /// earlier answers it uses), sent, and its JSON answer read, within its limit. A
    /// method, not a closure: the closure's future made the request's future fail the
    /// `Send` check (rust-lang/rust#64552).
    async fn one(
        &self,
        b: &Backend,
        i: usize,
        answers: &[Option<Value>],
    ) -> (usize, Result<Value, Failure>) {
        let limit = self.limit(b);
        let Some(pq) = b.url.render(&self.call.params, answers) else {
            let why = if b.url.needs().any(|n| answers[n].is_none()) {
                "a backend its URL uses did not answer"
            } else {
                "a field its URL uses is missing from an earlier answer"
            };
            return (i, Err(Failure::Failed(why.into())));
        };
        let pq = with_query(pq, &self.call.query);
        let r = tokio::time::timeout(limit, self.json_answer(b, pq, limit))
            .await
            .unwrap_or(Err(Failure::Timeout));
        (i, r)
    }

    /// One backend's JSON answer (any 2xx), read up to the endpoint's body limit.
    async fn json_answer(
        &self,
        b: &Backend,
        pq: String,
        limit: std::time::Duration,
    ) -> Result<Value, Failure> {
        let e = self.e;
        let resp = self.send(b, pq, limit).await.map_err(|err| match err {
            ProxyError::UpstreamTimeout { .. } => Failure::Timeout,
            other => Failure::Failed(format!("{} ({})", other, other.code())),
        })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Failure::Failed(format!("answered {}", status.as_u16())));
        }
        // Read frame by frame rather than through `Limited`, whose boxed error type made the
        // request's future fail the `Send` check.
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|err| Failure::Failed(format!("reading the answer: {err}")))?;
            if let Some(d) = frame.data_ref() {
                if buf.len() + d.len() > e.max_body_bytes {
                    return Err(Failure::Failed(format!(
                        "the answer is larger than max_body_bytes ({} bytes)",
                        e.max_body_bytes
                    )));
                }
                buf.extend_from_slice(d);
            }
        }
        serde_json::from_slice(&buf)
            .map_err(|err| Failure::Failed(format!("the answer is not JSON: {err}")))
    }

    /// Sends one backend request through the policy it matches, else the plain client.
    async fn send(
        &self,
        b: &Backend,
        pq: String,
        limit: std::time::Duration,
    ) -> Result<Response<Body>, ProxyError> {
        let (call, worker, rt, timer) = (self.call, self.worker, self.rt, self.timer);
        let target = &b.target;
        if !rt.config.domains.permits(&target.host) {
            return Err(ProxyError::DomainDenied(target.host.to_string()));
        }
        let pq = http::uri::PathAndQuery::try_from(pq)
            .map_err(|e| ProxyError::BadTarget(format!("backend `{}`: {e}", b.name)))?;
        let path = pq.path().to_owned();
        let mut req = Request::new(crate::body::empty());
        *req.method_mut() = b.method.clone();
        let h = req.headers_mut();
        for (n, v) in &call.headers {
            h.append(n.clone(), v.clone());
        }
        // The same request form as a proxied call.
        *req.uri_mut() = crate::proxy::upstream_uri(target, pq, req.headers_mut(), false)?;
        let h = req.headers_mut();
        h.append(header::VIA, worker.local().via.clone());
        if b.method != Method::GET && b.method != Method::HEAD {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        }
        match rt.config.policies.find(&target.host, &b.method, &path) {
            Some(i) => {
                let x = Exchange::new(rt.engine.chains[i].clone(), req, target.clone());
                let mut diag = None;
                engine::run(x, rt, timer, &mut diag)
                    .await
                    .map(|d| d.response)
            }
            None => {
                let sent = Instant::now();
                rt.client
                    .send_within(req, target, timer, sent, limit, true)
                    .await
                    .map(|r| r.map(|b| b.boxed_unsync()))
            }
        }
    }
}
