//! The outbound path every upstream request takes once its target is known, whoever made
//! it (the proxied call, an aggregated endpoint's backend): the domain lists, the policy
//! that matches it, the `Via` stamp with the upstream URI, and the send — through the
//! policy's chain when one matched, else plainly.

use crate::body::Body;
use crate::diagnosis::RequestDiag;
use crate::error::ProxyError;
use crate::policy::chain::Exchange;
use crate::policy::engine;
use crate::state::Runtime;
use crate::target::{Target, upstream_uri};
use crate::upstream::AttemptSettings;
use crate::upstream::deadline::ResponseTimer;
use futures_util::future::Either;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, header};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Whether the request may go to `target` (the domain lists), and the index of the
/// policy that matches it (its upstream path: after a route's prefix is stripped, so a
/// policy sees the same path in every routing mode).
#[inline]
pub fn admit(
    rt: &Runtime,
    target: &Target,
    method: &Method,
    path: &str,
) -> Result<Option<usize>, ProxyError> {
    if !rt.config.domains.permits(&target.host) {
        return Err(ProxyError::DomainDenied(target.host.to_string()));
    }
    rt.config.policies.find(&target.host, method, path)
}

/// Stamps the request as leaving through this tollgate and gives its upstream URI.
/// RFC 9110 §7.6.3: each proxy appends itself to `Via`; seeing its own entry come back is
/// how a loop through any address or name is caught.
#[inline]
pub fn address(
    headers: &mut HeaderMap,
    via: &HeaderValue,
    target: &Target,
    path_and_query: PathAndQuery,
    upgrade: bool,
) -> Result<Uri, ProxyError> {
    headers.append(header::VIA, via.clone());
    upstream_uri(target, path_and_query, headers, upgrade)
}

/// What a request leaving carries besides itself: the runtime it runs on, the client
/// connection's response timer, the drain-deadline token and the request's diagnosis.
/// The proxied call and every aggregated backend leave with one, so a queue wait answers
/// 503 at the drain deadline and the diagnosis sees each the same way.
pub struct Leaving<'a> {
    pub rt: &'a Runtime,
    pub timer: &'a ResponseTimer,
    /// Cancelled at the gateway's drain deadline: a queue wait gives up (503
    /// `shutting_down`).
    pub give_up: &'a std::sync::Arc<CancellationToken>,
    /// The request's diagnosis (trace, HAR, remedy actions), when kept; it travels in the
    /// exchange and comes back here whatever the outcome.
    pub diag: &'a mut Option<Box<RequestDiag>>,
}

/// Sends the request through the chain of the policy at `policy`, or plainly within
/// `limit` for its response head. The plain proxied call sends inline in
/// [`super::handle`] instead, through the same [`sending`] and [`answered`] (its future
/// stays unboxed and small: a test bounds its size); everything else comes here.
pub async fn send(
    out: Leaving<'_>,
    req: http::Request<Body>,
    target: &Target,
    policy: Option<usize>,
    limit: Duration,
) -> Result<Response<Body>, ProxyError> {
    match policy {
        Some(i) if out.rt.config.policies.reads_call(i) => {
            Box::pin(through_call(out, i, req, target.clone()))
                .await
                .map(|d| d.response.map(http_body_util::BodyExt::boxed_unsync))
        }
        Some(i) => through_policy(out, i, req, target.clone())
            .await
            .map(|d| d.response.map(http_body_util::BodyExt::boxed_unsync)),
        None => {
            let sent = sending(out.diag);
            let resp = out
                .rt
                .client
                .send_within(req, target, out.timer, sent, AttemptSettings::plain(limit))
                .await;
            answered(out.diag, resp.as_ref().map(|r| r.status()));
            resp.map(|r| r.map(http_body_util::BodyExt::boxed_unsync))
        }
    }
}

/// A boxed exchange's future.
type Boxed<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<engine::Done, ProxyError>> + Send + 'a>>;

/// Sends a request the proxy listener took through the chain of the policy at index `i`:
/// a plain chain ([`crate::policy::chain::Chain::plain`]) in the request's own future,
/// whose send is the one an unmatched request's is; a chain with layers on a boxed
/// future of its own; a policy that asks for the request's MCP call first
/// ([`through_call`]) on one too.
pub fn through_chain<'a>(
    mut out: Leaving<'a>,
    i: usize,
    req: http::Request<Body>,
    target: Target,
) -> impl Future<Output = Result<engine::Done, ProxyError>> + Send + 'a {
    if out.rt.config.policies.reads_call(i) {
        let f: Boxed<'a> = Box::pin(through_call(out, i, req, target));
        Either::Right(f)
    } else if out.rt.engine.chains[i].plain() {
        let x = out.exchange(i, req, target);
        Either::Left(engine::run_plain(x, &*out.rt.client, out.timer, out.diag))
    } else {
        let f: Boxed<'a> = Box::pin(through_policy(out, i, req, target));
        Either::Right(f)
    }
}

