//! The admin listener: `/healthz`, `/readyz`, `/metrics`, `/config`, `/policies`,
//! `/discover`, `/remedy-stats`, `POST /reload`, and the dashboard under `/ui` ([`crate::ui`]).
//! With `admin.token` set, all but the two probes (and the dashboard's login page and
//! assets) need `Authorization: Bearer TOKEN` or the dashboard's session cookie; a
//! request that changes something on the strength of the cookie must come from the
//! dashboard's own origin. Every answer carries the dashboard's security headers.

pub mod ui;

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
use ui::Auth;

pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let s = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(Client(peer.ip()));
                let s = s.clone();
                async move { Ok::<_, Infallible>(route(&s, req).await) }
            });
            // A live stream whose browser stalls holds what hyper buffers for it: keep
            // that small (the admin API's requests are small too).
            let _ = http1::Builder::new()
                .max_buf_size(ADMIN_BUFFER)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// The most an admin connection buffers, each way.
const ADMIN_BUFFER: usize = 64 << 10;

/// The client's address, as the admin listener accepted it (what wrong tokens are
/// counted by: [`crate::ui::throttle`]).
#[derive(Debug, Clone, Copy)]
pub struct Client(pub std::net::IpAddr);

/// The client address of `req` (unspecified when not set: a request made in-process).
pub fn client(req: &Request<Incoming>) -> std::net::IpAddr {
    req.extensions()
        .get::<Client>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0)
}

/// 429 for an address sending too many wrong tokens, with `Retry-After`.
pub fn throttled(wait: std::time::Duration) -> Response<Body> {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut r = text(
        StatusCode::TOO_MANY_REQUESTS,
        "application/json",
        crate::error::body(
            "login_throttled",
            &format!(
                "too many wrong admin tokens from this address: the next is checked in {secs}s"
            ),
        ),
    );
    r.headers_mut().insert(header::RETRY_AFTER, secs.into());
    r
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

/// How the request proves it may use a protected endpoint: no token configured, the
/// right bearer token, or an open dashboard session. `None`: it does not.
fn authorised(shared: &Shared, req: &Request<Incoming>) -> Option<Auth> {
    let rt = shared.runtime.load();
    let Some(token) = &rt.config.admin.token else {
        return Some(Auth::Open);
    };
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    if let Some(given) = bearer {
        let right = crate::ui::session::same_secret(given, token.expose());
        shared
            .ui
            .logins
            .checked(client(req), right, std::time::Instant::now());
        return right.then_some(Auth::Bearer);
    }
    crate::ui::session::cookie(req.headers())
        .filter(|id| shared.ui.sessions.valid(id, token.expose()))
        .map(|_| Auth::Session)
}

/// Whether a request comes from a page of this admin listener's own origin: the
/// browser's `Sec-Fetch-Site` (which no page can set), else `Origin` against `Host`. A
/// cookie alone is no proof, since a browser attaches it whichever page sends.
fn same_origin(req: &Request<Incoming>) -> bool {
    let h = req.headers();
    if let Some(site) = h.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    match (h.get(header::ORIGIN).and_then(|v| v.to_str().ok()), host) {
        (Some(origin), Some(host)) => {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        }
        _ => false,
    }
}

/// Without a token, whether the request's `Host` names this listener: an IP address
/// (DNS rebinding needs a name of the attacker's), `localhost` (RFC 6761 §6.3: it
/// always resolves to loopback), or a name in `admin.hosts`. A request without `Host`
/// (HTTP/1.0) comes from no browser. With a token, rebinding gains nothing: the page has
/// neither the token nor this origin's cookie.
fn host_allowed(admin: &crate::config::Admin, req: &Request<Incoming>) -> bool {
    if admin.token.is_some() {
        return true;
    }
    let Some(host) = req
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("\u{0}"))
    else {
        return true;
    };
    let Ok(authority) = host.parse::<http::uri::Authority>() else {
        return false;
    };
    let name = authority.host().trim_end_matches('.');
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || admin.hosts.iter().any(|g| g.matches(name))
}

