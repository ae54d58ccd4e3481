//! The life of one request on the proxy listener: its phases in order, numbered as
//! docs/architecture.md's sections are (1 and 2, accepting and speaking HTTP, are the
//! server's). Errors from any phase become a response in one place,
//! [`crate::error::ProxyError::to_response`].
//!
//! 3. snapshot the runtime (config + upstream client) the request will run on ([`handle`])
//! 4. request id
//! 5. admission: draining → 503, header size → 431
//! 6. CONNECT → tunnel; 6b. aggregated endpoints (`aggregate.rs`)
//! 7. target: a decrypted tunnel's host (crate::intercept) → absolute-form (forward
//!    proxy) → `x-tollgate-host` → declared route
//! 8. domain allow/deny lists
//! 9. policy match on the upstream request (host, method, path after a route's prefix)
//! 10. upstream request: hop-by-hop and control headers removed, URI rewritten;
//!     10b. diagnosis of the request side
//! 11. send (`outbound.rs`), with the response-head timeout; a matched request instead
//!     runs its policy's chain (crate::policy::engine), which sends through the same client
//! 12. response: hop-by-hop removed, request id added
//! 13. body streamed and observed

mod aggregate;
mod outbound;

use crate::body::{Body, BoxError, from_incoming};
use crate::conns::InFlight;
use crate::diagnosis::{RequestDiag, har, tap, trace};
use crate::error::ProxyError;
use crate::headers::{self, X_TOLLGATE_HOST, X_TOLLGATE_REQUEST_ID, X_TOLLGATE_SCHEME};
use crate::intercept::Intercepted;

use crate::ctx::Ctx;
use crate::paths;
use crate::state::{Runtime, Shared, Worker};
use crate::stream_watch::Severable;
use crate::target::url;
use crate::target::{Scheme, Target};
use crate::tunnel;
use crate::upgrade;
use crate::upstream::PooledBody;
use bytes::Bytes;
use http::uri::{PathAndQuery, Uri};
use http::{HeaderValue, Method, Request, Response, Version};
use http_body::Body as HttpBody;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::Instant;

