//! `tollgate provider`: a fast, httpbin-compatible provider emulator for tests, demos and
//! benchmarks. Same hyper stack as the proxy, no logging on the request path, so it is
//! never the bottleneck of a benchmark. A crate of its own: the gateway library does not
//! carry it.
#![forbid(unsafe_code)]

pub mod body;
mod echo;
pub mod llm;
pub mod mcp;
mod streams;
pub mod timer;
pub mod tls;

use crate::body::{Body, full};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The fixed body of `/static`: 110 bytes, for capacity tests.
pub const STATIC_BODY: &[u8; 110] =
    b"{\"provider\":\"tollgate\",\"path\":\"/static\",\"note\":\"fixed body for capacity benchmarks\",\"ok\":true,\"pad\":\"xxxxxx\"}\n";

/// The fixed body of `/static/data`: an object under `data` and one beside it, for the
/// aggregation benchmark's `target: data` backend.
pub const STATIC_DATA_BODY: &[u8] =
    b"{\"data\":{\"provider\":\"tollgate\",\"path\":\"/static/data\",\"ok\":true,\"items\":[1,2,3]},\"meta\":{\"page\":1}}\n";

pub struct Provider {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Provider {
    pub async fn start(addr: SocketAddr) -> std::io::Result<Provider> {
        Self::start_with(addr, None).await
    }

    /// The provider over TLS with `tls` (HTTP/1.1 or h2 as ALPN settles), or plain.
    pub async fn start_with(
        addr: SocketAddr,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<Provider> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve(stream, peer).await,
                        Some(a) => {
                            if let Ok(tls) = a.accept(stream).await {
                                serve(tls, peer).await;
                            }
                        }
                    }
                });
            }
        });
        Ok(Provider { addr, task })
    }
}

/// Serves one connection, HTTP/1.1 or h2 (told apart by the first bytes).
async fn serve<IO>(io: IO, peer: SocketAddr)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| async move { Ok::<_, Infallible>(route(req, peer).await) });
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

pub(crate) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<bytes::Bytes>,
) -> Response<Body> {
    let mut r = Response::new(full(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub(crate) fn json(v: &serde_json::Value) -> Response<Body> {
    let mut s = serde_json::to_vec_pretty(v).expect("json");
    s.push(b'\n');
    respond(StatusCode::OK, "application/json", s)
}

fn not_found(what: &str) -> Response<Body> {
    respond(StatusCode::NOT_FOUND, "text/plain", format!("{what}\n"))
}

/// `d` as seconds (`0.15`) or a duration (`150ms`); at most 60 s.
pub(crate) fn parse_delay(d: &str) -> Option<Duration> {
    let dur = match d.parse::<f64>() {
        // `try_`: a number of seconds past what a Duration holds is refused, not a panic.
        Ok(secs) => Duration::try_from_secs_f64(secs).ok()?,
        Err(_) => humantime::parse_duration(d).ok()?,
    };
    Some(dur.min(Duration::from_secs(60)))
}

/// A fixed JSON body, after `?delay=D` when the query asks for one (`/static?delay=2ms`):
/// the aggregation benchmark gives each backend its own response time.
async fn fixed(req: &Request<Incoming>, body: &'static [u8]) -> Response<Body> {
    let delay = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("delay=")));
    if let Some(d) = delay {
        let Some(dur) = parse_delay(d) else {
            return not_found("bad delay: use ?delay=0.002 or ?delay=2ms");
        };
        timer::sleep_until(std::time::Instant::now() + dur).await;
    }
    respond(StatusCode::OK, "application/json", body)
}

async fn route(req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let mut segs = path.trim_start_matches('/').splitn(2, '/');
    let (head, rest) = (segs.next().unwrap_or(""), segs.next());
    if req.method() == Method::POST && matches!(head, "v1" | "v1beta" | "pace" | "compress") {
        // Routed as Python's ASGI servers and Go's net/http route it: escapes decoded.
        let path = llm::decoded_path(&path);
        return match llm::route(req, &path).await {
            Some(r) => r,
            None => not_found(
                "not an LLM API path: /v1/chat/completions /v1/responses /v1/embeddings /v1/messages /v1beta/models/{m}:generateContent",
            ),
        };
    }
    match (head, rest) {
        ("mcp", None) if req.method() == Method::POST => mcp::answer(req).await,
        ("static", None) => fixed(&req, &STATIC_BODY[..]).await,
        ("static", Some("data")) => fixed(&req, STATIC_DATA_BODY).await,
        ("delay", Some(d)) => match parse_delay(d) {
            Some(dur) => {
                // Not tokio's sleep: it rounds up to a 1 ms tick (see `timer`).
                timer::sleep_until(std::time::Instant::now() + dur).await;
                echo::echo(req, peer, false).await
            }
            None => not_found("bad delay: use /delay/0.15 or /delay/150ms"),
        },
        ("status", Some(codes)) => streams::status(codes),
        ("bytes", Some(n)) => streams::bytes(n, req.uri().query()),
        ("stream-bytes", Some(n)) => streams::bytes(n, req.uri().query()),
        ("stream", Some(n)) => streams::stream(n, req, peer),
        ("drip", None) => streams::drip(req.uri().query()),
        ("gzip", None) => streams::gzip(req, peer).await,
        ("json", None) => echo::sample_json(),
        ("uuid", None) => streams::uuid(),
        ("anything", _) => echo::echo(req, peer, true).await,
        ("headers", None) => echo::headers(&req),
        ("get", None) if req.method() == Method::GET || req.method() == Method::HEAD => {
            echo::echo(req, peer, false).await
        }
        ("post", None) if req.method() == Method::POST => echo::echo(req, peer, true).await,
        ("put", None) if req.method() == Method::PUT => echo::echo(req, peer, true).await,
        ("patch", None) if req.method() == Method::PATCH => echo::echo(req, peer, true).await,
        ("delete", None) if req.method() == Method::DELETE => echo::echo(req, peer, true).await,
        ("get" | "post" | "put" | "patch" | "delete", None) => respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        ),
        _ => not_found(
            "not found: /static[/data][?delay=D] /mcp (POST) /delay/{d} /status/{code} /bytes/{n} /anything /headers /get /post /drip /gzip /json /uuid /stream/{n}",
        ),
    }
}
