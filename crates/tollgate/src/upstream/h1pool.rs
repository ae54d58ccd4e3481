//! A lean HTTP/1.1 connection pool for plain-`http` upstreams. hyper-util's pooled client
//! costs 12–15 % of tollgate's instructions per request (callgrind: SipHash-keyed pool,
//! a client clone and a lazy connect future per request); this pool is a mutex-guarded
//! map from authority to that host's idle list (LIFO), found once per request: the
//! request keeps its host's list, so giving the connection back is no second lookup. A
//! connection goes back when the response body has been read to its end; otherwise it is
//! closed.
//!
//! A host keeps two lanes of connections. A request without a body, or with one of at
//! most [`FLAT_BODY_MAX`] bytes by its length, goes on a connection that writes head and
//! body from one buffer with one `write` (hyper's flattened writes); any other on a
//! connection that writes the head and the body's chunks together with `writev`, never
//! copying a chunk. A vectored write costs hyper about 240 instructions more per request
//! than a flat one (callgrind: its 64-slice array built per flush, the buffer list
//! walked twice), which the first lane gains for the price of copying a few KiB at most;
//! a flat write copies every body chunk into the connection's buffer and keeps that
//! buffer at the largest size it reached, which a large body would make as large as
//! hyper's 400 KiB limit on every pooled connection that ever carried one.

use super::Connector;
use super::connector::{ConnectError, ConnectTimeout};
use crate::body::{Body, BoxError};
use bytes::Bytes;
use futures_util::future::Either;
use http::uri::Authority;
use http::{Request, Response, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::SendRequest;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tower_service::Service;

struct Idle {
    tx: SendRequest<Body>,
    since: Instant,
}

impl Idle {
    /// Still open, and not idle for `timeout` or longer at `now`.
    fn usable(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.since) < timeout && !self.tx.is_closed()
    }
}

/// The longest body a flat connection carries: copied with the head into the 8 KiB
/// hyper's write buffer starts with, for less than the vectored write's bookkeeping.
const FLAT_BODY_MAX: u64 = 4 << 10;

/// How a connection writes its requests (see the module's note).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lane {
    /// No body, or one of a known length up to [`FLAT_BODY_MAX`]: head and body from one
    /// buffer, with one `write`.
    Flat = 0,
    /// A longer body, or one of unknown length: head and chunks with `writev`, no chunk
    /// copied.
    Vectored = 1,
}

impl Lane {
    fn of(req: &Request<Body>) -> Self {
        let body = req.body();
        if HttpBody::is_end_stream(body)
            || HttpBody::size_hint(body)
                .exact()
                .is_some_and(|n| n <= FLAT_BODY_MAX)
        {
            Lane::Flat
        } else {
            Lane::Vectored
        }
    }
}

/// One host's idle connections per lane, the most recently returned last.
struct Host {
    key: Authority,
    idle: Mutex<[Vec<Idle>; 2]>,
    /// Idle connections kept for the host, both lanes together.
    max_idle: usize,
}

impl Host {
    /// The most recently returned connection of `lane` that is still open and not idle
    /// past `timeout` at `now` (the request's send time, read once for the whole
    /// exchange).
    fn take(&self, lane: Lane, now: Instant, timeout: Duration) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = &mut idle[lane as usize];
        while let Some(c) = list.pop() {
            if c.usable(now, timeout) {
                return Some(c.tx);
            }
        }
        None
    }

    fn put(&self, lane: Lane, tx: SendRequest<Body>) {
        if tx.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle[0].len() + idle[1].len() < self.max_idle {
            idle[lane as usize].push(Idle {
                tx,
                since: Instant::now(),
            });
        }
    }
}

pub struct H1Pool {
    connector: Connector,
    /// Keyed by the target's authority, which is lower-case ([`crate::target::Target`]):
    /// plain string hashing and equality, not `Authority`'s case-insensitive byte loop.
    hosts: Mutex<rustc_hash::FxHashMap<Box<str>, Arc<Host>>>,
    max_idle_per_host: usize,
    idle_timeout: Duration,
}

type ConnectResult = Result<SendRequest<Body>, PoolError>;
type RetryResult = Result<(SendRequest<Body>, Response<Incoming>), PoolError>;

/// Why a request failed: connecting, or on an established connection.
pub enum PoolError {
    Connect(ConnectError),
    Http(hyper::Error),
}