/// Entry point for one request on the proxy listener. Never fails: errors become responses.
///
/// The phases that only read and rewrite the request run here, synchronously; the future
/// returned keeps only what the exchange needs. That keeps the future hyper stores per
/// connection (and moves per request) small: an `async fn` keeps each of its arguments in
/// its state for its whole life (rust-lang/rust#62958), and every local that was ever
/// borrowed until its scope ends (#59123), so a request passed down through a chain of
/// `async fn`s is stored once per layer.
pub fn handle(
    worker: Arc<Worker>,
    req: Request<Incoming>,
    in_flight: InFlight,
) -> impl Future<Output = Response<Body>> + Send + 'static {
    let local = worker.local();
    let rt = local.runtime.load_full();
    let seen = headers::Seen::of(req.headers());
    let mut ctx = Ctx {
        start: Instant::now(),
        // A client's own id is an `x-tollgate-*` field: looked up only when there is one.
        id: if seen.control {
            local.ids.for_request(req.headers())
        } else {
            local.ids.fresh()
        },
        method: req.method().clone(),
        host: None,
        upstream: None,
        policy: None,
        // For the access log, and for the dashboard's live calls while a browser watches.
        path: (rt.config.log.access_log || local.watching.any()).then(|| req.uri().path().into()),
        in_flight,
        diag: None,
        aggregate: None,
    };
    let step = prepare(&worker, &rt, req, &seen, &mut ctx);
    async move {
        let forwarded = match step {
            Ok(Step::Upstream(req, target, gate)) => {
                // §11 send: an unmatched request plainly, inline (its future unboxed).
                let sent = outbound::sending(&mut ctx.diag);
                let resp = rt
                    .client
                    .send(req, &target, ctx.in_flight.response_timer(), sent)
                    .await;
                if resp.is_ok() {
                    ctx.upstream = Some(sent.elapsed());
                }
                outbound::answered(&mut ctx.diag, resp.as_ref().map(|r| r.status()));
                if let Some(g) = gate {
                    g.final_response();
                }
                resp.map(Forwarded::Upstream)
            }
            Ok(Step::Policy(req, target, gate, i)) => {
                // §11 send: a matched request through its policy's chain.
                let out = outbound::Leaving {
                    rt: &rt,
                    timer: ctx.in_flight.response_timer(),
                    give_up: &worker.local().give_up,
                    diag: &mut ctx.diag,
                };
                let done = outbound::through_chain(out, i, req, target).await;
                if let Some(g) = gate {
                    g.final_response();
                }
                done.map(|d| {
                    ctx.upstream = d.upstream;
                    if let Some(p) = d.moved {
                        ctx.policy = p;
                    }
                    Forwarded::Policy(d.response)
                })
            }
            Ok(Step::Aggregate(call, body)) => {
                // An aggregated endpoint: its backends, on a boxed future of its own.
                Box::pin(aggregate::run(
                    *call,
                    body,
                    &worker,
                    &rt,
                    ctx.in_flight.response_timer(),
                    &mut ctx.aggregate,
                ))
                .await
                .map(Forwarded::Aggregated)
            }
            Ok(Step::Connect(req)) => tunnel::open_boxed(&worker, &rt, req, &mut ctx)
                .await
                .map(Forwarded::Ready),
            Ok(Step::Upgrade(req, target, client)) => {
                upgrade::relay_boxed(&worker, &rt, req, target, client, &mut ctx)
                    .await
                    .map(Forwarded::Ready)
            }
            Err(err) => Err(err),
        };
        match forwarded {
            Ok(Forwarded::Ready(resp)) => resp,
            Ok(Forwarded::Upstream(resp)) => respond(worker, ctx, resp),
            Ok(Forwarded::Policy(resp)) => respond(worker, ctx, resp),
            Ok(Forwarded::Aggregated(resp)) => respond(worker, ctx, resp),
            Err(err) => {
                tracing::debug!(request_id = ?ctx.id, code = err.code(), "{err}");
                let resp = err.to_response(&ctx.id);
                if let Some(h) = ctx.diag.as_mut().and_then(|d| d.har.as_mut()) {
                    h.respond(resp.status(), Version::HTTP_11, resp.headers());
                    h.response_body.push(err.body_json().as_bytes());
                }
                // A refused target's host is client input: never a metric label.
                let code = Some(err.code());
                let host_is_label = !err.target_rejected();
                ctx.end(&worker, err.status().as_u16(), code, 0, true, host_is_label);
                resp
            }
        }
    }
}

/// What the synchronous phases decided: the request to send upstream (with the gate of
/// an `Expect: 100-continue` body), or a tunnel.
enum Step {
    Upstream(Request<Body>, Target, Option<Arc<crate::expect::Gate>>),
    /// Matched by the policy at this index: the request goes through its chain.
    Policy(
        Request<Body>,
        Target,
        Option<Arc<crate::expect::Gate>>,
        usize,
    ),
    Connect(Request<Incoming>),
    /// A call of an aggregated endpoint (`endpoints:`): its backends answer it; the
    /// client's body when they take it.
    Aggregate(Box<aggregate::Call>, Option<Body>),
    /// An HTTP/1.1 `Upgrade` (WebSocket): its own upstream connection, then a byte relay.
    Upgrade(Request<Body>, Target, hyper::upgrade::OnUpgrade),
}

/// What the pipeline produced: the provider's response, still to be relayed, or a
/// response already complete (CONNECT).
enum Forwarded {
    Upstream(Response<PooledBody>),
    /// A policy's response (the provider's after the response phases, or made up), its
    /// body watched by the exchange's end.
    Policy(Response<crate::policy::engine::Ended>),
    /// An aggregated endpoint's response.
    Aggregated(Response<Body>),
    Ready(Response<Body>),
}

