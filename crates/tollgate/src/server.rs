//! Listeners and connections: accept, TCP_NODELAY, serve HTTP/1.1 and HTTP/2 (h2c prior
//! knowledge, told apart by the first bytes) with upgrades for CONNECT, and the graceful
//! shutdown sequence.

use crate::admin;
use crate::config::{Config, ConfigErrors};
use crate::conns::{Conn, End};
use crate::egress::{Egress, Listener};
use crate::metrics::Metrics;
use crate::policy::Engine;
use crate::policy::store::{Store, memory::Memory};
use crate::proxy;
use crate::reload;
use crate::state::{Overrides, Runtime, Shared};
use crate::upstream::UpstreamClient;
use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How to start a gateway in-process.
#[derive(Debug, Default)]
pub struct StartOptions {
    /// Config file; `None` runs the built-in defaults (or `config`).
    pub config_path: Option<PathBuf>,
    /// A config given directly (tests); used when `config_path` is `None`.
    pub config: Option<Config>,
    pub overrides: Overrides,
    /// Watch the config file for changes and reload.
    pub watch: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error("upstream TLS setup: {0}")]
    Tls(String),
    #[error("cannot open the access log: {0}")]
    AccessLog(std::io::Error),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running gateway: proxy and admin listeners, reload watcher, observer.
pub struct Gateway {
    pub proxy_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    shared: Arc<Shared>,
    done: JoinHandle<()>,
}

