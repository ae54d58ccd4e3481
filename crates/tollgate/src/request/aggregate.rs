//! Running an aggregated endpoint: the backend calls, round by round (a round's calls in
//! parallel; a backend whose URL uses an earlier answer runs in a later round), each
//! through the policy its request matches (or the plain client), each bounded by its own
//! timeout and by the endpoint's deadline; then the merge and the honest answer: complete,
//! partial (`x-tollgate-completed: false`, the failed backends named), or the error
//! contract when every backend failed.

use crate::aggregate::outcome::{self, BackendOutcome, Outcome};
use crate::aggregate::template::Answer;
use crate::aggregate::{Backend, Endpoint, carries_body};
use crate::body::{Body, ReadError, full, read_capped};
use crate::error::ProxyError;
use crate::metrics::method_label;
use crate::state::{Runtime, Worker};
use crate::upstream::deadline::ResponseTimer;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, Uri, header};
use serde_json::{Map, Value, json};
use std::time::Duration;
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
    /// The client's body's type and length, sent on with its body.
    pub content_type: Option<HeaderValue>,
    pub content_length: Option<u64>,
}

impl Call {
    /// Picks what the endpoint declares out of the client's request.
    pub fn new(
        e: &Endpoint,
        index: usize,
        params: Vec<&str>,
        headers_in: &http::HeaderMap,
        uri: &Uri,
    ) -> Self {
        let headers = if e.all_headers {
            every_header(headers_in)
        } else {
            e.headers
                .iter()
                .flat_map(|n| {
                    headers_in
                        .get_all(n)
                        .iter()
                        .map(move |v| (n.clone(), v.clone()))
                })
                .collect()
        };
        let query = uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter(|kv| {
                        if e.all_query {
                            return !kv.is_empty();
                        }
                        // Declared names are matched decoded: `page%5Bnumber%5D` is
                        // `page[number]`, as requests and browsers send it.
                        let raw = kv.split_once('=').map_or(*kv, |(k, _)| k);
                        let name = crate::paths::percent_decode(raw);
                        let name = name.as_deref().unwrap_or(raw);
                        e.query.iter().any(|d| d == name)
                    })
                    .collect::<Vec<_>>()
                    .join("&")
            })
            .unwrap_or_default();
        let content_length = headers_in
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        Self {
            index,
            params: params.into_iter().map(str::to_owned).collect(),
            headers,
            query,
            content_type: headers_in.get(header::CONTENT_TYPE).cloned(),
            content_length,
        }
    }
}

/// `headers: ["*"]` (KrakenD's `input_headers: ["*"]`): the client's end-to-end
/// headers, in order — never hop-by-hop ones, tollgate's own `x-tollgate-*` or
/// `Proxy-Authorization`, nor `Host`, the framing (`Content-Length`, `Expect`; the body's
/// type goes on with the body) or `Accept-Encoding` (tollgate reads the answers, so it
/// asks for what it can decode).
fn every_header(headers_in: &http::HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    let mut h = headers_in.clone();
    crate::headers::strip_for_upstream(&mut h);
    let mut out = Vec::with_capacity(h.len());
    let mut name: Option<HeaderName> = None;
    for (n, v) in h {
        if let Some(n) = n {
            name = Some(n);
        }
        let Some(n) = &name else { continue };
        let skip = [
            header::HOST,
            header::CONTENT_LENGTH,
            header::CONTENT_TYPE,
            header::EXPECT,
            header::ACCEPT_ENCODING,
        ]
        .contains(n);
        if !skip {
            out.push((n.clone(), v));
        }
    }
    out
}

/// Why a backend did not contribute.
enum Failure {
    Timeout,
    /// Still waiting (a queue) at the gateway's drain deadline.
    ShuttingDown,
    Failed(String),
    /// Not called: its URL needs an answer that is missing.
    Skipped(&'static str),
}

impl Failure {
    fn code(&self) -> &'static str {
        match self {
            Failure::Timeout => "upstream_timeout",
            Failure::ShuttingDown => "shutting_down",
            Failure::Failed(_) => "upstream_error",
            Failure::Skipped(_) => "not_called",
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Timeout => "no answer within its timeout".into(),
            Failure::ShuttingDown => ProxyError::ShuttingDown.to_string(),
            Failure::Failed(m) => m.clone(),
            Failure::Skipped(m) => (*m).into(),
        }
    }

