//! Test support: in-process gateways on port 0, in-process upstreams (echo, fault
//! injection, TLS with an rcgen CA), and real HTTP clients.
#![allow(dead_code)]

pub mod config;
pub mod redis_procs;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate::body::{Body, full};
use tollgate::{Config, Gateway, Overrides, StartOptions};

/// Tests tunnel to upstreams on ephemeral ports; the default allows CONNECT to 443 only.
pub const ANY_CONNECT_PORT: &str = "egress:\n  connect_ports: ['*']\n";

pub fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Data-plane workers of the gateways tests start: several, so that every test runs
/// across workers (connections spread over them by the kernel).
pub const WORKERS: usize = 2;

/// Starts a gateway from YAML on ephemeral ports.
pub async fn gateway(yaml: &str) -> Gateway {
    gateway_with_workers(yaml, WORKERS).await
}

/// Starts a gateway from YAML on ephemeral ports with `workers` data-plane workers.
pub async fn gateway_with_workers(yaml: &str, workers: usize) -> Gateway {
    let config = Config::from_yaml(yaml).unwrap_or_else(|e| panic!("test config invalid: {e:?}"));
    start_on_local_ports(StartOptions {
        config: Some(config),
        workers: Some(workers),
        ..Default::default()
    })
    .await
}

/// Starts a gateway from a config file (reload tests).
pub async fn gateway_from_file(path: &std::path::Path, watch: bool) -> Gateway {
    start_on_local_ports(StartOptions {
        config_files: Some(tollgate::config::ConfigFiles::one(path)),
        watch,
        workers: Some(WORKERS),
        ..Default::default()
    })
    .await
}

/// Starts a gateway with `options`, its proxy and admin listeners on ephemeral ports.
pub async fn start_on_local_ports(options: StartOptions) -> Gateway {
    Gateway::start(StartOptions {
        overrides: Overrides {
            listen: Some(local0()),
            admin: Some(local0()),
        },
        ..options
    })
    .await
    .expect("gateway starts")
}

pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An in-process hyper upstream (HTTP/1.1 and h2c) running `handler` for every request.
pub async fn upstream<F, Fut>(handler: F) -> Server
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    upstream_on(local0(), handler).await
}

/// [`upstream`] listening on `addr` (another loopback address, a given port).
pub async fn upstream_on<F, Fut>(addr: SocketAddr, handler: F) -> Server
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(serve_http(stream, handler.clone()));
        }
    });
    Server { addr, task }
}

/// Serves one connection (HTTP/1.1 or h2) with `handler`.
async fn serve_http<IO, F, Fut>(io: IO, handler: F)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let svc = service_fn(move |req| {
        let h = handler.clone();
        async move { Ok::<_, Infallible>(h(req).await) }
    });
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// What the echo upstream saw, as JSON: method, uri, version, headers in order, body.
pub async fn echo_json(req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let headers: Vec<Value> = parts
        .headers
        .iter()
        .map(|(n, v)| json!([n.as_str(), String::from_utf8_lossy(v.as_bytes())]))
        .collect();
    let seen = json!({
        "method": parts.method.as_str(),
        "uri": parts.uri.to_string(),
        "path": parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or(""),
        "version": format!("{:?}", parts.version),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
        "body_len": body.len(),
    });
    let mut r = Response::new(full(seen.to_string()));
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

pub async fn echo_upstream() -> Server {
    upstream(echo_json).await
}

/// Accepts connections and reads the request, then closes without answering.
pub async fn reset_upstream() -> Server {
    raw_upstream(|mut s| async move {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        drop(s);
    })
    .await
}

/// Accepts connections and never answers (but keeps them open).
pub async fn stall_upstream() -> Server {
    raw_upstream(|mut s| async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
}

pub async fn raw_upstream<F, Fut>(f: F) -> Server
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(local0()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let f = Arc::new(f);
    let task = tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(f(s));
        }
    });
    Server { addr, task }
}

pub type TestClient = Client<HttpConnector, Body>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn h2c_client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub struct Got {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The `x-tollgate-error` code, asserting the JSON body says the same.
    pub fn error_code(&self) -> Option<String> {
        let code = self.header("x-tollgate-error")?.to_owned();
        let error = &self.json()["error"];
        assert_eq!(error["code"], code.as_str(), "body and header agree");
        assert_eq!(error["type"], "tollgate_error");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        Some(code)
    }

    /// The sentence of tollgate's own error body (`error.message`).
    pub fn error_message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .expect("an error body with error.message")
            .to_owned()
    }
}