/// The synchronous phases, in docs/architecture.md's order (its `§` numbers; a test
/// holds the two together): admission, CONNECT, aggregated endpoints, target, domain
/// lists, policy match, the upstream request and its diagnosis.
fn prepare(
    worker: &Worker,
    rt: &Runtime,
    mut req: Request<Incoming>,
    seen: &headers::Seen,
    ctx: &mut Ctx,
) -> Result<Step, ProxyError> {
    let shared = &*worker.shared;
    let config = &rt.config;
    // §5 Admission.
    if shared.is_draining() {
        return Err(ProxyError::ShuttingDown);
    }
    if seen.size > config.listen.max_header_bytes {
        return Err(ProxyError::HeadersTooLarge {
            size: seen.size,
            limit: config.listen.max_header_bytes,
        });
    }
    // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host is a 400.
    if req.version() == Version::HTTP_11 && seen.hosts != 1 {
        return Err(ProxyError::BadRequest(
            "an HTTP/1.1 request needs exactly one Host header (RFC 9112 §3.2)".into(),
        ));
    }
    if seen.via && shared.via.came_back(req.headers()) {
        return Err(ProxyError::LoopDetected(
            "this request already passed through this tollgate (its Via pseudonym came back): the target leads back to tollgate".into(),
        ));
    }
    // §6 CONNECT.
    if req.method() == Method::CONNECT {
        if req.extensions().get::<Intercepted>().is_some() {
            return Err(ProxyError::BadRequest(
                "CONNECT inside a decrypted tunnel: open tunnels to tollgate itself".into(),
            ));
        }
        return Ok(Step::Connect(req));
    }
    // RFC 3986 §5.2.4: dot segments are resolved before anything reads the path, so
    // `/svc/../../admin` can neither escape a route's base path nor slip past a policy.
    if let Some(pq) = paths::without_dot_segments(req.uri()) {
        let mut parts = std::mem::take(req.uri_mut()).into_parts();
        parts.path_and_query = Some(pq);
        *req.uri_mut() =
            Uri::from_parts(parts).map_err(|e| ProxyError::BadTarget(e.to_string()))?;
    }

    // §6b Aggregated endpoints come before routes; a request naming its own target
    // (absolute-form, `x-tollgate-host`) is never one.
    if !config.endpoints.is_empty()
        && let Some((call, wants_body)) = endpoint_call(config, &req)
    {
        let body = wants_body.then(|| from_incoming(req.into_body()));
        return Ok(Step::Aggregate(Box::new(call), body));
    }
    // §7 Target.
    let (target, path_and_query) = resolve_target(config, &req, seen.control)?;
    ctx.host = Some(target.host.clone());
    // §8 Domain lists, §9 policy match.
    let policy = outbound::admit(rt, &target, req.method(), path_and_query.path())?;
    if let Some(i) = policy {
        ctx.policy = Some(rt.engine.chains[i].policy.clone());
    }
    if rt.diag.any() || policy.is_some() {
        let mut d = RequestDiag::start(&rt.diag, req.headers());
        d.path = Some(path_and_query.path().to_owned());
        d.port = (target.port != target.scheme.default_port()).then_some(target.port);
        d.policy = ctx.policy.clone();
        d.template = policy
            .map(|i| rt.diag.templates[i].clone())
            .filter(|t| !t.is_empty());
        ctx.diag = Some(d);
    }

    // RFC 9110 §7.8: an upgrade is HTTP/1.1 only (HTTP/2 has none).
    let upgrade = match req.version() {
        Version::HTTP_11 if seen.upgrade => upgrade::requested(req.headers()),
        _ => None,
    }
    .map(|protocol| (protocol, hyper::upgrade::on(&mut req)));

    // §10 Upstream request.
    let (mut parts, body) = req.into_parts();
    seen.strip_for_upstream(&mut parts.headers);
    // tollgate writes the request itself on its HTTP/1.1 pool (`http`) and on an
    // upgrade's own connection: origin-form (RFC 9112 §3.2.1; absolute-form is for a
    // next-hop proxy), and Host the upstream's authority (RFC 9110 §7.2), precomputed
    // with the target. hyper-util's client (`https`) needs the absolute URI to pick a
    // connection; it writes origin-form and sets Host on HTTP/1.1 and sends
    // `:authority` alone on HTTP/2.
    parts.uri = outbound::address(
        &mut parts.headers,
        &worker.local().via,
        &target,
        path_and_query,
        upgrade.is_some(),
    )?;
    // The upstream protocol is chosen by ALPN, not by the client's version.
    parts.version = Version::HTTP_11;
    if let Some((protocol, client)) = upgrade {
        upgrade::ask_upstream(&mut parts.headers, protocol);
        let req = Request::from_parts(parts, from_incoming(body));
        return Ok(Step::Upgrade(req, target, client));
    }
    let continues =
        seen.expect && !body.is_end_stream() && crate::expect::expects_continue(&parts.headers);
    let mut body = from_incoming(body);
    // §10b Diagnosis, request side.
    if let Some(d) = &mut ctx.diag {
        body = diagnose_request(shared, rt, d, &mut parts, &target, policy, body);
    }
    let mut req = Request::from_parts(parts, body);
    let gate = continues
        .then(|| crate::expect::hold_body(&mut req, rt.config.upstream.expect_continue_timeout));
    Ok(match policy {
        Some(i) => Step::Policy(req, target, gate, i),
        None => Step::Upstream(req, target, gate),
    })
}