    /// The backend's result in metrics.
    fn result(&self) -> &'static str {
        match self {
            Failure::Timeout => outcome::TIMEOUT,
            Failure::ShuttingDown | Failure::Failed(_) => outcome::BACKEND_FAILED,
            Failure::Skipped(_) => outcome::SKIPPED,
        }
    }
}

/// Answers one call of an endpoint. `body` is the client's, when the endpoint sends one
/// on ([`Endpoint::wants_body`]); `outcome` receives what the call and each backend did.
pub async fn run(
    call: Call,
    body: Option<Body>,
    worker: &Worker,
    rt: &Runtime,
    timer: &ResponseTimer,
    outcome: &mut Option<Box<Outcome>>,
) -> Result<Response<Body>, ProxyError> {
    let e = rt
        .config
        .endpoints
        .get(call.index)
        .ok_or(ProxyError::Internal("the endpoint left with a reload"))?;
    let report = outcome.insert(Box::new(Outcome {
        method: method_label(&e.method),
        endpoint: e.label.clone(),
        result: outcome::FAILED,
        backends: Vec::with_capacity(e.backends.len()),
    }));
    let deadline = Instant::now() + e.timeout;
    let mut f = Fanout {
        e,
        call: &call,
        worker,
        rt,
        timer,
        deadline,
        body: None,
    };
    if e.noop {
        return f.relay(body, report).await;
    }
    if let Some(body) = body {
        f.body = Some(client_body(body, e, deadline).await?);
    }
    let rounds = e.backends.iter().map(|b| b.round).max().unwrap_or(0);
    let n = e.backends.len();
    // What later URLs read (only for the backends they use), and what is merged.
    let mut answers: Vec<Answer> = vec![Answer::default(); n];
    let mut parts: Vec<Option<Map<String, Value>>> = vec![None; n];
    let mut failures: Vec<Option<Failure>> = (0..n).map(|_| None).collect();
    let mut took = vec![Duration::ZERO; n];
    for round in 0..=rounds {
        let calls: Vec<_> = e
            .backends
            .iter()
            .enumerate()
            .filter(|(_, b)| b.round == round)
            .map(|(i, b)| f.one(b, i, &answers))
            .collect();
        for (i, r, t) in futures_util::future::join_all(calls).await {
            took[i] = t;
            let v = match r {
                Ok(v) => v,
                Err(fail) => {
                    failures[i] = Some(fail);
                    continue;
                }
            };
            let used = e.backends.iter().any(|o| o.url.needs().any(|k| k == i));
            let raw = used.then(|| v.clone());
            // A backend whose answer cannot be shaped (not an object or array) failed.
            match e.backends[i].shape.apply(v) {
                Ok(part) => {
                    if used {
                        answers[i] = Answer {
                            shaped: Some(Value::Object(part.clone())),
                            raw,
                        };
                    }
                    parts[i] = Some(part);
                }
                Err(m) => failures[i] = Some(Failure::Failed(m.into())),
            }
        }
    }
    respond(e, parts, failures, &took, report)
}

/// The client's body, read whole (it goes to several backends) within the endpoint's
/// deadline and `max_body_bytes`.
async fn client_body(body: Body, e: &Endpoint, deadline: Instant) -> Result<Bytes, ProxyError> {
    match tokio::time::timeout_at(deadline, read_capped(body, e.max_body_bytes)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(ReadError::TooLarge)) => Err(ProxyError::BodyTooLarge {
            limit: e.max_body_bytes,
            what: "endpoints[].max_body_bytes (the body is read whole to send it to each backend)",
        }),
        Ok(Err(ReadError::Failed(err))) => Err(ProxyError::BadRequest(format!(
            "reading the request body failed: {err}"
        ))),
        Err(_) => Err(ProxyError::BadRequest(format!(
            "the request body did not arrive within the endpoint's timeout ({:?})",
            e.timeout
        ))),
    }
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
    /// The client's body, for the backends whose method carries one.
    body: Option<Bytes>,
}