impl Gateway {
    pub async fn start(opts: StartOptions) -> Result<Gateway, StartError> {
        let stamp = opts.config_path.as_deref().map(reload::stamp);
        let mut config = match &opts.config_path {
            Some(p) => Config::load(p)?,
            None => opts.config.unwrap_or_default(),
        };
        opts.overrides.apply(&mut config);
        let metrics = Metrics::default();
        let bind = |what, addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { what, addr, source })
        };
        let proxy_listener = bind("proxy", config.listen.address).await?;
        let admin_listener = bind("admin", config.admin.address).await?;
        let proxy_addr = proxy_listener
            .local_addr()
            .expect("bound listener has an address");
        let admin_addr = admin_listener
            .local_addr()
            .expect("bound listener has an address");
        if config.admin.token.is_none() && !admin_addr.ip().is_loopback() {
            tracing::warn!(
                %admin_addr,
                "the admin listener is not on a loopback address and has no admin.token: anyone who reaches it can read the config and reload it"
            );
        }
        // The connector refuses these whatever the target's spelling (egress.rs).
        let own = vec![(proxy_addr, Listener::Proxy), (admin_addr, Listener::Admin)];
        let client = UpstreamClient::new(
            &config.upstream,
            Egress::new(&config, &own),
            metrics.clone(),
        )
        .map_err(StartError::Tls)?;
        for w in config.policies.shadowed() {
            tracing::warn!("{w}");
        }
        let store: Arc<dyn Store> = Arc::new(Memory::default());
        let engine = Engine::build(&config, None, &store, &metrics);
        let runtime = Runtime {
            diag: Arc::new(crate::diagnosis::Plan::new(&config)),
            config: Arc::new(config),
            client: Arc::new(client),
            engine: Arc::new(engine),
        };
        let shared = Arc::new(
            Shared::new(
                runtime,
                opts.config_path.clone(),
                opts.overrides,
                metrics,
                own,
                store,
            )
            .map_err(StartError::AccessLog)?,
        );

        let admin_task = tokio::spawn(admin::serve(admin_listener, shared.clone()));
        tokio::spawn(sweep_quiet_connections(shared.clone()));
        if opts.watch
            && let Some(path) = opts.config_path
        {
            tokio::spawn(reload::watch(shared.clone(), path, stamp.flatten()));
        }
        let s = shared.clone();
        let done = tokio::spawn(async move {
            accept_loop(proxy_listener, &s).await;
            drain(&s).await;
            admin_task.abort();
        });
        tracing::info!(%proxy_addr, %admin_addr, "tollgate listening");
        Ok(Gateway {
            proxy_addr,
            admin_addr,
            shared,
            done,
        })
    }

    /// Starts graceful shutdown: readiness goes 503, listeners close, open connections
    /// finish their in-flight requests (new ones get 503 `shutting_down`).
    pub fn shutdown(&self) {
        self.shared.start_draining();
    }

    /// Waits until shutdown has finished (all connections closed or the drain deadline passed).
    pub async fn wait(self) {
        let _ = self.done.await;
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

async fn accept_loop(listener: TcpListener, shared: &Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shared.stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, _peer)) => {
                shared.tasks.spawn(serve_connection(stream, shared.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// The HTTP/2 connection preface a client with prior knowledge sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Which protocol the client speaks, from the first bytes it sent (peeked, not read, so
/// the connection is served from its first byte). `None` when it closed before saying.
/// Deciding once here lets each connection be served by hyper's HTTP/1.1 or HTTP/2
/// connection directly, instead of through a wrapper that re-checks every read.
async fn speaks_h2(stream: &TcpStream) -> Option<bool> {
    let mut buf = [0u8; 24];
    loop {
        let n = stream.peek(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        if buf[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        // A prefix of the preface and nothing more yet: peeking again would return at
        // once, so wait a little for the rest (the read deadline's sweep still applies).
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    shared.metrics.client_connections.inc();
    let registration = shared.conns.open();
    let this = registration.conn.clone();
    let s = shared.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        let in_flight = this.enter(req.version());
        Infallibly {
            response: proxy::handle(s.clone(), req, in_flight),
        }
    });
    let conn = &registration.conn;
    let config = shared.runtime.load().config.clone();
    // hyper answers 431 by itself when the head outgrows its read buffer; keep that buffer
    // comfortably above our own limit so our 431 (with x-tollgate-error) is what clients see.
    let buf = (config.listen.max_header_bytes * 2).max(400 * 1024);
    let h2 = tokio::select! {
        biased;
        h2 = speaks_h2(&stream) => h2,
        _ = std::future::poll_fn(|cx| conn.poll_end(cx)) => None,
    };
    let result = match h2 {
        None => Ok(()),
        Some(false) => {
            // No hyper header_read_timeout: `conns` enforces `listen.header_read_timeout`
            // with one sweep for all connections instead of a timer per request.
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(None)
                .max_buf_size(buf)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            drive(served, |c| c.graceful_shutdown(), conn, &shared).await
        }
        Some(true) => {
            let served = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_concurrent_streams(config.listen.max_concurrent_streams)
                .max_header_list_size(u32::try_from(buf).unwrap_or(u32::MAX))
                .serve_connection(TokioIo::new(stream), svc);
            drive(served, |c| c.graceful_shutdown(), conn, &shared).await
        }
    };
    if let Err(e) = result {
        tracing::debug!("client connection ended: {e}");
    }
    shared.metrics.client_connections.dec();
}

/// Serves one connection until it ends, is found quiet by the read-deadline sweep (closed:
/// nothing is in flight), or is asked to drain (`graceful` lets in-flight requests finish,
/// up to the drain deadline).
async fn drive<F>(
    served: F,
    graceful: impl FnOnce(Pin<&mut F>),
    conn: &Conn,
    shared: &Shared,
) -> Result<(), hyper::Error>
where
    F: Future<Output = Result<(), hyper::Error>>,
{
    tokio::pin!(served);
    let finished = tokio::select! {
        biased;
        r = served.as_mut() => Some(r),
        end = std::future::poll_fn(|cx| conn.poll_end(cx)) => match end {
            End::Drain => None,
            // No request in flight, so nothing is lost by closing (what hyper's own
            // header timeout does too).
            End::Quiet => Some(Ok(())),
            // The client stopped reading its response: dropping the connection drops
            // the response body and with it the upstream connection.
            End::Stalled => {
                tracing::debug!("client stopped reading its response for listen.send_timeout; connection cut");
                Some(Ok(()))
            }
        },
    };
    match finished {
        Some(r) => r,
        None => {
            graceful(served.as_mut());
            tokio::select! {
                r = served.as_mut() => r,
                _ = shared.cut.cancelled() => Ok(()),
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's response as the `Result` hyper's service wants. A named future rather
    /// than `async move { Ok(f.await) }`, which would hold the request's future twice (the
    /// captured value and the copy `.await` pins; rust-lang/rust#59087), and hyper moves it
    /// once per request.
    struct Infallibly<F> {
        #[pin]
        response: F,
    }
}

impl<F: Future> Future for Infallibly<F> {
    type Output = Result<F::Output, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().response.poll(cx).map(Ok)
    }
}

/// Enforces `listen.header_read_timeout` and `listen.send_timeout` on every connection,
/// a quarter of the shorter at a time (read from the current config, so a reload applies
/// at the next round).
async fn sweep_quiet_connections(shared: Arc<Shared>) {
    loop {
        let listen = shared.runtime.load().config.listen.clone();
        let (limit, send_timeout) = (listen.header_read_timeout, listen.send_timeout);
        let step = (limit.min(send_timeout) / 4).max(std::time::Duration::from_millis(1));
        tokio::select! {
            _ = tokio::time::sleep(step) => {}
            _ = shared.stop.cancelled() => return,
        }
        let closed = shared
            .conns
            .sweep(limit, send_timeout, tokio::time::Instant::now());
        if closed > 0 {
            tracing::debug!(
                closed,
                ?limit,
                ?send_timeout,
                "quiet or stalled HTTP/1.1 connections closed"
            );
        }
    }
}

/// Waits for connections and tunnels to finish, up to the drain deadline, then cuts the rest.
async fn drain(shared: &Arc<Shared>) {
    shared.tasks.close();
    let deadline = shared.runtime.load().config.shutdown.drain_timeout;
    tracing::info!(open = shared.tasks.len(), ?deadline, "draining");
    if tokio::time::timeout(deadline, shared.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = shared.tasks.len(),
            "drain deadline passed; cutting what is left"
        );
        shared.cut.cancel();
        shared.tasks.wait().await;
    }
    tracing::info!("shutdown complete");
}