pub async fn send(client: &TestClient, req: Request<Body>) -> Got {
    let resp = client.request(req).await.expect("request completes");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body completes").to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A request to the gateway in header-routed mode for an http upstream.
/// `n` GETs all in flight together, the `i`th to `path(i)` on `gws[i % len]` in header
/// mode towards `up`: the answers, in order.
pub async fn at_once(
    gws: &[Gateway],
    up: SocketAddr,
    n: usize,
    path: impl Fn(usize) -> String,
) -> Vec<Got> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let req = via_header(&gws[i % gws.len()], up, &path(i))
            .body(empty())
            .unwrap();
        tasks.push(tokio::spawn(async move { send(&client(), req).await }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

pub fn via_header(gw: &Gateway, upstream: SocketAddr, path: &str) -> http::request::Builder {
    Request::get(format!("http://{}{path}", gw.proxy_addr))
        .header("x-tollgate-host", upstream.to_string())
        .header("x-tollgate-scheme", "http")
}

pub fn empty() -> Body {
    tollgate::body::empty()
}

pub fn bytes_body(b: impl Into<Bytes>) -> Body {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// GET on the admin listener.
pub async fn admin_get(gw: &Gateway, path: &str) -> Got {
    send(
        &client(),
        Request::get(format!("http://{}{path}", gw.admin_addr))
            .body(empty())
            .unwrap(),
    )
    .await
}

/// Polls `/metrics` until `done(text)` holds and returns that text; fails the test with
/// the last text read when it has not held within 10 s (a deadline for a condition, not
/// a speed assertion: events reach the metrics through the observer queue).
pub async fn metrics_when(gw: &Gateway, done: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..500 {
        text = String::from_utf8_lossy(&admin_get(gw, "/metrics").await.body).into_owned();
        if done(&text) {
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("/metrics never showed what the test waits for within 10 s; it last read:\n{text}");
}

/// Polls `ok` every 10 ms until it holds; fails the test, naming `what`, when it has not
/// held within 10 s (a deadline for a condition, not a speed assertion).
pub async fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what}: never happened within 10 s");
}

/// Polls `probe` every 10 ms until it gives `Ok`, and returns what it gave; fails the
/// test, naming `what` and the last `Err` it gave, when it has not within 10 s (a
/// deadline for a condition, not a speed assertion).
pub async fn eventually<T, E, F, Fut>(what: &str, mut probe: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut last = None;
    for _ in 0..1000 {
        match probe().await {
            Ok(v) => return v,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what}: never happened within 10 s; last seen: {last:?}");
}

/// Writes raw bytes to the proxy and reads the whole answer until the server closes.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `CONNECT target` through the proxy; returns the connection and the answer's head.
pub async fn connect_via(proxy: SocketAddr, target: &str) -> (tokio::net::TcpStream, String) {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let n = s.read(&mut buf).await.unwrap();
    (s, String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A test CA and a leaf for `localhost` / 127.0.0.1, made by rcgen.
pub struct TestPki {
    pub ca_pem: String,
    pub leaf_der: rustls_pki_types::CertificateDer<'static>,
    pub key_der: rustls_pki_types::PrivateKeyDer<'static>,
}

pub fn pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tollgate test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    TestPki {
        ca_pem: ca.pem(),
        leaf_der: leaf.der().clone(),
        key_der: rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    }
}

/// A TLS upstream (ALPN h2 and http/1.1) running `handler`.
pub async fn tls_upstream<F, Fut>(pki: &TestPki, alpn: &[&[u8]], handler: F) -> Server
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![pki.leaf_der.clone()], pki.key_der.clone_key())
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind(local0()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, h) = (acceptor.clone(), handler.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    serve_http(tls, h).await;
                }
            });
        }
    });
    Server { addr, task }
}

/// Resident set size of this process in KiB (Linux).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// What a [`recording_upstream`] received: each request head exactly as it arrived.
pub type Heads = Arc<std::sync::Mutex<Vec<String>>>;

/// A raw-socket HTTP/1.1 upstream that records every request head byte for byte (request
/// line and header lines in order) and answers `200 ok`, keeping the connection open.
/// A request body framed by Content-Length is read and dropped.
pub async fn recording_upstream() -> (Server, Heads) {
    let heads: Heads = Arc::default();
    let h = heads.clone();
    let server = raw_upstream(move |mut s| {
        let heads = h.clone();
        async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                let body_len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (n, v) = l.split_once(':')?;
                        n.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while buf.len() < end + body_len {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..end + body_len);
                heads.lock().unwrap().push(head);
                if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    })
    .await;
    (server, heads)
}

/// The lines of a recorded head: request line first, then each header line as sent.
pub fn head_lines(head: &str) -> Vec<&str> {
    head.split("\r\n").filter(|l| !l.is_empty()).collect()
}