/// The aggregated endpoint this request calls, if any, and whether its backends take the
/// client's body. A request naming its own target (absolute-form, `x-tollgate-host`) never
/// calls one.
fn endpoint_call<B>(
    config: &crate::config::Config,
    req: &Request<B>,
) -> Option<(aggregate::Call, bool)> {
    let names_target = (req.version() <= Version::HTTP_11 && req.uri().scheme().is_some())
        || req.headers().contains_key(X_TOLLGATE_HOST)
        || req.extensions().get::<Intercepted>().is_some();
    if names_target {
        return None;
    }
    let (i, params) = config.endpoints.find(req.method(), req.uri().path())?;
    let e = config.endpoints.get(i)?;
    let call = aggregate::Call::new(e, i, params, req.headers(), req.uri());
    Some((call, e.wants_body()))
}

/// The request side of diagnosis, once the upstream request is built: the trace's
/// `traceparent` (a matched request's attempts set their own), the HAR capture of the
/// request head, and the body's tap (counted; copied up to the cap when captured).
fn diagnose_request(
    shared: &Shared,
    rt: &Runtime,
    d: &mut RequestDiag,
    parts: &mut http::request::Parts,
    target: &Target,
    policy: Option<usize>,
    body: Body,
) -> Body {
    if policy.is_none()
        && let Some(t) = &mut d.trace
    {
        parts.headers.insert(trace::TRACEPARENT, t.attempt());
    }
    let max_body = rt.diag.har.as_ref().map_or(0, |h| h.max_body);
    let writer = shared.diagnostics.har.as_ref();
    if rt.diag.captures(policy) && writer.is_some_and(|w| w.has_room()) {
        d.har = Some(har::Capture::new(
            parts.method.clone(),
            url(target, &parts.uri),
            parts.headers.clone(),
            max_body,
            writer.map(|w| w.budget()),
            rt.diag.redactor.clone(),
        ));
    }
    if !rt.diag.discovery && d.har.is_none() {
        return body;
    }
    let copy = d
        .har
        .is_some()
        .then(|| (max_body, writer.map(|w| w.budget())));
    let t = Arc::new(tap::Tap::new(copy));
    d.tap = Some(t.clone());
    tap::Tapped::new(body, t).boxed_unsync()
}

/// Relays the provider's response: hop-by-hop headers removed, request id added, body
/// streamed through [`Observed`], which owns the request's context until the body ends.
fn respond<B>(worker: Arc<Worker>, mut ctx: Ctx, resp: Response<B>) -> Response<Body>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Send + 'static,
{
    let (mut parts, body) = resp.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    // The id moves into the response; the access log (when on) keeps its own copy.
    if let Some(h) = ctx.diag.as_mut().and_then(|d| d.har.as_mut()) {
        // A head made ahead (a worker's cache copy) holds the id's field with no value
        // yet: not a field the answer had, so not recorded.
        if parts
            .headers
            .get(X_TOLLGATE_REQUEST_ID)
            .is_some_and(HeaderValue::is_empty)
        {
            parts.headers.remove(X_TOLLGATE_REQUEST_ID);
        }
        h.respond(parts.status, parts.version, &parts.headers);
    }
    let id = if ctx.path.is_some() || ctx.diag.is_some() {
        ctx.id.clone()
    } else {
        std::mem::replace(&mut ctx.id, HeaderValue::from_static(""))
    };
    parts.headers.insert(X_TOLLGATE_REQUEST_ID, id);
    let status = parts.status.as_u16();
    // On HTTP/2 the sweep watches each stream's body on its own (stream_watch.rs).
    let h2 = ctx.in_flight.h2_conn().cloned();
    let observed = crate::body::Watched::new(
        body,
        Observe {
            bytes: 0,
            done: false,
            report: Some(Report {
                worker,
                ctx,
                status,
            }),
        },
    );
    let body = match h2 {
        Some(conn) => {
            let body = Severable::new(observed.boxed_unsync());
            conn.watch_stream(body.cell());
            body.boxed_unsync()
        }
        None => observed.boxed_unsync(),
    };
    Response::from_parts(parts, body)
}