impl H1Pool {
    pub fn new(
        connector: Connector,
        max_idle_per_host: usize,
        idle_timeout: Duration,
    ) -> Arc<Self> {
        let pool = Arc::new(Self {
            connector,
            hosts: Mutex::default(),
            max_idle_per_host,
            idle_timeout,
        });
        // Closes connections idle past the timeout; ends when the pool is dropped (reload).
        let weak = Arc::downgrade(&pool);
        let every = (idle_timeout / 2).max(Duration::from_millis(100));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { return };
                pool.sweep();
            }
        });
        pool
    }

    /// Closes connections idle past the timeout, and forgets hosts with none left that
    /// no request holds (while the map is locked no request can take one).
    fn sweep(&self) {
        let now = Instant::now();
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        hosts.retain(|_, host| {
            let mut idle = host.idle.lock().unwrap_or_else(|p| p.into_inner());
            for list in idle.iter_mut() {
                list.retain(|c| c.usable(now, self.idle_timeout));
            }
            idle.iter().any(|l| !l.is_empty()) || Arc::strong_count(host) > 1
        });
    }

    /// The idle list of `key`'s host, made on its first request.
    fn host(&self, key: &Authority) -> Arc<Host> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = hosts.get(key.as_str()) {
            return h.clone();
        }
        let h = Arc::new(Host {
            key: key.clone(),
            idle: Mutex::default(),
            max_idle: self.max_idle_per_host,
        });
        hosts.insert(key.as_str().into(), h.clone());
        h
    }

    /// Boxed, and by a plain function: connecting is the rare path, and its state would
    /// otherwise be part of every request's future.
    fn connect(
        &self,
        key: &Authority,
        lane: Lane,
        limit: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = ConnectResult> + Send>> {
        let uri = Uri::builder()
            .scheme(http::uri::Scheme::HTTP)
            .authority(key.clone())
            .path_and_query("/")
            .build();
        let connecting = uri.map(|uri| self.connector.within(limit).call(uri));
        Box::pin(async move {
            let io = connecting
                .map_err(|e| PoolError::Connect(ConnectError::BadUri(e.to_string())))?
                .await
                .map_err(PoolError::Connect)?;
            let (tx, conn) = hyper::client::conn::http1::Builder::new()
                .writev(lane == Lane::Vectored)
                .handshake(io)
                .await
                .map_err(PoolError::Http)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(tx)
        })
    }

    /// An idle connection of `lane` that is ready for a request (`true`: reused), or a new
    /// one: `taken` first, when [`H1Pool::send`] took one that was not ready yet.
    async fn ready(
        &self,
        mut taken: Option<SendRequest<Body>>,
        host: &Host,
        lane: Lane,
        now: Instant,
        connect_timeout: impl ConnectTimeout,
    ) -> Result<(SendRequest<Body>, bool), PoolError> {
        loop {
            match taken
                .take()
                .or_else(|| host.take(lane, now, self.idle_timeout))
            {
                Some(mut tx) => {
                    if tx.ready().await.is_ok() {
                        return Ok((tx, true));
                    }
                }
                None => {
                    let fresh = self.connect(&host.key, lane, connect_timeout.get()).await?;
                    return Ok((fresh, false));
                }
            }
        }
    }

    /// Sends on a pooled connection (or a new one). A request that a stale pooled
    /// connection could not even start to send is retried once on a fresh connection; so
    /// is an idempotent request without a body that a reused connection lost before any
    /// response byte arrived (the provider closed it while idle; RFC 9110 §9.2.2).
    ///
    /// An idle connection ready at once (the usual case under load) takes the request
    /// here, before any await: the future then holds what the send awaits and not the
    /// request too (a captured value's storage is kept to the end, moved or not:
    /// rust-lang/rust#59123). Waiting for a connection, or making one, is boxed.
    pub fn send<'a>(
        self: &'a Arc<Self>,
        req: Request<Body>,
        key: &'a Authority,
        now: Instant,
        resend_lost: bool,
        connect_timeout: impl ConnectTimeout + 'a,
    ) -> impl Future<Output = Result<Response<PooledBody>, PoolError>> + Send + 'a {
        // Found before the exchange starts: its state then holds the host, not the key too.
        let host = self.host(key);
        let lane = Lane::of(&req);
        match host.take(lane, now, self.idle_timeout) {
            Some(tx) if tx.is_ready() => {
                let slot = Slot { host, tx, lane };
                Either::Left(self.give(slot, req, resend_lost, connect_timeout.get()))
            }
            taken => {
                let waiting = Waiting { taken, host, lane };
                Either::Right(Box::pin(self.send_waiting(
                    waiting,
                    req,
                    now,
                    resend_lost,
                    connect_timeout,
                )))
            }
        }
    }

    /// [`H1Pool::send`] when no idle connection was ready at once: waits for the one
    /// `taken` (if any) to be ready, else takes another or connects.
    async fn send_waiting(
        self: &Arc<Self>,
        Waiting { taken, host, lane }: Waiting,
        req: Request<Body>,
        now: Instant,
        resend_lost: bool,
        connect_timeout: impl ConnectTimeout,
    ) -> Result<Response<PooledBody>, PoolError> {
        let (tx, reused) = self.ready(taken, &host, lane, now, connect_timeout).await?;
        let slot = Slot { host, tx, lane };
        self.give(slot, req, reused && resend_lost, connect_timeout.get())
            .await
    }

    /// Gives `req` to the slot's connection, ready for it: its answer. `replayable`: the
    /// connection was reused and the pool may resend what it loses, so a request that
    /// can be sent again is copied first ([`replay`]).
    fn give(
        self: &Arc<Self>,
        mut slot: Slot,
        req: Request<Body>,
        replayable: bool,
        connect_timeout: Option<Duration>,
    ) -> Answer<'_, impl Future<Output = Sent> + use<>> {
        let replay = if replayable { replay(&req) } else { None };
        let sending = slot.tx.try_send_request(req);
        Answer {
            sending,
            pool: self,
            slot: Some(slot),
            replay,
            connect_timeout,
            again: None,
        }
    }

    /// The rare path, boxed: the connection refused the request before sending any of
    /// it (hyper hands it back), or lost a replayable one before answering.
    fn retry(
        &self,
        mut refused: TrySendError<Request<Body>>,
        replay: Option<Request<Body>>,
        key: &Authority,
        lane: Lane,
        limit: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = RetryResult> + Send>> {
        let req = match (refused.take_message(), replay) {
            (Some(req), _) => req,
            (None, Some(req)) if super::reset_before_response(refused.error()) => {
                tracing::debug!(upstream = %key, "pooled connection lost before the response; retrying once on a fresh one");
                req
            }
            (None, _) => {
                return Box::pin(std::future::ready(Err(PoolError::Http(
                    refused.into_error(),
                ))));
            }
        };
        let connecting = self.connect(key, lane, limit);
        Box::pin(async move {
            let mut tx = connecting.await?;
            let resp = tx.send_request(req).await.map_err(PoolError::Http)?;
            Ok((tx, resp))
        })
    }
}

