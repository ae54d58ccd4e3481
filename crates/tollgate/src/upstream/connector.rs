//! The upstream connector: cached DNS, TCP with TCP_NODELAY, TLS with ALPN, one timeout
//! over all three. Errors are typed so the pipeline can say `dns_error`,
//! `connect_error`, `tls_error` or `upstream_timeout`.

use super::dns::Resolver;
use crate::egress::{Denied, Egress};
use crate::metrics::Metrics;
use crate::target::Scheme;
use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot resolve `{host}`: {detail}")]
    Dns { host: String, detail: String },
    #[error("cannot connect to `{target}`: {detail}")]
    Refused { target: String, detail: String },
    #[error("TLS handshake with `{target}` failed: {detail}")]
    Tls { target: String, detail: String },
    #[error("connecting to `{target}` took longer than {limit:?}")]
    Timeout { target: String, limit: Duration },
    #[error("bad upstream URI `{0}`")]
    BadUri(String),
    #[error(transparent)]
    Egress(Denied),
}

/// Cheap to clone (one reference count): hyper-util's pooled client clones its connector
/// for every request, even when a pooled connection is then used.
#[derive(Clone)]
pub struct Connector {
    inner: Arc<Inner>,
    /// A policy's `timeouts.connect`, for the connections made for its attempts (the
    /// `upstream` one otherwise). Part of the connector because hyper-util's client
    /// hands it nothing but the URI.
    connect_timeout: Option<Duration>,
}

struct Inner {
    resolver: Resolver,
    egress: Egress,
    connect_timeout: Duration,
    tls: Arc<ClientConfig>,
    tls_insecure: Arc<ClientConfig>,
    /// The same two with ALPN `http/1.1` alone: an HTTP/1.1 upgrade (WebSocket) needs a
    /// connection that cannot turn into HTTP/2.
    tls_h1: Arc<ClientConfig>,
    tls_insecure_h1: Arc<ClientConfig>,
    insecure_hosts: Arc<[String]>,
    metrics: Metrics,
}

/// A policy's `timeouts.connect` for one request, or `()`: the `upstream` one, as a type
/// of no size, so that the unmatched path's request future carries nothing for it (its
/// size is bounded by a test).
pub trait ConnectTimeout: Copy + Send + Sync {
    fn get(self) -> Option<Duration>;
}

impl ConnectTimeout for () {
    fn get(self) -> Option<Duration> {
        None
    }
}

impl ConnectTimeout for Option<Duration> {
    fn get(self) -> Option<Duration> {
        self
    }
}

impl Connector {
    pub fn new(
        resolver: Resolver,
        egress: Egress,
        connect_timeout: Duration,
        (tls, tls_insecure): (Arc<ClientConfig>, Arc<ClientConfig>),
        insecure_hosts: Vec<String>,
        metrics: Metrics,
    ) -> Self {
        let h1 = |c: &Arc<ClientConfig>| {
            let mut c = (**c).clone();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(c)
        };
        Self {
            inner: Arc::new(Inner {
                resolver,
                egress,
                connect_timeout,
                tls_h1: h1(&tls),
                tls_insecure_h1: h1(&tls_insecure),
                tls,
                tls_insecure,
                insecure_hosts: insecure_hosts.into(),
                metrics,
            }),
            connect_timeout: None,
        }
    }

    /// This connector with its connections made within `limit` (a policy's
    /// `timeouts.connect`); the DNS cache, TLS configs and rules are shared.
    pub fn within(&self, limit: Option<Duration>) -> Self {
        Self {
            inner: self.inner.clone(),
            connect_timeout: limit.or(self.connect_timeout),
        }
    }

    /// Resolves and opens a TCP connection (also used by CONNECT tunnels), within the connect timeout.
    pub async fn connect_tcp(&self, host: &Arc<str>, port: u16) -> Result<TcpStream, ConnectError> {
        let target = format!("{host}:{port}");
        tokio::time::timeout(self.inner.connect_timeout, self.tcp(host, port, &target))
            .await
            .map_err(|_| ConnectError::Timeout {
                target,
                limit: self.inner.connect_timeout,
            })?
    }

