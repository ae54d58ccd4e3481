//! The admin listener: `/healthz`, `/readyz`, `/metrics`, `/config`, `/policies`,
//! `/discover`, `/remedy-stats`, `POST /reload`.
//! With `admin.token` set, all but the two probes need `Authorization: Bearer TOKEN`.

use crate::body::{Body, full};
use crate::reload;
use crate::state::Shared;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;

pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let s = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let s = s.clone();
                async move { Ok::<_, Infallible>(route(&s, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    text(
        status,
        "application/json",
        serde_json::to_string_pretty(&v).expect("json") + "\n",
    )
}

/// Whether the request may use a protected endpoint: no token configured, or the right
/// bearer token (compared in constant time).
fn authorised(shared: &Shared, req: &Request<Incoming>) -> bool {
    let rt = shared.runtime.load();
    let Some(token) = &rt.config.admin.token else {
        return true;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .unwrap_or("");
    let (a, b) = (given.as_bytes(), token.expose().as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if !matches!(path, "/healthz" | "/readyz") && !authorised(shared, &req) {
        let mut r = text(
            StatusCode::UNAUTHORIZED,
            "application/json",
            crate::error::body(
                "unauthorized",
                "this admin endpoint needs `Authorization: Bearer <admin.token>`",
            ),
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, "/readyz") if shared.is_draining() => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "draining\n".into(),
        ),
        (&Method::GET, "/readyz") => text(StatusCode::OK, "text/plain", "ready\n".into()),
        (&Method::GET, "/metrics") => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics.encode(),
        ),
        (&Method::GET, "/config") => json(StatusCode::OK, shared.runtime.load().config.effective()),
        (&Method::GET, "/policies") => {
            let rt = shared.runtime.load_full();
            let mut out = crate::policy::state::describe(&rt.config.policies, &rt.engine).await;
            // Readiness does not follow the store: with Redis away each replica falls back
            // (`store.on_error`), which this shows.
            out["store"] = shared.store.describe();
            json(StatusCode::OK, out)
        }
        (&Method::GET, "/discover") => {
            let mut out = match &shared.diagnostics.endpoints {
                Some(e) => e.lock().unwrap_or_else(|p| p.into_inner()).to_json(),
                None => serde_json::json!({
                    "enabled": false,
                    "endpoints": [],
                    "message": "endpoint discovery is off; set `diagnosis: { discovery: { enabled: true } }` and restart",
                }),
            };
            // The declared aggregated endpoints are listed whether discovery is on or not:
            // they are known from the config, so their statistics are bounded by it.
            out["aggregated"] = shared
                .diagnostics
                .aggregated
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .to_json(&shared.runtime.load().config.endpoints);
            json(StatusCode::OK, out)
        }
        (&Method::GET, "/remedy-stats") => json(
            StatusCode::OK,
            shared
                .diagnostics
                .remedy_stats
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .to_json(),
        ),
        (&Method::POST, "/reload") => match reload::reload(shared).await {
            Ok(diff) => json(
                StatusCode::OK,
                serde_json::json!({ "reloaded": true, "diff": diff }),
            ),
            Err(errors) => json(
                StatusCode::UNPROCESSABLE_ENTITY,
                serde_json::json!({
                    "reloaded": false,
                    "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
                }),
            ),
        },
        (
            _,
            "/healthz" | "/readyz" | "/metrics" | "/config" | "/policies" | "/discover"
            | "/remedy-stats" | "/reload",
        ) => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found; try /healthz /readyz /metrics /config /policies /discover /remedy-stats or POST /reload\n".into(),
        ),
    }
}