/// The connection [`H1Pool::send`] took, not ready yet (or none), and where the request
/// goes.
struct Waiting {
    taken: Option<SendRequest<Body>>,
    host: Arc<Host>,
    lane: Lane,
}

pin_project_lite::pin_project! {
    /// A request given to its connection, answered: the response head, its body giving
    /// the connection back to the pool when it ends. A request the connection refused or
    /// lost goes once on a fresh one ([`H1Pool::retry`], boxed). Written by hand, not as
    /// an `async` block: a block awaiting a future it captured holds that future twice
    /// (the captured value and the copy the await pins; rust-lang/rust#59087), and the
    /// response is handed out once, not moved through a combinator's states.
    struct Answer<'a, F> {
        #[pin]
        sending: F,
        pool: &'a Arc<H1Pool>,
        slot: Option<Slot>,
        replay: Option<Request<Body>>,
        connect_timeout: Option<Duration>,
        again: Option<Pin<Box<dyn Future<Output = RetryResult> + Send>>>,
    }
}

/// What hyper's send of a request ends in: the response head, or the error with the
/// request when hyper never started to write it.
type Sent = Result<Response<Incoming>, TrySendError<Request<Body>>>;

impl<F: Future<Output = Sent>> Future for Answer<'_, F> {
    type Output = Result<Response<PooledBody>, PoolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let resp = loop {
            if let Some(again) = this.again {
                let (fresh, resp) = ready!(again.as_mut().poll(cx))?;
                if let Some(s) = this.slot.as_mut() {
                    s.tx = fresh;
                }
                break resp;
            }
            match ready!(this.sending.as_mut().poll(cx)) {
                Ok(resp) => break resp,
                Err(refused) => {
                    let Some(slot) = this.slot.as_ref() else {
                        return Poll::Ready(Err(PoolError::Http(refused.into_error())));
                    };
                    // Polled on the next turn of the loop.
                    *this.again = Some(this.pool.retry(
                        refused,
                        this.replay.take(),
                        &slot.host.key,
                        slot.lane,
                        *this.connect_timeout,
                    ));
                }
            }
        };
        let (parts, body) = resp.into_parts();
        let slot = this.slot.take();
        Poll::Ready(Ok(Response::from_parts(
            parts,
            PooledBody { inner: body, slot },
        )))
    }
}

/// A copy of a request that may be sent again: idempotent (RFC 9110 §9.2.2) and
/// without a body, so nothing of it is lost by sending it once more. Made only for
/// requests on a reused connection, the ones a provider's idle close can hit.
fn replay(req: &Request<Body>) -> Option<Request<Body>> {
    use http::Method;
    let idempotent = matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    if !idempotent || !http_body::Body::is_end_stream(req.body()) {
        return None;
    }
    let mut copy = Request::new(crate::body::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// A connection out with a request, and the host list it goes back to. After a reload
/// the list may be the old pool's, held only by its requests: the connection then closes
/// when the last of them ends.
struct Slot {
    host: Arc<Host>,
    tx: SendRequest<Body>,
    lane: Lane,
}

pin_project_lite::pin_project! {
    /// A provider's response body; for pooled connections it returns the connection to
    /// the pool once the body has been read to its end.
    pub struct PooledBody {
        #[pin]
        inner: Incoming,
        slot: Option<Slot>,
    }

    impl PinnedDrop for PooledBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.inner.is_end_stream() {
                give_back(this.slot);
            }
        }
    }
}

fn give_back(slot: &mut Option<Slot>) {
    if let Some(s) = slot.take() {
        s.host.put(s.lane, s.tx);
    }
}

impl PooledBody {
    /// A body from a connection this pool does not manage (hyper-util's client).
    pub fn unpooled(inner: Incoming) -> Self {
        Self { inner, slot: None }
    }
}

impl HttpBody for PooledBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let r = this.inner.as_mut().poll_frame(cx).map_err(BoxError::from);
        if let Poll::Ready(None) = r {
            give_back(this.slot);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
