//! The upstream side: pooled clients over the connector (a lean HTTP/1.1 pool for `http`
//! upstreams; hyper-util's client, HTTP/2 by ALPN, for `https`), and the mapping of their
//! failures onto [`ProxyError`].

mod connector;
pub mod deadline;
pub mod dns;
mod h1pool;
mod sender;
pub mod tls;

use deadline::ResponseTimer;
pub use h1pool::PooledBody;
use h1pool::{H1Pool, PoolError};

pub use connector::{ConnectError, ConnectTimeout, Connector};
pub use sender::{AttemptSettings, Sender};

use crate::body::Body;
use crate::egress::{Denied, Egress};
use crate::error::{ProxyError, TimeoutStage};
use crate::metrics::Metrics;
use crate::target::{Scheme, Target};
use futures_util::FutureExt;
use futures_util::future::Either;
use http::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::error::Error as _;
use std::sync::Arc;

/// The `upstream:` section as validated: timeouts, DNS, the pool, TLS.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub connect_timeout: std::time::Duration,
    pub response_timeout: std::time::Duration,
    pub dns_ttl: std::time::Duration,
    pub dns_servers: Vec<std::net::SocketAddr>,
    pub expect_continue_timeout: std::time::Duration,
    pub pool_idle_timeout: std::time::Duration,
    pub pool_max_idle_per_host: usize,
    pub roots: tls::Roots,
    pub extra_ca_file: Option<std::path::PathBuf>,
    pub insecure_skip_verify: Vec<String>,
}

/// The pooled client to providers. Rebuilt only when the `upstream` section changes on
/// reload; otherwise kept, pool and DNS cache included.
pub struct UpstreamClient {
    client: Client<Connector, Body>,
    /// The `https` clients of policies with their own `timeouts.connect`, one per
    /// distinct timeout, made on first use: hyper-util's client gives its connector
    /// nothing but the URI, so a connect timeout is the client's. Such a policy's
    /// connections are its own (the plain `http` pool takes the timeout per request and
    /// stays shared). Per worker, so the lock is never contended.
    timed: std::sync::Mutex<Vec<(std::time::Duration, Client<Connector, Body>)>>,
    h1: Arc<H1Pool>,
    pub connector: Connector,
    pub settings: Settings,
    /// The egress rules and own listeners the connector checks: a reload that changes
    /// them builds a new client.
    pub egress: Egress,
}

impl UpstreamClient {
    /// One client per data-plane worker, each with its own pools and DNS cache (the TLS
    /// configs, read-only, are shared): a worker's requests take no lock another worker
    /// takes.
    pub fn for_workers(
        settings: &Settings,
        egress: &Egress,
        metrics: &Metrics,
        workers: usize,
    ) -> Result<Vec<Arc<Self>>, String> {
        let tls = tls::client_configs(settings.roots, settings.extra_ca_file.as_deref())?;
        Ok((0..workers.max(1))
            .map(|_| {
                Arc::new(Self::with_tls(
                    settings,
                    egress.clone(),
                    metrics.clone(),
                    tls.clone(),
                ))
            })
            .collect())
    }

    fn with_tls(
        settings: &Settings,
        egress: Egress,
        metrics: Metrics,
        tls: (Arc<rustls::ClientConfig>, Arc<rustls::ClientConfig>),
    ) -> Self {
        let connector = Connector::new(
            dns::Resolver::new(settings.dns_ttl, &settings.dns_servers),
            egress.clone(),
            settings.connect_timeout,
            tls,
            settings.insecure_skip_verify.clone(),
            metrics,
        );
        let client = https_client(settings, connector.clone());
        let h1 = H1Pool::new(
            connector.clone(),
            settings.pool_max_idle_per_host,
            settings.pool_idle_timeout,
        );
        Self {
            client,
            timed: Default::default(),
            h1,
            connector,
            settings: settings.clone(),
            egress,
        }
    }

