//! CONNECT tunnels (RFC 9110 §9.3.6): a plain byte relay after the domain lists allow
//! the target. The upstream connection is made before answering 200, so a refused or
//! denied target gets a real error status. A tunnel to a host in `intercept.hosts` is
//! decrypted instead (crate::intercept): its requests connect upstream one by one, and
//! their errors are answered inside the client's TLS session.

use crate::body::{Body, empty};
use crate::ctx::Ctx;
use crate::error::ProxyError;
use crate::state::{Runtime, Shared, Worker};
use crate::target::{Scheme, Target};
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// `open`, boxed. CONNECT is the rare path, and its state would otherwise make every
/// request's future (moved by hyper once per request) kilobytes larger.
pub fn open_boxed<'a>(
    worker: &'a Arc<Worker>,
    rt: &'a Runtime,
    req: Request<Incoming>,
    ctx: &'a mut Ctx,
) -> Pin<Box<dyn Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a>> {
    Box::pin(open(worker, rt, req, ctx))
}

/// Relays bytes both ways between the two ends `ends` yields (the client's upgraded
/// connection and the upstream's), in a task that graceful shutdown waits for and cuts at
/// the drain deadline; counted in `tollgate_tunnels` while open. CONNECT tunnels and
/// HTTP/1.1 upgrades both end here.
pub fn spawn_relay<A, B>(
    shared: &Shared,
    id: HeaderValue,
    ends: impl Future<Output = Result<(A, B), hyper::Error>> + Send + 'static,
) where
    A: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (metrics, cut) = (shared.metrics.clone(), shared.cut.clone());
    shared.tasks.spawn(async move {
        metrics.tunnels.inc();
        match ends.await {
            Ok((mut a, mut b)) => tokio::select! {
                r = tokio::io::copy_bidirectional(&mut a, &mut b) => {
                    if let Err(e) = r {
                        tracing::debug!(request_id = ?id, "relay closed: {e}");
                    }
                }
                _ = cut.cancelled() => tracing::info!(request_id = ?id, "relay cut at the drain deadline"),
            },
            Err(e) => tracing::debug!(request_id = ?id, "upgrade failed: {e}"),
        }
        metrics.tunnels.dec();
    });
}

async fn open(
    worker: &Arc<Worker>,
    rt: &Runtime,
    req: Request<Incoming>,
    ctx: &mut Ctx,
) -> Result<Response<Body>, ProxyError> {
    // RFC 9110 §9.3.6: the request target of CONNECT is authority-form, host and port.
    let auth = req
        .uri()
        .authority()
        .filter(|a| a.port().is_some())
        .ok_or_else(|| ProxyError::BadTarget("CONNECT needs a host:port target".into()))?;
    let target = Target::from_authority(Scheme::Https, auth).map_err(ProxyError::BadTarget)?;
    ctx.host = Some(target.host.clone());
    if !rt.config.domains.permits(&target.host) {
        return Err(ProxyError::DomainDenied(target.host.to_string()));
    }
    // Squid's default: tunnels reach the HTTPS port only, so CONNECT is not a port
    // scanner (which answers open and closed ports differently).
    let ports = &rt.config.egress.connect_ports;
    if !ports.contains(target.port) {
        return Err(ProxyError::PortDenied {
            port: target.port,
            allowed: ports.to_string(),
        });
    }
    if let Some(interceptor) = &rt.intercept
        && rt.config.intercept.covers(&target.host)
        && interceptor.decrypts(&target.host, rt.config.intercept.tunnel_refused_for)
    {
        let ack = req.extensions().get::<crate::conns::AckNow>().cloned();
        let decrypt = crate::intercept::Decrypt {
            ack,
            upgrade: hyper::upgrade::on(req),
            target,
            interceptor: interceptor.clone(),
            id: ctx.id.clone(),
        };
        (worker.serve_decrypted)(worker.clone(), decrypt);
        return Ok(established(worker, ctx));
    }
    // A tunnel to a host a policy matches bypasses it: say so.
    if let Some(i) = rt.config.policies.for_host(&target.host) {
        rt.engine.tunnelled[i].note(&rt.config.policies.policies[i].name, &target.host);
    }
    let upstream = rt
        .client
        .connector
        .connect_tcp(&target.host, target.port)
        .await
        .map_err(|e| ProxyError::from(&e))?;

    let upgrade = hyper::upgrade::on(req);
    spawn_relay(&worker.shared, ctx.id.clone(), async move {
        Ok((TokioIo::new(upgrade.await?), upstream))
    });
    Ok(established(worker, ctx))
}

/// The 200 that opens a tunnel (the request ended now: what follows is bytes, or the
/// decrypted requests' own events).
fn established(worker: &Worker, ctx: &mut Ctx) -> Response<Body> {
    ctx.end(worker, 200, None, 0, true, true);
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut()
        .insert(crate::headers::X_TOLLGATE_REQUEST_ID, ctx.id.clone());
    resp
}
