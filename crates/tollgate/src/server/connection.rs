//! One client connection: TCP_NODELAY (and TCP_QUICKACK when a request's body is to
//! come), HTTP/1.1 or HTTP/2 (h2c prior knowledge, told apart by the first bytes) with
//! upgrades for CONNECT, served until it ends, is closed by the read-deadline sweep, or
//! drains on shutdown. A decrypted CONNECT tunnel
//! (crate::intercept) is served by the same [`serve`], over its TLS session.

use crate::conns::{Conn, End};
use crate::intercept::Intercepted;
use crate::request;
use crate::state::{Shared, Worker};
use crate::target::Target;
use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

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

/// Serves one client connection on its worker until it ends.
pub async fn serve_connection(stream: TcpStream, worker: Arc<Worker>) {
    let _ = stream.set_nodelay(true);
    let shared = &*worker.shared;
    shared.metrics.client_connections.inc();
    let registration = worker.local().conns.open();
    let conn = &registration.conn;
    let h2 = tokio::select! {
        biased;
        h2 = speaks_h2(&stream) => h2,
        _ = std::future::poll_fn(|cx| conn.poll_end(cx)) => None,
    };
    match h2 {
        Some(true) => serve(stream, true, conn, &worker, None, None).await,
        // HTTP/1.1 (and the tunnels it opens): the clients that write a request in two
        // writes with Nagle on (see quick_ack).
        Some(false) => {
            let ack = super::quick_ack::AckNow::default();
            let stream = super::quick_ack::QuickAck(stream, ack.clone());
            serve(stream, false, conn, &worker, None, Some(ack)).await
        }
        None => {}
    }
    shared.metrics.client_connections.dec();
}

/// Serves HTTP/1.1 (with upgrades) or HTTP/2 on `stream`, registered as `conn` on its
/// worker, until it ends. The requests of a decrypted tunnel carry its target.
pub async fn serve<S>(
    stream: S,
    h2: bool,
    conn: &Arc<Conn>,
    worker: &Arc<Worker>,
    intercepted: Option<Target>,
    ack: Option<crate::conns::AckNow>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = &*worker.shared;
    let this = conn.clone();
    let w = worker.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        if let Some(t) = &intercepted {
            req.extensions_mut().insert(Intercepted(t.clone()));
        }
        if let Some(a) = &ack {
            use hyper::body::Body as _;
            if !req.body().is_end_stream() {
                // Its body is still to come: acknowledge the head at once.
                a.ask();
            } else if req.method() == http::Method::CONNECT {
                // A decrypted tunnel's requests ask this socket.
                req.extensions_mut().insert(a.clone());
            }
        }
        let in_flight = this.enter(req.version());
        Infallibly {
            response: request::handle(w.clone(), req, in_flight),
        }
    });
    let config = worker.local().runtime.load().config.clone();
    // hyper answers 431 by itself when the head outgrows its read buffer; keep that buffer
    // comfortably above our own limit so our 431 (with x-tollgate-error) is what clients see.
    let buf = (config.listen.max_header_bytes * 2).max(400 * 1024);
    let stream = super::watched_io::WatchedIo::new(stream, conn.clone());
    let result = match h2 {
        false => {
            // No hyper header_read_timeout: `conns` enforces `listen.header_read_timeout`
            // with one sweep for all connections instead of a timer per request.
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(None)
                .max_buf_size(buf)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            drive(served, |c| c.graceful_shutdown(), conn, shared).await
        }
        true => {
            let served = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_concurrent_streams(config.listen.max_concurrent_streams)
                .max_header_list_size(u32::try_from(buf).unwrap_or(u32::MAX))
                .serve_connection(TokioIo::new(stream), svc);
            drive(served, |c| c.graceful_shutdown(), conn, shared).await
        }
    };
    if let Err(e) = result {
        tracing::debug!("client connection ended: {e}");
    }
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
