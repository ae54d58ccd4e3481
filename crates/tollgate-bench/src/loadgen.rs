//! The load generator: keep-alive HTTP/1.1 connections on one pinned thread (or several,
//! each with its share of the connections and requests, for multi-core targets), closed
//! loop (like `ab`/`hey`) or open loop at a fixed arrival rate with coordinated-omission
//! correction. Every latency goes into an HdrHistogram; errors and non-2xx are counted.

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Latencies in nanoseconds, 1 µs .. 120 s, 5 significant digits: 1 µs steps up to
/// 262 ms, 2 µs to 524 ms, 4 µs to 1 s (4 digits gave 8 µs steps at 150 ms and 32 µs at
/// 1 s, coarser than the differences between proxies). One per target (11 MB), shared by
/// its connections on the load generator's single thread.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 120_000_000_000, 5).expect("valid histogram bounds")
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Each connection sends its next request when the previous one completes.
    Closed,
    /// Requests are sent at a fixed total rate (per second), spread over the connections.
    Open { rate: f64 },
}

#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub url: Uri,
    /// Extra request headers (e.g. `x-tollgate-host` for header-routed targets).
    pub headers: Vec<(String, String)>,
    /// A JSON body: each request POSTs it (`content-type: application/json`); `None`:
    /// GET without a body.
    pub body: Option<Bytes>,
    pub requests: u64,
    pub warmup: u64,
    pub concurrency: usize,
    pub mode: Mode,
    /// Cores to pin the load-generator threads to (thread `t` on `cores[t]`), when the OS
    /// allows; empty: unpinned.
    pub cores: Vec<usize>,
    /// Load-generator threads (at least 1): each runs its share of the connections and
    /// requests, all starting together; their results are merged.
    pub threads: usize,
    /// An `https` URL: how its connections are made (straight, or through a proxy's
    /// CONNECT tunnel) and what their TLS client trusts.
    pub tls: Option<Arc<Tls>>,
}

/// How connections to an HTTPS target are made: a CONNECT tunnel through `proxy` first
/// (RFC 9110 §9.3.6), when there is one, then TLS with `client`, naming the URL's host.
#[derive(Debug)]
pub struct Tls {
    pub proxy: Option<std::net::SocketAddr>,
    pub client: Arc<rustls::ClientConfig>,
}

impl Tls {
    /// A client trusting the certificates of the PEM file `roots`, offering HTTP/1.1.
    pub fn trusting(
        roots: &std::path::Path,
        proxy: Option<std::net::SocketAddr>,
    ) -> Result<Arc<Tls>, String> {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        let mut store = rustls::RootCertStore::empty();
        for cert in
            CertificateDer::pem_file_iter(roots).map_err(|e| format!("{}: {e}", roots.display()))?
        {
            store
                .add(cert.map_err(|e| format!("{}: {e}", roots.display()))?)
                .map_err(|e| format!("{}: {e}", roots.display()))?;
        }
        let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(Tls {
            proxy,
            client: Arc::new(client),
        }))
    }
}

#[derive(Debug)]
pub struct RunResult {
    pub hist: Histogram<u64>,
    pub ok: u64,
    pub non_2xx: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// CPU time the load-generator threads used during the measured part.
    pub cpu: Duration,
    /// How many threads generated the load.
    pub threads: usize,
}

impl RunResult {
    pub fn rps(&self) -> f64 {
        (self.ok + self.non_2xx) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Fraction of its cores the load generator used; near 1.0 means it may be the
    /// bottleneck.
    pub fn cpu_share(&self) -> f64 {
        self.cpu.as_secs_f64() / (self.elapsed.as_secs_f64() * self.threads.max(1) as f64).max(1e-9)
    }

    /// Merges the results of threads that ran at the same time.
    fn merge(mut self, other: RunResult) -> RunResult {
        let _ = self.hist.add(&other.hist);
        self.ok += other.ok;
        self.non_2xx += other.non_2xx;
        self.errors += other.errors;
        self.elapsed = self.elapsed.max(other.elapsed);
        self.cpu += other.cpu;
        self.threads += other.threads;
        self
    }
}

/// CPU time of the calling thread (Linux: /proc/thread-self/schedstat), if available.
pub fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace()
        .next()?
        .parse()
        .ok()
        .map(Duration::from_nanos)
}