    /// Sends a request and waits for the response head within `response_timeout` from
    /// `sent`, on the client connection's `timer`. A plain function returning the exchange,
    /// so that the request is handed on without being stored in one more future (see
    /// `handle` in request/mod.rs).
    pub fn send<'a>(
        &'a self,
        req: Request<Body>,
        target: &'a Target,
        timer: &'a ResponseTimer,
        sent: tokio::time::Instant,
    ) -> impl Future<Output = Result<Response<PooledBody>, ProxyError>> + Send + 'a {
        let settings = AttemptSettings::plain(self.settings.response_timeout);
        self.send_within(req, target, timer, sent, settings)
    }

    /// [`Self::send`] with settings of its own: a response-head timeout (a policy's
    /// `timeouts.response`); `resend_lost`, whether the HTTP/1.1 pool may resend an
    /// idempotent request a stale keep-alive connection lost (a policy that retries says
    /// no: the request may have reached the provider, so its retry remedy decides,
    /// counting the attempt through its breaker and budget; a request the connection
    /// refused before sending any of it is resent either way: it never left); and the
    /// connect timeout for the connections made for this request (a policy's
    /// `timeouts.connect`, or `()`: the `upstream` one).
    pub fn send_within<'a, C: ConnectTimeout + 'a>(
        &'a self,
        req: Request<Body>,
        target: &'a Target,
        timer: &'a ResponseTimer,
        sent: tokio::time::Instant,
        settings: AttemptSettings<C>,
    ) -> impl Future<Output = Result<Response<PooledBody>, ProxyError>> + Send + 'a {
        let AttemptSettings {
            response_timeout: limit,
            connect_timeout,
            resend_lost,
        } = settings;
        let deadline = sent + limit;
        let name = target.authority.as_str();
        let timed_out = move || ProxyError::UpstreamTimeout {
            target: name.to_owned(),
            stage: TimeoutStage::Respond,
            limit,
        };
        if target.scheme == Scheme::Http {
            return Either::Left(
                timer
                    .until(
                        deadline,
                        self.h1.send(
                            req,
                            &target.authority,
                            sent.into_std(),
                            resend_lost,
                            connect_timeout,
                        ),
                    )
                    .map(move |r| match r {
                        Err(_) => Err(timed_out()),
                        Ok(Ok(resp)) => Ok(resp),
                        Ok(Err(PoolError::Connect(c))) => Err(ProxyError::from(&c)),
                        Ok(Err(PoolError::Http(e))) => Err(classify_http(&e, name)),
                    }),
            );
        }
        let exchange = match connect_timeout.get() {
            None => self.client.request(req),
            Some(t) => self.timed_client(t).request(req),
        };
        // Boxed so that the https client's large future does not size every request's.
        Either::Right(
            Box::pin(timer.until(deadline, exchange)).map(move |r| match r {
                Err(_) => Err(timed_out()),
                Ok(Ok(resp)) => Ok(resp.map(PooledBody::unpooled)),
                Ok(Err(e)) => Err(classify(&e, name)),
            }),
        )
    }
}

impl UpstreamClient {
    /// The `https` client whose connections are made within `limit`.
    fn timed_client(&self, limit: std::time::Duration) -> Client<Connector, Body> {
        let mut timed = self.timed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = timed.iter().find(|(t, _)| *t == limit) {
            return c.clone();
        }
        let c = https_client(&self.settings, self.connector.within(Some(limit)));
        timed.push((limit, c.clone()));
        c
    }
}