fn misdirected() -> Response<Body> {
    text(
        StatusCode::MISDIRECTED_REQUEST,
        "application/json",
        crate::error::body(
            "unknown_host",
            "this admin listener has no token and answers only to its address, `localhost` and the names in `admin.hosts` (a page rebinding its own name to this address must not reach it); add the name you use to `admin.hosts`, or set `admin.token`",
        ),
    )
}

fn unauthorised() -> Response<Body> {
    let mut r = text(
        StatusCode::UNAUTHORIZED,
        "application/json",
        crate::error::body(
            "unauthorized",
            "this admin endpoint needs `Authorization: Bearer <admin.token>` (or a dashboard session: log in at /ui)",
        ),
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// Headers every admin answer carries: the dashboard's CSP, and no sniffing, framing,
/// referrer or caching (the answers are live state, some of it config).
fn secure(h: &mut http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(crate::ui::assets::CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
}

async fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let mut r = answer(shared, req).await;
    secure(r.headers_mut());
    r
}

/// `POST /cache/purge[?policy=NAME]`: that policy's cache, or every cache, purged.
async fn purge(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let only = query.and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "policy")
            .map(|(_, v)| v.into_owned())
    });
    let rt = shared.runtime.load_full();
    match crate::policy::state::purge(&rt.config.policies, &rt.engine, only.as_deref()).await {
        Some(done) => json(StatusCode::OK, done),
        None => text(
            StatusCode::NOT_FOUND,
            "application/json",
            crate::error::body(
                "no_such_cache",
                "no policy of that name has a cache; `GET /policies` lists them, and `POST /cache/purge` without `policy` purges every cache",
            ),
        ),
    }
}

async fn answer(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    let probe = matches!(path, "/healthz" | "/readyz");
    let ui = path == "/ui" || path.starts_with("/ui/");
    if !probe && !host_allowed(&shared.runtime.load().config.admin, &req) {
        return misdirected();
    }
    // An address sending wrong tokens waits before its next one is checked.
    let bearer = req.headers().contains_key(header::AUTHORIZATION);
    if !probe
        && bearer
        && let Some(wait) = shared
            .ui
            .logins
            .closed(client(&req), std::time::Instant::now())
    {
        return throttled(wait);
    }
    let auth = if probe {
        None
    } else {
        authorised(shared, &req)
    };
    let safe = matches!(*req.method(), Method::GET | Method::HEAD);
    // A change carried by the session cookie must come from the dashboard's pages; and
    // whatever the proof, a browser's request from another site's page changes nothing
    // (without a token, a page on the web could otherwise reload a local gateway).
    let foreign = req
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() != b"same-origin" && v.as_bytes() != b"none");
    if !safe && (foreign || (auth == Some(Auth::Session) && !same_origin(&req))) {
        return text(
            StatusCode::FORBIDDEN,
            "application/json",
            crate::error::body(
                "cross_site_refused",
                "a dashboard session may change things only from the dashboard's own pages",
            ),
        );
    }
    if ui {
        // The dashboard's pages send a browser without a session to the login form; its
        // data endpoints answer 401 like the rest of the API.
        if auth.is_none() && path.starts_with("/ui/api/") {
            return unauthorised();
        }
        return ui::route(shared, req, auth).await;
    }
    if !probe && auth.is_none() {
        return unauthorised();
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
            // `?recent`: each endpoint's mean latency over the last minutes too (the
            // dashboard's sparklines).
            let recent = req.uri().query().is_some_and(|q| {
                form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "recent" && v != "false")
            });
            let mut out = match &shared.diagnostics.endpoints {
                Some(e) => e
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .to_json(recent.then(|| crate::diagnosis::unix_ns() / 1_000_000)),
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
        (&Method::GET, "/remedy-stats") => {
            json(StatusCode::OK, shared.diagnostics.remedy_stats.to_json())
        }
        (&Method::POST, "/cache/purge") => purge(shared, req.uri().query()).await,
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
            | "/remedy-stats" | "/reload" | "/cache/purge",
        ) => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found; try /ui (the dashboard), /healthz /readyz /metrics /config /policies /discover /remedy-stats, POST /reload or POST /cache/purge\n".into(),
        ),
    }
}