/// Runs a load on a dedicated (pinned) thread with its own single-threaded runtime.
pub fn run(spec: LoadSpec) -> Result<RunResult, String> {
    run_many(vec![spec])?
        .pop()
        .ok_or_else(|| "no result".to_string())
}

/// Runs several loads at once, interleaved request by request: each target keeps its own
/// connections, rate and histogram, and target `j` of `k` is scheduled `j/k` of an
/// interval after target 0. Whatever the machine does during the run (a stall, another
/// tenant) then falls on every target alike, which rounds seconds apart cannot promise.
/// The CPU share and elapsed time are the whole run's.
///
/// With `threads` > 1 each thread takes an equal share of every spec's connections,
/// requests, warm-up and rate, and all threads start measuring together (after their
/// warm-up); the results are merged per target.
pub fn run_many(specs: Vec<LoadSpec>) -> Result<Vec<RunResult>, String> {
    let threads = specs.first().map_or(1, |s| s.threads.max(1));
    let cores = specs.first().map(|s| s.cores.clone()).unwrap_or_default();
    let start = Arc::new(std::sync::Barrier::new(threads));
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let share: Vec<LoadSpec> = specs.iter().map(|s| s.share(t, threads)).collect();
        let core = cores.get(t).copied();
        let start = start.clone();
        let h = std::thread::Builder::new()
            .name(format!("tollgate-loadgen-{t}"))
            .spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core_affinity::CoreId { id: core });
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string());
                match rt {
                    Ok(rt) => rt.block_on(run_async(share, &start)),
                    Err(e) => {
                        // The others must not wait for this thread forever.
                        start.wait();
                        Err(e)
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        handles.push(h);
    }
    let mut merged: Option<Vec<RunResult>> = None;
    let mut first_error = None;
    for h in handles {
        match h
            .join()
            .map_err(|_| "load generator panicked".to_string())?
        {
            Ok(results) => {
                merged = Some(match merged {
                    None => results,
                    Some(m) => m
                        .into_iter()
                        .zip(results)
                        .map(|(a, b)| a.merge(b))
                        .collect(),
                });
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => merged.ok_or_else(|| "no result".into()),
    }
}

impl LoadSpec {
    /// Thread `t`'s share of this load when `n` threads run it: connections, requests and
    /// warm-up split as evenly as whole numbers allow, the rate divided.
    fn share(&self, t: usize, n: usize) -> LoadSpec {
        let part = |total: u64| total / n as u64 + u64::from((t as u64) < total % n as u64);
        LoadSpec {
            requests: part(self.requests),
            warmup: part(self.warmup),
            concurrency: (self.concurrency / n + usize::from(t < self.concurrency % n)).max(1),
            mode: match self.mode {
                Mode::Closed => Mode::Closed,
                Mode::Open { rate } => Mode::Open {
                    rate: rate / n as f64,
                },
            },
            threads: 1,
            ..self.clone()
        }
    }
}

struct Shared {
    spec: LoadSpec,
    next: AtomicU64,
    non_2xx: AtomicU64,
    errors: AtomicU64,
    /// Uncontended: every worker runs on the load generator's one thread.
    hist: Mutex<Histogram<u64>>,
}

async fn run_async(
    specs: Vec<LoadSpec>,
    start: &std::sync::Barrier,
) -> Result<Vec<RunResult>, String> {
    let mut warm = Vec::new();
    for spec in &specs {
        // Probe once so a dead target is an error, not 100 000 counted failures.
        let probe = connect(spec).await;
        let Ok(mut probe) = probe else {
            start.wait();
            return Err(format!(
                "cannot connect to {}: {}",
                spec.url,
                probe.err().unwrap_or_default()
            ));
        };
        let _ = send(&mut probe, spec).await;
        if spec.warmup > 0 {
            warm.push(LoadSpec {
                requests: spec.warmup,
                warmup: 0,
                mode: Mode::Closed,
                ..spec.clone()
            });
        }
    }
    if !warm.is_empty() {
        measure(warm, None).await;
    }
    Ok(measure(specs, Some(start)).await)
}

/// Runs `specs` to the end; with `start`, waits there (for the other threads) once the
/// connections are open, just before the clock starts.
async fn measure(specs: Vec<LoadSpec>, start: Option<&std::sync::Barrier>) -> Vec<RunResult> {
    let k = specs.len().max(1);
    // Everything a worker needs is made before the clock starts: connection set-up is not
    // latency, and neither is zeroing the histograms (2 MB each; done after the start on
    // this single thread, it delayed the first wave of requests by up to 150 ms).
    let mut prepared = Vec::with_capacity(k);
    for spec in specs {
        let c = spec.concurrency.max(1);
        let mut conns = Vec::with_capacity(c);
        for _ in 0..c {
            conns.push(connect(&spec).await.ok());
        }
        let shared = Arc::new(Shared {
            spec,
            next: AtomicU64::new(0),
            non_2xx: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            hist: Mutex::new(new_histogram()),
        });
        prepared.push((shared, conns));
    }
    if let Some(b) = start {
        // Blocks this thread, which has nothing else to run until the clock starts.
        b.wait();
    }
    // CPU and wall time cover the same window: from the start to the last response, with
    // neither the set-up above nor the merge below.
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for (j, (shared, conns)) in prepared.iter_mut().enumerate() {
        let c = conns.len();
        for (i, conn) in conns.drain(..).enumerate() {
            let phase = (i as f64 + j as f64 / k as f64) / c as f64;
            workers.spawn(worker(shared.clone(), phase, c, start, conn));
        }
    }
    while workers.join_next().await.is_some() {}
    let elapsed = start.elapsed();
    let cpu = match (cpu0, thread_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => Duration::ZERO,
    };
    prepared
        .into_iter()
        .map(|(shared, _)| {
            // Every worker has ended: take the histogram out, leaving an empty one.
            let hist =
                std::mem::replace(&mut *lock(&shared.hist), Histogram::new(1).expect("tiny"));
            RunResult {
                ok: hist.len(),
                hist,
                non_2xx: shared.non_2xx.load(Ordering::Relaxed),
                errors: shared.errors.load(Ordering::Relaxed),
                elapsed,
                cpu,
                threads: 1,
            }
        })
        .collect()
}

/// The histogram, even if a worker panicked while holding it (it holds it only to record).
fn lock(h: &Mutex<Histogram<u64>>) -> std::sync::MutexGuard<'_, Histogram<u64>> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's loop. `phase` is its first send, in intervals after the start.
async fn worker(
    shared: Arc<Shared>,
    phase: f64,
    concurrency: usize,
    start: Instant,
    mut conn: Option<SendRequest<Full<Bytes>>>,
) {
    let spec = &shared.spec;
    // Open loop: this connection's share of the schedule, offset so connections interleave.
    let interval = match spec.mode {
        Mode::Open { rate } => Some(Duration::from_secs_f64(concurrency as f64 / rate.max(1e-9))),
        Mode::Closed => None,
    };
    let mut intended = interval.map(|iv| start + iv.mul_f64(phase));
    loop {
        if shared.next.fetch_add(1, Ordering::Relaxed) >= spec.requests {
            break;
        }
        let mut from = None;
        if let (Some(at), Some(iv)) = (intended, interval) {
            let now = Instant::now();
            if now < at {
                // Not tokio's sleep: its 1 ms tick would send interleaved targets in
                // bursts (see `tollgate_provider::timer`).
                tollgate_provider::timer::sleep_until(at).await;
                // On time (or late only by the timer's granularity): measure from the
                // actual send, so timer resolution is not counted as server latency.
                from = Some(Instant::now());
            } else {
                // Behind schedule because the previous response was slow: count the
                // wait (coordinated-omission correction).
                from = Some(at);
            }
            intended = Some(at + iv);
        }
        let sent = Instant::now();
        let from = from.unwrap_or(sent);
        if conn.is_none() {
            match connect(spec).await {
                Ok(c) => conn = Some(c),
                Err(_) => {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
        }
        let c = conn.as_mut().expect("connected above");
        match send(c, spec).await {
            Ok(sent) => {
                if (200..300).contains(&sent.status) {
                    let ns = from.elapsed().as_nanos().clamp(1_000, 120_000_000_000) as u64;
                    lock(&shared.hist).saturating_record(ns);
                } else {
                    shared.non_2xx.fetch_add(1, Ordering::Relaxed);
                }
                // RFC 9112 §9.6: after `Connection: close` the server closes; the next
                // request goes on a new connection (nginx does this every 1 000 requests
                // by default), which is not an error.
                if sent.close {
                    conn = None;
                }
            }
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
        }
    }
}

async fn connect(spec: &LoadSpec) -> Result<SendRequest<Full<Bytes>>, String> {
    let url = &spec.url;
    let host = url.host().ok_or("URL has no host")?;
    let Some(tls) = &spec.tls else {
        let tcp = TcpStream::connect((host, url.port_u16().unwrap_or(80)))
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        return handshake(tcp).await;
    };
    handshake(tls_handshake(tls, host, url.port_u16().unwrap_or(443)).await?).await
}

/// A TLS connection to `host:port` as `tls` says to make it (through the proxy's tunnel,
/// or straight), its handshake complete.
pub async fn tls_handshake(
    tls: &Tls,
    host: &str,
    port: u16,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let mut tcp = match tls.proxy {
        Some(proxy) => TcpStream::connect(proxy).await,
        None => TcpStream::connect((host, port)).await,
    }
    .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    if tls.proxy.is_some() {
        tunnel(&mut tcp, &format!("{host}:{port}")).await?;
    }
    let name =
        rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(tls.client.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}

/// Asks the proxy on `tcp` for a tunnel to `authority` and reads its answer's head.
async fn tunnel(tcp: &mut TcpStream, authority: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // Byte by byte: nothing after the head may be consumed (the TLS handshake follows).
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut byte).await.map_err(|e| e.to_string())? == 0 {
            return Err("the proxy closed before answering CONNECT".into());
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
        let line = String::from_utf8_lossy(&head);
        return Err(format!(
            "CONNECT {authority}: {}",
            line.lines().next().unwrap_or("")
        ));
    }
    Ok(())
}

async fn handshake<IO>(io: IO) -> Result<SendRequest<Full<Bytes>>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A response: its status, and whether the server said it closes the connection.
struct Sent {
    status: u16,
    close: bool,
}

async fn send(c: &mut SendRequest<Full<Bytes>>, spec: &LoadSpec) -> Result<Sent, String> {
    c.ready().await.map_err(|e| e.to_string())?;
    let authority = spec
        .url
        .authority()
        .map(|a| a.as_str())
        .unwrap_or("localhost");
    let path = spec.url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut req = match &spec.body {
        None => Request::get(path),
        Some(_) => Request::post(path).header("content-type", "application/json"),
    }
    .header("host", authority);
    for (k, v) in &spec.headers {
        req = req.header(k, v);
    }
    // An empty `Full` is the end of the stream at once: a GET goes without a body or a
    // content-length, as it did with `Empty`.
    let body = Full::new(spec.body.clone().unwrap_or_default());
    let req = req.body(body).map_err(|e| e.to_string())?;
    let resp = c.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let close = tollgate::headers::says_close(resp.headers());
    resp.into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(Sent { status, close })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::service::service_fn;

    /// A server that closes every connection after one response (`Connection: close`).
    fn closing_server() -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    tokio::spawn(async move {
                        // 200 for a GET without a body and for a POST of `{"a":1}`
                        // as JSON, 400 for anything else.
                        let svc = service_fn(|req: http::Request<hyper::body::Incoming>| async {
                            let (head, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let json = head
                                .headers
                                .get("content-type")
                                .is_some_and(|v| v == "application/json");
                            let fine = match head.method {
                                http::Method::GET => {
                                    body.is_empty() && !head.headers.contains_key("content-length")
                                }
                                http::Method::POST => json && &body[..] == br#"{"a":1}"#,
                                _ => false,
                            };
                            let mut r = hyper::Response::new(http_body_util::Full::new(
                                Bytes::from_static(b"ok"),
                            ));
                            if !fine {
                                *r.status_mut() = http::StatusCode::BAD_REQUEST;
                            }
                            Ok::<_, std::convert::Infallible>(r)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(false)
                            .serve_connection(TokioIo::new(tcp), svc)
                            .await;
                    });
                }
            });
        });
        addr
    }

    /// GETs of `addr`'s `/`, closed loop, one thread, unpinned.
    fn spec_for(addr: std::net::SocketAddr, requests: u64, concurrency: usize) -> LoadSpec {
        LoadSpec {
            url: format!("http://{addr}/").parse().unwrap(),
            headers: vec![],
            body: None,
            requests,
            warmup: 0,
            concurrency,
            mode: Mode::Closed,
            cores: vec![],
            threads: 1,
            tls: None,
        }
    }

    #[test]
    fn a_server_closing_connections_is_not_an_error() {
        let r = run(spec_for(closing_server(), 60, 3)).unwrap();
        assert_eq!((r.ok, r.errors, r.non_2xx), (60, 0, 0));
    }

    #[test]
    fn a_body_is_posted_as_json_and_a_get_carries_none() {
        let r = run(LoadSpec {
            body: Some(Bytes::from_static(br#"{"a":1}"#)),
            ..spec_for(closing_server(), 20, 2)
        })
        .unwrap();
        assert_eq!((r.ok, r.errors, r.non_2xx), (20, 0, 0));
    }

    #[test]
    fn several_threads_split_the_load_and_merge_their_results() {
        let r = run(LoadSpec {
            warmup: 5,
            threads: 3,
            ..spec_for(closing_server(), 61, 5)
        })
        .unwrap();
        assert_eq!((r.ok, r.errors, r.non_2xx, r.threads), (61, 0, 0, 3));
        assert_eq!(r.hist.len(), 61);
        assert!(r.cpu_share() <= 1.0, "a share of 3 threads' time");
    }

    #[test]
    fn shares_add_up_to_the_whole() {
        let spec = LoadSpec {
            url: "http://127.0.0.1:1/".parse().unwrap(),
            headers: vec![],
            body: None,
            requests: 10,
            warmup: 4,
            concurrency: 7,
            mode: Mode::Open { rate: 300.0 },
            cores: vec![],
            threads: 3,
            tls: None,
        };
        let parts: Vec<LoadSpec> = (0..3).map(|t| spec.share(t, 3)).collect();
        assert_eq!(parts.iter().map(|p| p.requests).sum::<u64>(), 10);
        assert_eq!(parts.iter().map(|p| p.warmup).sum::<u64>(), 4);
        assert_eq!(parts.iter().map(|p| p.concurrency).sum::<usize>(), 7);
        assert_eq!(parts[0].mode, Mode::Open { rate: 100.0 });
    }
}
