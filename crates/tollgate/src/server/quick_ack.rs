//! TCP_QUICKACK on a client's HTTP/1.1 socket when a request asks for it ([`AckNow`]):
//! one whose body is still to come. Linux delays the ACK of a kept-alive connection's
//! data up to 40 ms (it looks interactive, so the ACK waits to ride on the response); a
//! client that writes a request's head and body apart with Nagle on (Python's urllib3,
//! and so `requests`, towards a proxy) sends the body only once the head is
//! acknowledged, so every such POST waited 40 ms. Setting the option sends a pending ACK
//! at once; it is set at the socket's next read, which is the body's. Requests without a
//! body ask nothing: their ACK rides on the response, as before (setting it after every
//! read cost an extra packet per request: 15-20 % of capacity on 2 vCPUs).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub use crate::conns::AckNow;

pub struct QuickAck(pub TcpStream, pub AckNow);

impl QuickAck {
    #[inline]
    fn ack_if_asked(&self) {
        if self.1.take() {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
        }
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
        this.ack_if_asked();
        Pin::new(&mut this.0).poll_read(cx, buf)
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
