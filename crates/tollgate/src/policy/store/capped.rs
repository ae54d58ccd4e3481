//! The connection to one Redis (`store.url`), made here rather than by redis-rs's
//! connection manager so that what it reads is bounded: a hostile or broken peer at the
//! store's address that announces a huge bulk reply and streams bytes would otherwise
//! grow the reply buffer without end. tollgate's commands get small replies (counters,
//! pairs of numbers, `OK`), so a connection may read 1 MiB plus 64 bytes for each byte
//! it sent, plus what the commands that read a value (a shared cache's entry) announced
//! they may read ([`Credit`]); past that it fails (cause `reply`) and the store falls
//! back and reconnects.
//! TCP or TLS (`rediss://`, webpki roots); a Unix socket keeps redis-rs's own connection.

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Bytes any connection may read, beyond [`PER_BYTE_SENT`] for each byte it wrote.
const SLACK: u64 = 1 << 20;
/// Bytes of reply allowed per byte of command sent.
const PER_BYTE_SENT: u64 = 64;
/// What the error says: [`super::redis`] reads it as the cause `reply`.
pub const TOO_LARGE: &str = "the peer at the store's address sent more than tollgate's commands ask for (a reply over the bound)";

/// Bytes that commands reading a stored value may read beyond the per-byte bound: raised
/// by each such command (by the largest value it may get) before it is sent, for every
/// connection of one store.
pub type Credit = Arc<std::sync::atomic::AtomicU64>;

/// A stream whose reads are bounded by its writes.
pub struct Capped<S> {
    inner: S,
    read: u64,
    written: u64,
    credit: Credit,
}

impl<S> Capped<S> {
    pub fn new(inner: S, credit: Credit) -> Self {
        Self {
            inner,
            read: 0,
            written: 0,
            credit,
        }
    }

    fn over(&self) -> bool {
        let credit = self.credit.load(std::sync::atomic::Ordering::Relaxed);
        self.read
            > SLACK
                .saturating_add(self.written.saturating_mul(PER_BYTE_SENT))
                .saturating_add(credit)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.over() {
            return Poll::Ready(Err(io::Error::other(TOO_LARGE)));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.read += (buf.filled().len() - before) as u64;
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            this.written += *n as u64;
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Whether [`connect`] makes connections to `info` (TCP, or TLS without client
/// certificates); else redis-rs's connection manager does.
pub fn handles(info: &ConnectionInfo) -> bool {
    matches!(
        info.addr(),
        ConnectionAddr::Tcp(..)
            | ConnectionAddr::TcpTls {
                tls_params: None,
                ..
            }
    )
}

/// A multiplexed connection to `info` over a [`Capped`] stream, its driver spawned on
/// this thread's runtime; `timeout` bounds the connection (TCP, TLS, the handshake).
pub async fn connect(
    info: ConnectionInfo,
    timeout: Duration,
    credit: Credit,
) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        // Later than the store's own bound, which then fires first.
        .set_response_timeout(Some(timeout * 2));
    let connecting = async {
        let (host, port) = match info.addr() {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => (h.clone(), *p),
            _ => return Err(io::Error::other("not a TCP address").into()),
        };
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        let _ = tcp.set_nodelay(true);
        match info.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => {
                let tls = tls(&host, *insecure, tcp).await?;
                multiplexed(&info, Capped::new(tls, credit), config).await
            }
            _ => multiplexed(&info, Capped::new(tcp, credit), config).await,
        }
    };
    tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| {
            RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                "connecting to Redis",
            ))
        })?
}

async fn multiplexed<S>(
    info: &ConnectionInfo,
    stream: S,
    config: AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), stream, config).await?;
    tokio::spawn(driver);
    Ok(conn)
}

/// TLS to `host` as `rediss://` asks: verified against the webpki (Mozilla) roots, or
/// not at all with `#insecure`.
async fn tls(
    host: &str,
    insecure: bool,
    tcp: TcpStream,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use crate::upstream::tls::{NoVerify, provider};
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?;
    let config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
            .with_no_client_auth()
    } else {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let name = rustls_pki_types::ServerName::try_from(host.to_owned()).map_err(io::Error::other)?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}
