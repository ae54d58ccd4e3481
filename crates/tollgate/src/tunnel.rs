//! CONNECT tunnels (RFC 9110 §9.3.6): a plain byte relay after the domain lists allow
//! the target. The upstream connection is made before answering 200, so a refused or
//! denied target gets a real error status.

use crate::body::{Body, empty};
use crate::error::ProxyError;
use crate::proxy::Ctx;
use crate::state::{Runtime, Shared};
use crate::target::{Scheme, Target};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::sync::Arc;

/// `open`, boxed. CONNECT is the rare path, and its state would otherwise make every
/// request's future (moved by hyper once per request) kilobytes larger.
pub fn open_boxed<'a>(
    shared: &'a Arc<Shared>,
    rt: &'a Runtime,
    req: Request<Incoming>,
    ctx: &'a mut Ctx,
) -> Pin<Box<dyn Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a>> {
    Box::pin(open(shared, rt, req, ctx))
}

async fn open(
    shared: &Arc<Shared>,
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
    let mut upstream = rt
        .client
        .connector
        .connect_tcp(&target.host, target.port)
        .await
        .map_err(|e| ProxyError::from(&e))?;

    let upgrade = hyper::upgrade::on(req);
    let metrics = shared.metrics.clone();
    let cut = shared.cut.clone();
    let id = ctx.id.clone();
    shared.tasks.spawn(async move {
        metrics.tunnels.inc();
        match upgrade.await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                tokio::select! {
                    r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
                        if let Err(e) = r {
                            tracing::debug!(request_id = ?id, "tunnel closed: {e}");
                        }
                    }
                    _ = cut.cancelled() => tracing::info!(request_id = ?id, "tunnel cut at the drain deadline"),
                }
            }
            Err(e) => tracing::debug!(request_id = ?id, "CONNECT upgrade failed: {e}"),
        }
        metrics.tunnels.dec();
    });
    shared.observer.emit(ctx.event(200, None, 0, true));
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut()
        .insert(crate::headers::X_TOLLGATE_REQUEST_ID, ctx.id.clone());
    Ok(resp)
}
