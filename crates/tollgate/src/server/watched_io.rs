//! The client socket as the send timeout sees it: every write that makes progress is
//! counted, every write the kernel refuses because the client's window is full marks the
//! connection blocked (conns.rs sweeps for connections blocked too long). Watching the
//! socket, not the response body, covers every response whatever produced it — a relayed
//! stream, a cached or aggregated body handed to hyper whole, an error — and hyper's own
//! buffered last bytes, which it writes after the body has ended.

use crate::conns::Conn;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A client's connection: its TCP socket, or the TLS session of a decrypted tunnel.
pub struct WatchedIo<S> {
    stream: S,
    conn: Arc<Conn>,
}

impl<S> WatchedIo<S> {
    pub fn new(stream: S, conn: Arc<Conn>) -> Self {
        Self { stream, conn }
    }

    #[inline]
    fn note<T>(&self, r: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match &r {
            Poll::Pending => self.conn.write_blocked(),
            Poll::Ready(_) => self.conn.wrote(),
        }
        r
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.note(r)
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.note(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
