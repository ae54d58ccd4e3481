//! The outbound path every upstream request takes once its target is known, whoever made
//! it (the proxied call, an aggregated endpoint's backend): the domain lists, the policy
//! that matches it, the `Via` stamp with the upstream URI, and the send — through the
//! policy's chain when one matched, else plainly.

use crate::body::Body;
use crate::error::ProxyError;
use crate::policy::chain::Exchange;
use crate::policy::engine;
use crate::state::Runtime;
use crate::target::{Target, upstream_uri};
use crate::upstream::deadline::ResponseTimer;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, Response, Uri, header};
use std::time::Duration;

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
    Ok(rt.config.policies.find(&target.host, method, path))
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

/// Sends the request: through the chain of the policy at `policy`, or plainly within
/// `limit` for its response head. The plain proxied call sends inline instead (its future
/// stays unboxed and small); everything else comes here.
pub async fn send(
    rt: &Runtime,
    req: http::Request<Body>,
    target: &Target,
    policy: Option<usize>,
    timer: &ResponseTimer,
    limit: Duration,
) -> Result<Response<Body>, ProxyError> {
    match policy {
        Some(i) => {
            let x = Exchange::new(rt.engine.chains[i].clone(), req, target.clone());
            let mut diag = None;
            engine::run(x, &*rt.client, timer, &mut diag)
                .await
                .map(|d| d.response)
        }
        None => {
            let sent = tokio::time::Instant::now();
            rt.client
                .send_within(req, target, timer, sent, limit, true, ())
                .await
                .map(|r| r.map(http_body_util::BodyExt::boxed_unsync))
        }
    }
}
