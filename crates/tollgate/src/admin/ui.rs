//! The dashboard's paths under `/ui` (docs/dashboard.md): its pages and assets, the login
//! that trades `admin.token` for a session, and the few endpoints only the dashboard
//! needs (`/ui/api/summary`, the live-call stream, a call's HAR entry). Everything else
//! it shows comes from the admin API beside it (`/discover`, `/policies`,
//! `/remedy-stats`, `/config`).

use crate::body::{Body, full};
use crate::state::Shared;
use crate::ui::{assets, session, timestamp, unix_s};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::SystemTime;

/// The most a login form's body may be.
const MAX_FORM: usize = 4096;

/// How long a click on a live call waits for its HAR entry, which the HAR writer may
/// still be encoding when the call shows (only a captured call is clickable).
const HAR_ENTRY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How a request to the admin listener proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// No `admin.token` is set.
    Open,
    Bearer,
    Session,
}

/// Answers a request under `/ui`: the login page and the assets to anyone, the rest
/// only with `auth` (a browser without it is sent to the login form).
pub async fn route(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    auth: Option<Auth>,
) -> Response<Body> {
    let rt = shared.runtime.load_full();
    if !rt.config.admin.ui.enabled {
        return plain(
            StatusCode::NOT_FOUND,
            "the dashboard is off (admin.ui.enabled: false)\n",
        );
    }
    let path = req.uri().path().to_owned();
    if let Some(asset) = assets::find(&path)
        && req.method() == Method::GET
    {
        return asset.response();
    }
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/ui/login") => match (rt.config.admin.token.is_some(), auth) {
            (true, None | Some(Auth::Open)) => {
                assets::login_page(req.uri().query() == Some("failed"))
            }
            _ => see_other("/ui", None),
        },
        (Method::POST, "/ui/login") => login(shared, req).await,
        (Method::POST, "/ui/logout") => {
            if let Some(id) = session::cookie(req.headers()) {
                shared.ui.sessions.close(id);
            }
            see_other("/ui/login", Some(session::clear_cookie()))
        }
        (_, "/ui/login" | "/ui/logout") => {
            plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
        }
        _ if auth.is_none() => see_other("/ui/login", None),
        (Method::GET, "/ui" | "/ui/") => assets::index_page(),
        (Method::GET, "/ui/api/summary") => json_response(StatusCode::OK, &summary(shared)),
        (Method::GET, "/ui/api/live") => {
            let Ok(stream) = shared.ui.live.stream() else {
                return json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"error": format!("{} live streams are open, the most at once: close a dashboard tab", crate::ui::live::MAX_STREAMS)}),
                );
            };
            let mut r = Response::new(stream);
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        (Method::GET, p) if p.starts_with("/ui/api/har/") => {
            let id = &p["/ui/api/har/".len()..];
            let recent = &shared.diagnostics.recent_har;
            match recent.get_within(id, HAR_ENTRY_WAIT).await {
                Some(line) => {
                    let mut r = Response::new(full(line.to_string()));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    r
                }
                None => json_response(
                    StatusCode::NOT_FOUND,
                    &json!({"error": "no HAR entry for this call: HAR capture is off, the call was not sampled or not selected, or it is older than the last 256 entries kept while the live view is open"}),
                ),
            }
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found; the dashboard is at /ui\n",
        ),
    }
}

/// `POST /ui/login`: the form's `token` against `admin.token`; a session on success.
async fn login(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let rt = shared.runtime.load_full();
    let Some(token) = &rt.config.admin.token else {
        return see_other("/ui", None);
    };
    let from = super::client(&req);
    let now = std::time::Instant::now();
    if let Some(wait) = shared.ui.logins.closed(from, now) {
        shared
            .metrics
            .ui_logins
            .get_or_create(&crate::metrics::ResultLabels {
                result: "throttled",
            })
            .inc();
        tracing::warn!("dashboard login from {from} refused unchecked: too many wrong tokens");
        return super::throttled(wait);
    }
    let body = http_body_util::Limited::new(req.into_body(), MAX_FORM)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let given = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let ok = session::same_secret(given.trim(), token.expose());
    shared.ui.logins.checked(from, ok, now);
    let result = if ok { "ok" } else { "error" };
    shared
        .metrics
        .ui_logins
        .get_or_create(&crate::metrics::ResultLabels { result })
        .inc();
    let ui = &rt.config.admin.ui;
    match ok
        .then(|| {
            shared
                .ui
                .sessions
                .open(token.expose(), ui.session_ttl, ui.max_sessions)
        })
        .flatten()
    {
        Some(id) => see_other("/ui", Some(session::set_cookie(&id, ui.session_ttl))),
        None => {
            tracing::warn!("dashboard login refused: wrong token");
            see_other("/ui/login?failed", None)
        }
    }
}

/// 303 to `to` (RFC 9110 §15.4.4): the browser fetches it with GET, so a refresh never
/// posts the form again and the history holds no form.
fn see_other(to: &'static str, cookie: Option<HeaderValue>) -> Response<Body> {
    let mut r = Response::new(crate::body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    if let Some(c) = cookie {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(full(text));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /ui/api/summary`: the header's last minute, the last failures, the gateway's
/// version and uptime, what is switched on, the last reload.
fn summary(shared: &Shared) -> Value {
    let ui = &shared.ui;
    let now = unix_s(SystemTime::now());
    let since = unix_s(ui.started());
    let m = ui.last_minute();
    let rt = shared.runtime.load();
    let c = &rt.config;
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started": timestamp(ui.started()),
        "uptime_s": now.saturating_sub(since),
        "minute": {
            "requests": m.requests,
            "errors": m.errors,
            "per_second": m.per_second,
            "error_rate": if m.requests > 0 { m.errors as f64 / m.requests as f64 } else { 0.0 },
            "p99_ms": m.p99_ms,
        },
        "failures": ui.live.failures(),
        "har": c.diagnosis.har.enabled,
        "discovery": c.diagnosis.discovery.enabled,
        "login": c.admin.token.is_some(),
        "draining": shared.is_draining(),
        "last_reload": ui.last_reload(),
    })
}