/// The merged answer, partial or complete, or the error when every backend failed.
fn respond(
    e: &Endpoint,
    parts: Vec<Option<Map<String, Value>>>,
    failures: Vec<Option<Failure>>,
    took: &[Duration],
    report: &mut Outcome,
) -> Result<Response<Body>, ProxyError> {
    report.backends.extend(
        e.backends
            .iter()
            .zip(&failures)
            .zip(took)
            .map(|((b, f), t)| BackendOutcome {
                name: b.name.clone(),
                result: f.as_ref().map_or(outcome::OK, Failure::result),
                took: *t,
            }),
    );
    let failed: Vec<(&Backend, &Failure)> = e
        .backends
        .iter()
        .zip(&failures)
        .filter_map(|(b, f)| f.as_ref().map(|f| (b, f)))
        .collect();
    if failed.len() == e.backends.len() {
        if failed
            .iter()
            .any(|(_, f)| matches!(f, Failure::ShuttingDown))
        {
            // The client should ask another instance, as it would for the proxied call.
            return Err(ProxyError::ShuttingDown);
        }
        let timed_out = failed.iter().all(|(_, f)| matches!(f, Failure::Timeout));
        let detail = if timed_out {
            format!("timed out (timeout {:?})", e.timeout)
        } else {
            format!(
                "failed: {}",
                failed
                    .iter()
                    .map(|(b, f)| format!("{}: {}", b.name, f.message()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        return Err(ProxyError::BackendsFailed {
            endpoint: e.path.text.clone(),
            detail,
            timed_out,
        });
    }
    let mut merged = Map::new();
    for part in parts.into_iter().flatten() {
        crate::aggregate::merge::merge(&mut merged, part);
    }
    let names: Vec<&str> = failed.iter().map(|(b, _)| &*b.name).collect();
    let complete = names.is_empty();
    report.result = if complete {
        outcome::COMPLETE
    } else {
        outcome::PARTIAL
    };
    if !complete && let Some(key) = &e.errors_key {
        let errors: Map<String, Value> = failed
            .iter()
            .map(|(b, f)| {
                (
                    b.name.to_string(),
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
    fn limit(&self, b: &Backend) -> Duration {
        b.timeout
            .min(self.deadline.saturating_duration_since(Instant::now()))
    }

    /// A `no-op` endpoint: its one backend's response relayed untouched, the client's
    /// body streamed to it (when its method carries one).
    async fn relay(
        &self,
        body: Option<Body>,
        report: &mut Outcome,
    ) -> Result<Response<Body>, ProxyError> {
        let b = &self.e.backends[0];
        let pq = b
            .url
            .render(&self.call.params, &[])
            .ok_or_else(|| ProxyError::BadTarget("the backend URL cannot be built".into()))?;
        let started = Instant::now();
        let body = body.map(Sent::Stream).unwrap_or(Sent::Empty);
        let r = self
            .send(b, with_query(pq, &self.call.query), self.limit(b), body)
            .await;
        let result = match &r {
            Ok(resp) if !resp.status().is_server_error() => outcome::OK,
            Ok(_) => outcome::BACKEND_FAILED,
            Err(ProxyError::UpstreamTimeout { .. }) => outcome::TIMEOUT,
            Err(_) => outcome::BACKEND_FAILED,
        };
        report.result = if result == outcome::OK {
            outcome::COMPLETE
        } else {
            outcome::FAILED
        };
        report.backends.push(BackendOutcome {
            name: b.name.clone(),
            result,
            took: started.elapsed(),
        });
        r
    }

    /// One backend's call in its round: its URL built (from the parameters and the
    /// earlier answers it uses), sent, and its JSON answer read, within its limit; and how
    /// long that took. A method, not a closure: the closure's future made the request's
    /// future fail the `Send` check (rust-lang/rust#64552).
    async fn one(
        &self,
        b: &Backend,
        i: usize,
        answers: &[Answer],
    ) -> (usize, Result<Value, Failure>, Duration) {
        let started = Instant::now();
        let limit = self.limit(b);
        let Some(pq) = b.url.render(&self.call.params, answers) else {
            let why = if b.url.needs().any(|n| !answers[n].answered()) {
                "a backend its URL uses did not answer"
            } else {
                "a field its URL uses is missing from an earlier answer"
            };
            return (i, Err(Failure::Skipped(why)), Duration::ZERO);
        };
        let pq = with_query(pq, &self.call.query);
        let body = match &self.body {
            Some(bytes) if carries_body(&b.method) => Sent::Whole(bytes.clone()),
            _ => Sent::Empty,
        };
        let r = tokio::time::timeout(limit, self.json_answer(b, pq, limit, body))
            .await
            .unwrap_or(Err(Failure::Timeout));
        (i, r, started.elapsed())
    }

    /// One backend's JSON answer (any 2xx), read up to the endpoint's body limit.
    async fn json_answer(
        &self,
        b: &Backend,
        pq: String,
        limit: Duration,
        body: Sent,
    ) -> Result<Value, Failure> {
        let e = self.e;
        let resp = self
            .send(b, pq, limit, body)
            .await
            .map_err(|err| match err {
                ProxyError::UpstreamTimeout { .. } => Failure::Timeout,
                ProxyError::ShuttingDown => Failure::ShuttingDown,
                other => Failure::Failed(format!("{} ({})", other, other.code())),
            })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Failure::Failed(format!("answered {}", status.as_u16())));
        }
        let encoding = resp.headers().get(header::CONTENT_ENCODING).cloned();
        let buf = read_capped(resp.into_body(), e.max_body_bytes)
            .await
            .map_err(|err| match err {
                ReadError::TooLarge => Failure::Failed(format!(
                    "the answer is larger than max_body_bytes ({} bytes)",
                    e.max_body_bytes
                )),
                ReadError::Failed(err) => Failure::Failed(format!("reading the answer: {err}")),
            })?;
        let buf = crate::aggregate::inflate::decoded(&encoding, buf, e.max_body_bytes)
            .map_err(Failure::Failed)?;
        serde_json::from_slice(&buf)
            .map_err(|err| Failure::Failed(format!("the answer is not JSON: {err}")))
    }

    /// Sends one backend request through the policy it matches, else the plain client.
    async fn send(
        &self,
        b: &Backend,
        pq: String,
        limit: Duration,
        body: Sent,
    ) -> Result<Response<Body>, ProxyError> {
        let (call, worker, rt, timer) = (self.call, self.worker, self.rt, self.timer);
        let target = &b.target;
        let pq = http::uri::PathAndQuery::try_from(pq)
            .map_err(|e| ProxyError::BadTarget(format!("backend `{}`: {e}", b.name)))?;
        let policy = super::outbound::admit(rt, target, &b.method, pq.path())?;
        let mut req = Request::new(crate::body::empty());
        *req.method_mut() = b.method.clone();
        let h = req.headers_mut();
        for (n, v) in &call.headers {
            h.append(n.clone(), v.clone());
        }
        // The same request form as a proxied call.
        *req.uri_mut() =
            super::outbound::address(req.headers_mut(), &worker.local().via, target, pq, false)?;
        let h = req.headers_mut();
        // A backend such as GitHub's API refuses a request without one (Lura sends one).
        if !h.contains_key(header::USER_AGENT) {
            h.insert(header::USER_AGENT, self.e.user_agent.clone());
        }
        // The answer is read and merged, so ask only for what can be decoded; a `no-op`
        // relay passes the client's choice through untouched.
        if !self.e.noop {
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        }
        if carries_body(&b.method) {
            // The body's type describes it, declared or not.
            if let Some(ct) = &call.content_type
                && !matches!(body, Sent::Empty)
            {
                h.insert(header::CONTENT_TYPE, ct.clone());
            }
            match body {
                Sent::Empty => {
                    h.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
                }
                Sent::Whole(bytes) => {
                    h.insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                    *req.body_mut() = full(bytes);
                }
                Sent::Stream(body) => {
                    if let Some(n) = call.content_length {
                        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                    }
                    *req.body_mut() = body;
                }
            }
        }
        // A backend's call carries no diagnosis of its own: the endpoint's outcome (each
        // backend's result and time) is what `/discover` and the metrics show.
        let out = super::outbound::Leaving {
            rt,
            timer,
            give_up: &worker.local().give_up,
            diag: &mut None,
        };
        super::outbound::send(out, req, target, policy, limit)
            .await
            // The backend's outcome is classified by the error itself.
            .map_err(ProxyError::unretried)
    }
}

/// The body a backend request carries.
enum Sent {
    Empty,
    /// The client's body, read whole (several backends get a copy).
    Whole(Bytes),
    /// The client's body, streamed (a `no-op` endpoint's one backend).
    Stream(Body),
}