/// A request whose head matched the policy at `i`, which names MCP calls (`match.mcp`):
/// its body is read once (bounded) for the call, and the first policy from `i` on that
/// matches the request with it applies — or none, and it is sent plainly. The call stays
/// in the exchange's locals for the remedies, and its id for tollgate's own errors.
async fn through_call(
    mut out: Leaving<'_>,
    i: usize,
    req: http::Request<Body>,
    target: Target,
) -> Result<engine::Done, ProxyError> {
    let rt = out.rt;
    let policies = &rt.config.policies;
    let max = policies.policies[i]
        .spec
        .mcp
        .as_ref()
        .map_or(crate::mcp::MAX_BODY, |m| m.max_body);
    let mut x = out.exchange(i, req, target);
    let call = match crate::policy::mcp_call::call(&mut x, max).await {
        Ok(c) => c.cloned(),
        Err(e) => {
            *out.diag = x.diag.take();
            return Err(e);
        }
    };
    let chosen = policies.find_call(
        i,
        &x.target.host,
        &x.method,
        x.parts.uri.path(),
        call.as_ref(),
    );
    let name = chosen.map(|j| rt.engine.chains[j].policy.clone());
    if let Some(d) = &mut x.diag {
        d.policy = name.clone();
        d.template = chosen
            .map(|j| rt.diag.templates[j].clone())
            .filter(|t| !t.is_empty());
    }
    let moved = (chosen != Some(i)).then(|| name.clone());
    let Some(j) = chosen else {
        // No policy names this call: sent as an unmatched request is.
        *out.diag = x.diag.take();
        let req = x
            .attempt_request(false)
            .ok_or(ProxyError::Internal("the request body is gone"))?;
        let target = x.target.clone();
        drop(x);
        let sent = sending(out.diag);
        let resp = rt.client.send(req, &target, out.timer, sent).await;
        answered(out.diag, resp.as_ref().map(|r| r.status()));
        let id = call.and_then(|c| c.id);
        return match resp {
            Ok(r) => Ok(engine::Done {
                upstream: Some(sent.elapsed()),
                response: r.map(|b| {
                    let b = http_body_util::BodyExt::boxed_unsync(b);
                    crate::body::Watched::new(b, engine::Ending::none())
                }),
                moved,
            }),
            Err(e) => Err(e.on_call(id)),
        };
    };
    x.chain = rt.engine.chains[j].clone();
    engine::run(x, &*rt.client, out.timer, out.diag)
        .await
        .map(|d| engine::Done { moved, ..d })
}

/// Sends the request through the chain of the policy at index `i` (any chain).
pub async fn through_policy(
    mut out: Leaving<'_>,
    i: usize,
    req: http::Request<Body>,
    target: Target,
) -> Result<engine::Done, ProxyError> {
    let x = out.exchange(i, req, target);
    engine::run(x, &*out.rt.client, out.timer, out.diag).await
}

impl Leaving<'_> {
    /// The exchange of a request the policy at index `i` matched, with the request's
    /// diagnosis and the worker's drain token. Boxed here, where it is made: the engine's
    /// future holds a pointer (an exchange passed by value is stored twice in it,
    /// rust-lang/rust#62958), and the response's body takes the same box when the engine
    /// is done.
    fn exchange(&mut self, i: usize, req: http::Request<Body>, target: Target) -> Box<Exchange> {
        let mut x = Box::new(Exchange::new(self.rt.engine.chains[i].clone(), req, target));
        x.diag = self.diag.take();
        x.give_up = Some(self.give_up.clone());
        x
    }
}

/// The moment a plain request is sent, noted in its diagnosis.
#[inline]
pub fn sending(diag: &mut Option<Box<RequestDiag>>) -> Instant {
    let sent = Instant::now();
    if let Some(d) = diag {
        d.sent_at = Some(sent);
    }
    sent
}

/// A plain request's answer (its status, or the error), noted in its trace.
#[inline]
pub fn answered(diag: &mut Option<Box<RequestDiag>>, result: Result<StatusCode, &ProxyError>) {
    if let Some(t) = diag.as_mut().and_then(|d| d.trace.as_mut()) {
        t.attempt_done(match result {
            Ok(s) => Ok(s.as_u16()),
            Err(e) => Err(e.to_string()),
        });
    }
}