/// Finds the upstream and the path to send, in order: a decrypted tunnel's host,
/// absolute-form request target (forward proxy, HTTP/1.x; RFC 9112 §3.2.2),
/// `x-tollgate-host` (looked up when the request has `control` fields), declared route.
fn resolve_target<B>(
    config: &crate::config::Config,
    req: &Request<B>,
    control: bool,
) -> Result<(Target, PathAndQuery), ProxyError> {
    let uri = req.uri();
    let pq = || {
        uri.path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"))
    };
    if let Some(Intercepted(target)) = req.extensions().get::<Intercepted>() {
        crate::intercept::same_host(req, target)?;
        return Ok((target.clone(), pq()));
    }
    // HTTP/2 requests always carry :scheme and :authority, so only HTTP/1.x absolute-form
    // means forward-proxy mode.
    if req.version() <= Version::HTTP_11
        && let (Some(scheme), Some(auth)) = (uri.scheme_str(), uri.authority())
    {
        let scheme = Scheme::parse(scheme).ok_or_else(|| {
            ProxyError::BadTarget(format!("scheme `{scheme}` is not http or https"))
        })?;
        let target = Target::from_authority(scheme, auth).map_err(ProxyError::BadTarget)?;
        return Ok((target, pq()));
    }
    if let Some(host) = control
        .then(|| req.headers().get(X_TOLLGATE_HOST))
        .flatten()
    {
        let scheme = match req.headers().get(X_TOLLGATE_SCHEME) {
            None => Scheme::Https,
            Some(v) => v.to_str().ok().and_then(Scheme::parse).ok_or_else(|| {
                ProxyError::BadTarget(format!(
                    "x-tollgate-scheme `{}` is not http or https",
                    String::from_utf8_lossy(v.as_bytes())
                ))
            })?,
        };
        let host = host
            .to_str()
            .map_err(|_| ProxyError::BadTarget("x-tollgate-host is not valid text".into()))?;
        let target = Target::parse(scheme, host.trim())
            .map_err(|e| ProxyError::BadTarget(format!("x-tollgate-host: {e}")))?;
        return Ok((target, pq()));
    }
    if let Some((route, path)) = config.routes.find(uri.path()) {
        if *path == *uri.path() {
            // The path goes upstream unchanged: reuse the parsed one (no allocation).
            return Ok((route.target.clone(), pq()));
        }
        let pq = match uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path.into_owned(),
        };
        let pq = PathAndQuery::try_from(pq).map_err(|e| ProxyError::BadTarget(e.to_string()))?;
        return Ok((route.target.clone(), pq));
    }
    Err(ProxyError::MissingTarget)
}

struct Report {
    worker: Arc<Worker>,
    ctx: Ctx,
    status: u16,
}

/// Watches the provider's response body, streamed as is: when it ends or is dropped
/// (client gone) the request ends (`Ctx::end`) with the total time and byte count.
struct Observe {
    bytes: u64,
    done: bool,
    report: Option<Report>,
}

impl crate::body::Watch for Observe {
    fn data(&mut self, d: &Bytes) {
        self.bytes += d.len() as u64;
        if let Some(h) = self
            .report
            .as_mut()
            .and_then(|r| r.ctx.diag.as_mut())
            .and_then(|d| d.har.as_mut())
        {
            h.response_body.push(d);
        }
    }

    fn end(&mut self, complete: bool) {
        self.done |= complete;
    }

    fn dropped(&mut self, ended: bool) {
        if let Some(mut r) = self.report.take() {
            let done = self.done || ended;
            r.ctx.end(&r.worker, r.status, None, self.bytes, done, true);
        }
    }
}

/// The size in bytes of the future [`handle`] returns for a request no policy matches
/// (a test keeps it from growing unnoticed).
pub fn handle_future_size() -> usize {
    fn size<F, Fut>(_: &F) -> usize
    where
        F: Fn(Arc<Worker>, Request<Incoming>, InFlight) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }
    size(&handle)
}