/// Reads one message head (through the blank line) byte by byte, so nothing after it is
/// consumed; what arrived before a close when the peer closes first.
pub async fn read_head(s: &mut tokio::net::TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(_) => got.push(b[0]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads a request's head and its body (`content-length` bytes) off `s`: whether the
/// whole of it came.
pub async fn read_request(s: &mut tokio::net::TcpStream) -> bool {
    let head = read_head(s).await.to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    s.read_exact(&mut vec![0u8; len]).await.is_ok()
}

/// An upstream that counts its requests and answers with `handler`.
pub async fn counting_upstream<F, Fut>(handler: F) -> (Server, Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(Request<Incoming>, usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = n.clone();
    let server = upstream(move |req| {
        let i = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        handler(req, i)
    })
    .await;
    (server, n)
}

/// A response with `status`, headers and body.
pub fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Body> {
    let mut r = Response::new(full(body.to_owned()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    for (n, v) in headers {
        r.headers_mut().append(
            http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    r
}

/// GET `path` on an http upstream in header mode, with extra request headers.
pub async fn get_via(gw: &Gateway, up: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut b = via_header(gw, up, path);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    send(&client(), b.body(empty()).unwrap()).await
}

/// `POST /reload` on the admin listener.
pub async fn post_reload(gw: &Gateway) -> Got {
    admin_post(gw, "/reload").await
}

/// A `POST` of `path` (with its query) on the admin listener, without a body.
pub async fn admin_post(gw: &Gateway, path: &str) -> Got {
    send(
        &client(),
        Request::post(format!("http://{}{path}", gw.admin_addr))
            .body(empty())
            .unwrap(),
    )
    .await
}

/// Polls `dir` until its HAR files hold `n` entries (a deadline, not a speed assertion).
pub async fn har_entries_in(dir: &std::path::Path, n: usize) -> Vec<Value> {
    use tollgate::diagnosis::har::read;
    for _ in 0..1000 {
        if let Ok(e) = read::load(dir)
            && e.len() >= n
        {
            return e;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!(
        "{dir:?} did not get {n} HAR entries: {:?}",
        read::load(dir).map(|e| e.len())
    );
}

/// A tool the tests install themselves (an SDK from PyPI, a validator from npm), once
/// under target/`name`, however many tests ask at once: the first to create the lock
/// file runs `install(dir)` (true on success), the others wait for `.installed`.
/// Panics with `needs` when the install fails or never finishes.
pub fn install_once(
    name: &str,
    needs: &str,
    install: impl FnOnce(&std::path::Path) -> bool,
) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(name);
    let done = dir.join(".installed");
    let lock = dir.with_extension("lock");
    std::fs::create_dir_all(&dir).unwrap();
    for _ in 0..1800 {
        if done.exists() {
            return dir;
        }
        if std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
            .is_ok()
        {
            let ok = install(&dir);
            if ok {
                std::fs::write(&done, "").unwrap();
            }
            std::fs::remove_file(&lock).unwrap();
            assert!(ok, "installing {name} failed: {needs}");
            return dir;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("installing {name} did not finish");
}

/// A pinned npm package (`name@version`), installed once under target/`dir` with
/// `npm install --prefix` (its modules in `node_modules`, for `NODE_PATH`).
pub fn npm_once(dir: &str, package: &str) -> std::path::PathBuf {
    install_once(
        dir,
        "these tests need node and npm (apt-get install nodejs npm)",
        |d| {
            std::process::Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(d)
                .arg(package)
                .status()
                .is_ok_and(|s| s.success())
        },
    )
}

/// Pinned Python packages from PyPI, installed once under target/`name` with
/// `pip install --target` (no virtualenv needed; put the folder on `PYTHONPATH`).
pub fn pip_once(name: &str, packages: &[&str]) -> std::path::PathBuf {
    install_once(name, "these tests need python3 with pip, and PyPI", |dir| {
        std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--target")
            .arg(dir)
            .args(packages)
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Runs `cmd` off the runtime: its stdout, or a panic with both streams (and how to
/// install a program that is missing).
pub async fn stdout_of(mut cmd: std::process::Command) -> String {
    let out = tokio::task::spawn_blocking(move || {
        cmd.output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (install it: see .ci/run)"))
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Seconds until the wall clock's next hour: when `window: hour` counters end.
pub fn secs_to_the_hour() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    3600 - now % 3600
}

/// Waits out the hour's last `margin` seconds, so that a test counting in an hour window
/// does not see the window end halfway (windows are the clock's hours, not the test's).
pub async fn clear_of_the_hour_end(margin: u64) {
    let left = secs_to_the_hour();
    if left <= margin {
        tokio::time::sleep(std::time::Duration::from_secs(left + 1)).await;
    }
}