/// hyper-util's pooled client over `connector`, HTTP/2 by ALPN.
fn https_client(settings: &Settings, connector: Connector) -> Client<Connector, Body> {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(settings.pool_idle_timeout)
        .pool_max_idle_per_host(settings.pool_max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        // Host is set for HTTP/1.1 connections only: on HTTP/2 the authority travels as
        // `:authority` alone (a `host` field beside it makes nginx before 1.29.1 answer
        // 400, and RFC 9113 §8.3.1 prefers `:authority`).
        .set_host(true)
        .build(connector)
}

impl UpstreamClient {
    /// Sends a request that asks to upgrade the connection (WebSocket and any HTTP/1.1
    /// `Upgrade`, RFC 9110 §7.8) on a connection of its own, outside the pools: once
    /// upgraded it is no longer HTTP. The response head is awaited within
    /// `response_timeout`; the caller takes the upgraded connection from the response.
    pub async fn send_upgrade(
        &self,
        req: Request<Body>,
        target: &Target,
    ) -> Result<Response<hyper::body::Incoming>, ProxyError> {
        let name = target.authority.as_str();
        let limit = self.settings.response_timeout;
        let uri = http::Uri::builder()
            .scheme(target.scheme.uri_scheme())
            .authority(target.authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| ProxyError::BadTarget(e.to_string()))?;
        let exchange = async {
            let io = self
                .connector
                .connect_http1(uri)
                .await
                .map_err(|c| ProxyError::from(&c))?;
            let (mut tx, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| classify_http(&e, name))?;
            tokio::spawn(async move {
                let _ = conn.with_upgrades().await;
            });
            tx.send_request(req)
                .await
                .map_err(|e| classify_http(&e, name))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| ProxyError::UpstreamTimeout {
                target: name.to_owned(),
                stage: TimeoutStage::Respond,
                limit,
            })?
    }
}

/// Maps a failure on an established HTTP/1.1 connection.
fn classify_http(err: &hyper::Error, target: &str) -> ProxyError {
    let detail = err.to_string();
    if let Some(e) = client_body_error(err) {
        e
    } else if reset_before_response(err) {
        ProxyError::Connect {
            target: target.to_owned(),
            detail,
            sent: true,
        }
    } else {
        ProxyError::Upstream {
            target: target.to_owned(),
            detail,
        }
    }
}

/// Maps a client error to the error a user can act on, looking through the source chain
/// for the connector's typed error.
fn classify(err: &hyper_util::client::legacy::Error, target: &str) -> ProxyError {
    let mut source = err.source();
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return ProxyError::from(c);
        }
        source = s.source();
    }
    if let Some(e) = client_body_error(err) {
        return e;
    }
    let detail = match err.source() {
        Some(s) => s.to_string(),
        None => err.to_string(),
    };
    if err.is_connect() || reset_before_response(err) {
        ProxyError::Connect {
            target: target.to_owned(),
            detail,
            sent: !err.is_connect(),
        }
    } else {
        ProxyError::Upstream {
            target: target.to_owned(),
            detail,
        }
    }
}

impl From<&ConnectError> for ProxyError {
    fn from(c: &ConnectError) -> Self {
        match c {
            ConnectError::Dns { host, detail } => ProxyError::Dns {
                host: host.clone(),
                detail: detail.clone(),
            },
            ConnectError::Refused { target, detail } => ProxyError::Connect {
                target: target.clone(),
                detail: detail.clone(),
                sent: false,
            },
            ConnectError::Tls { target, detail } => ProxyError::Tls {
                target: target.clone(),
                detail: detail.clone(),
            },
            ConnectError::Timeout { target, limit } => ProxyError::UpstreamTimeout {
                target: target.clone(),
                stage: TimeoutStage::Connect,
                limit: *limit,
            },
            ConnectError::BadUri(u) => ProxyError::BadTarget(format!("bad upstream URI `{u}`")),
            ConnectError::Egress(r @ Denied::OwnProxy { .. }) => {
                ProxyError::LoopDetected(r.to_string())
            }
            ConnectError::Egress(r) => ProxyError::AddressDenied(r.to_string()),
        }
    }
}

/// The exchange failed because the client's own body was malformed: a 400, not a 502.
fn client_body_error(err: &(dyn std::error::Error + 'static)) -> Option<ProxyError> {
    crate::body::is_client_body_error(err).then(|| {
        ProxyError::BadRequest(
            "the request body is malformed or ended early (check chunked encoding and Content-Length)"
                .into(),
        )
    })
}

/// The connection closed or was reset before a response head arrived (`err` and its sources).
pub(crate) fn reset_before_response(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = s.source();
    }
    false
}
