//! A lean HTTP/1.1 connection pool for plain-`http` upstreams. hyper-util's pooled client
//! costs 12–15 % of tollgate's instructions per request (callgrind: SipHash-keyed pool,
//! a client clone and a lazy connect future per request); this pool is a mutex-guarded
//! map keyed by authority with an Fx hash, LIFO per host. A connection goes back to the
//! pool when the response body has been read to its end; otherwise it is closed.

use super::Connector;
use super::connector::{ConnectError, ConnectTimeout};
use crate::body::{Body, BoxError};
use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
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

pub struct H1Pool {
    connector: Connector,
    idle: Mutex<rustc_hash::FxHashMap<Authority, Vec<Idle>>>,
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
            idle: Mutex::default(),
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

    fn sweep(&self) {
        let now = Instant::now();
        let mut idle = self.idle.lock().expect("pool lock");
        idle.retain(|_, list| {
            list.retain(|c| c.usable(now, self.idle_timeout));
            !list.is_empty()
        });
    }

    /// The most recently returned connection that is still open and not idle past the
    /// timeout at `now` (the request's send time, read once for the whole exchange).
    fn take(&self, key: &Authority, now: Instant) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().expect("pool lock");
        let list = idle.get_mut(key)?;
        while let Some(c) = list.pop() {
            if c.usable(now, self.idle_timeout) {
                return Some(c.tx);
            }
        }
        None
    }

    fn put(&self, key: Authority, tx: SendRequest<Body>) {
        if tx.is_closed() || self.max_idle_per_host == 0 {
            return;
        }
        let mut idle = self.idle.lock().expect("pool lock");
        let list = idle.entry(key).or_default();
        if list.len() < self.max_idle_per_host {
            list.push(Idle {
                tx,
                since: Instant::now(),
            });
        }
    }

    /// Boxed, and by a plain function: connecting is the rare path, and its state would
    /// otherwise be part of every request's future.
    fn connect(
        &self,
        key: &Authority,
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
            let (tx, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(PoolError::Http)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(tx)
        })
    }

    /// An idle connection that is ready for a request (`true`: reused), or a new one.
    async fn ready(
        &self,
        key: &Authority,
        now: Instant,
        connect_timeout: impl ConnectTimeout,
    ) -> Result<(SendRequest<Body>, bool), PoolError> {
        loop {
            match self.take(key, now) {
                Some(mut tx) => {
                    if tx.ready().await.is_ok() {
                        return Ok((tx, true));
                    }
                }
                None => return Ok((self.connect(key, connect_timeout.get()).await?, false)),
            }
        }
    }

    /// Sends on a pooled connection (or a new one). A request that a stale pooled
    /// connection could not even start to send is retried once on a fresh connection; so
    /// is an idempotent request without a body that a reused connection lost before any
    /// response byte arrived (the provider closed it while idle; RFC 9110 §9.2.2).
    ///
    /// A plain function returning an `async` block: an `async fn` would keep the request
    /// twice in its state (its argument, and the local the argument is moved into;
    /// rust-lang/rust#62958).
    #[allow(clippy::manual_async_fn)]
    pub fn send<'a>(
        self: &'a Arc<Self>,
        req: Request<Body>,
        key: &'a Authority,
        now: Instant,
        resend_lost: bool,
        connect_timeout: impl ConnectTimeout + 'a,
    ) -> impl Future<Output = Result<Response<PooledBody>, PoolError>> + Send + 'a {
        async move {
            let (mut tx, reused) = self.ready(key, now, connect_timeout).await?;
            let replay = if reused && resend_lost {
                replay(&req)
            } else {
                None
            };
            let resp = match tx.try_send_request(req).await {
                Ok(resp) => resp,
                Err(refused) => {
                    let (fresh, resp) = self
                        .retry(refused, replay, key, connect_timeout.get())
                        .await?;
                    tx = fresh;
                    resp
                }
            };
            let (parts, body) = resp.into_parts();
            let slot = Some(Slot {
                pool: Arc::downgrade(self),
                key: key.clone(),
                tx,
            });
            Ok(Response::from_parts(
                parts,
                PooledBody { inner: body, slot },
            ))
        }
    }

    /// The rare path, boxed: the connection refused the request before sending any of
    /// it (hyper hands it back), or lost a replayable one before answering.
    fn retry(
        &self,
        mut refused: hyper::client::conn::TrySendError<Request<Body>>,
        replay: Option<Request<Body>>,
        key: &Authority,
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
        let connecting = self.connect(key, limit);
        Box::pin(async move {
            let mut tx = connecting.await?;
            let resp = tx.send_request(req).await.map_err(PoolError::Http)?;
            Ok((tx, resp))
        })
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

struct Slot {
    pool: Weak<H1Pool>,
    key: Authority,
    tx: SendRequest<Body>,
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
    if let Some(s) = slot.take()
        && let Some(pool) = s.pool.upgrade()
    {
        pool.put(s.key, s.tx);
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
