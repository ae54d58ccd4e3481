//! TCP_QUICKACK on a client's socket, set again after each read that brought bytes: the
//! kernel acknowledges what it received at once instead of delaying the ACK up to 40 ms
//! (Linux delays ACKs on a connection that looks interactive, which a kept-alive one
//! does). A client that writes a request's head and body in two writes with Nagle on
//! (Python's urllib3, and so `requests`, towards a proxy) sends the body only once the
//! head is acknowledged: with delayed ACKs every such POST waited 40 ms. Setting the
//! option also sends an ACK that is pending, and Linux clears it again on its own, so
//! it is set after every read. One `setsockopt` per read; elsewhere than Linux, nothing.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub struct QuickAck(pub TcpStream);

impl QuickAck {
    #[inline]
    fn rearm(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
    }
}

impl AsyncRead for QuickAck {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.0).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.rearm();
        }
        r
    }
}

impl AsyncWrite for QuickAck {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
