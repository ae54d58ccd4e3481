//! HTTP/1.1 upgrades outside CONNECT (RFC 9110 §7.8): WebSocket and any other protocol a
//! client asks for with `Upgrade`, in header, forward-proxy and route modes. The request
//! goes to the provider on a connection of its own with its `Upgrade` and
//! `Connection: upgrade`; a `101 Switching Protocols` is relayed to the client and then
//! the bytes flow both ways, in a task that graceful shutdown waits for until the drain
//! deadline. Any other answer is relayed as an ordinary response.

use crate::body::{Body, BoxError};
use crate::ctx::Ctx;
use crate::error::ProxyError;
use crate::headers::{self, X_TOLLGATE_REQUEST_ID};
use crate::state::{Runtime, Worker};
use crate::target::Target;
use crate::tunnel;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use std::pin::Pin;

/// The protocol the client asks to switch to: an HTTP/1.1 request whose `Connection`
/// names `upgrade` and which carries `Upgrade`.
pub fn requested(h: &HeaderMap) -> Option<HeaderValue> {
    let upgrade = h.get(header::UPGRADE)?;
    headers::connection_tokens(h)
        .any(|t| t.eq_ignore_ascii_case("upgrade"))
        .then(|| upgrade.clone())
}

/// Puts the upgrade back on the upstream request after the hop-by-hop headers went.
pub fn ask_upstream(h: &mut HeaderMap, protocol: HeaderValue) {
    h.insert(header::UPGRADE, protocol);
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// `relay`, boxed: the rare path, kept out of every request's future.
pub fn relay_boxed<'a>(
    worker: &'a Worker,
    rt: &'a Runtime,
    req: Request<Body>,
    target: Target,
    client: OnUpgrade,
    ctx: &'a mut Ctx,
) -> Pin<Box<dyn Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a>> {
    Box::pin(relay(worker, rt, req, target, client, ctx))
}

async fn relay(
    worker: &Worker,
    rt: &Runtime,
    req: Request<Body>,
    target: Target,
    client: OnUpgrade,
    ctx: &mut Ctx,
) -> Result<Response<Body>, ProxyError> {
    let mut resp = rt.client.send_upgrade(req, &target).await?;
    let status = resp.status();
    let switched = status == StatusCode::SWITCHING_PROTOCOLS;
    let protocol = resp.headers().get(header::UPGRADE).cloned();
    if switched {
        let upstream = hyper::upgrade::on(&mut resp);
        tunnel::spawn_relay(&worker.shared, ctx.id.clone(), async move {
            let (c, u) = tokio::try_join!(client, upstream)?;
            Ok((TokioIo::new(c), TokioIo::new(u)))
        });
    }
    let (mut parts, body) = resp.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    if let (true, Some(p)) = (switched, protocol) {
        ask_upstream(&mut parts.headers, p);
    }
    parts.headers.insert(X_TOLLGATE_REQUEST_ID, ctx.id.clone());
    ctx.end(worker, status.as_u16(), None, 0, true, true);
    let body = if switched {
        crate::body::empty()
    } else {
        body.map_err(BoxError::from).boxed_unsync()
    };
    Ok(Response::from_parts(parts, body))
}