    async fn tcp(
        &self,
        host: &Arc<str>,
        port: u16,
        target: &str,
    ) -> Result<TcpStream, ConnectError> {
        let addrs = self
            .inner
            .resolver
            .resolve(host, port)
            .await
            .map_err(|detail| ConnectError::Dns {
                host: host.to_string(),
                detail,
            })?;
        let mut last = None;
        let mut refused = None;
        // Addresses in resolver order (RFC 6724 sorting by getaddrinfo); first that answers
        // wins. Each is checked against the egress rules after resolution: only checked
        // addresses are ever connected to, whatever the name and whatever DNS answers.
        for addr in addrs {
            if let Err(r) = self.inner.egress.check(target, addr) {
                refused.get_or_insert(r);
                continue;
            }
            match TcpStream::connect(crate::egress::destination(addr)).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        if let (None, Some(r)) = (&last, refused) {
            return Err(ConnectError::Egress(r));
        }
        Err(ConnectError::Refused {
            target: target.to_owned(),
            detail: last
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no address".into()),
        })
    }

    /// An HTTP/1.1 connection (ALPN `http/1.1` alone for https), outside any pool: for
    /// requests that upgrade the connection.
    pub fn connect_http1(
        &self,
        uri: Uri,
    ) -> Pin<Box<dyn Future<Output = Result<UpstreamConn, ConnectError>> + Send>> {
        Box::pin(self.clone().connect(uri, true))
    }

    async fn connect(self, uri: Uri, http1_only: bool) -> Result<UpstreamConn, ConnectError> {
        let scheme = uri
            .scheme_str()
            .and_then(Scheme::parse)
            .ok_or_else(|| ConnectError::BadUri(uri.to_string()))?;
        let raw_host = uri
            .host()
            .ok_or_else(|| ConnectError::BadUri(uri.to_string()))?;
        let host: Arc<str> = raw_host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .into();
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        let target = format!("{raw_host}:{port}");
        // A policy's `timeouts.connect` overrides the upstream one for its attempts.
        let limit = self.connect_timeout.unwrap_or(self.inner.connect_timeout);
        let work = async {
            let tcp = self.tcp(&host, port, &target).await?;
            let (stream, h2) = match scheme {
                Scheme::Http => (Stream::Plain(tcp), false),
                Scheme::Https => {
                    let insecure = self.inner.insecure_hosts.iter().any(|h| **h == *host);
                    let i = &self.inner;
                    let config = match (insecure, http1_only) {
                        (false, false) => &i.tls,
                        (true, false) => &i.tls_insecure,
                        (false, true) => &i.tls_h1,
                        (true, true) => &i.tls_insecure_h1,
                    };
                    let name =
                        ServerName::try_from(host.to_string()).map_err(|e| ConnectError::Tls {
                            target: target.clone(),
                            detail: e.to_string(),
                        })?;
                    let tls = TlsConnector::from(config.clone())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| ConnectError::Tls {
                            target: target.clone(),
                            detail: e.to_string(),
                        })?;
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    (Stream::Tls(Box::new(tls)), h2)
                }
            };
            Ok(UpstreamConn::new(stream, h2, self.inner.metrics.clone()))
        };
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| ConnectError::Timeout { target, limit })?
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = UpstreamConn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamConn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().connect(uri, false))
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Plain($s) => {
                let $s = Pin::new($s);
                $e
            }
            Stream::Tls($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_shutdown(cx))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// One upstream connection, counted in the `tollgate_upstream_connections` gauge while open.
pub struct UpstreamConn {
    io: TokioIo<Stream>,
    h2: bool,
    metrics: Metrics,
}

impl UpstreamConn {
    fn new(stream: Stream, h2: bool, metrics: Metrics) -> Self {
        metrics.upstream_connections.inc();
        Self {
            io: TokioIo::new(stream),
            h2,
            metrics,
        }
    }
}

impl Drop for UpstreamConn {
    fn drop(&mut self) {
        self.metrics.upstream_connections.dec();
    }
}

impl Connection for UpstreamConn {
    fn connected(&self) -> Connected {
        let c = Connected::new();
        if self.h2 { c.negotiated_h2() } else { c }
    }
}

impl hyper::rt::Read for UpstreamConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for UpstreamConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
