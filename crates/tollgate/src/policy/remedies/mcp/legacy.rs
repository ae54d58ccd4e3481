//! The older HTTP+SSE transport (MCP 2024-11-05, deprecated in 2025-03-26): a client
//! opens a stream with `GET` (its first event, `endpoint`, names the URL to POST
//! messages to), POSTs each message there (the server answers `202 Accepted`), and gets
//! every answer on the stream. So that a call tollgate refuses is answered where this
//! transport's clients wait for it, each stream passing through an `mcp` policy is
//! registered under its message URL; a refused POST to that URL is answered `202` and
//! its JSON-RPC error is sent on the stream, between two of the server's events. The
//! stream's `tools/list` answers are filtered as a POST's are. Sessions are bounded
//! ([`MAX_SESSIONS`]); past that, or with the stream's queue full, the refusal answers
//! the POST as on the other transports.

use crate::body::{Body, BoxError};
use crate::mcp::rewrite::{self, Rewrite};
use crate::policy::mcp_call::LegacyReply;
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use rustc_hash::FxHashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Streams registered at once, per policy.
pub const MAX_SESSIONS: usize = 10_000;
/// Refusals queued for one stream.
const QUEUE: usize = 16;

/// The open streams of one policy, by message URL (`authority` + path and query).
#[derive(Default)]
pub struct Sessions {
    open: RwLock<FxHashMap<Box<str>, mpsc::Sender<Bytes>>>,
    /// How many are open: a POST looks a session up only when there is one.
    count: AtomicUsize,
}

impl Sessions {
    /// Registers the stream whose messages go to `key`: its queue of refusals.
    fn open(&self, key: &str) -> Option<mpsc::Receiver<Bytes>> {
        let mut open = self.open.write().unwrap_or_else(|e| e.into_inner());
        if open.len() >= MAX_SESSIONS {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        if open.insert(key.into(), tx).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        Some(rx)
    }

    fn close(&self, key: &str) {
        let mut open = self.open.write().unwrap_or_else(|e| e.into_inner());
        if open.remove(key).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Where a refusal of a message POSTed to `key` goes, when a stream waits for it.
    pub fn reply(&self, authority: &str, path_and_query: &str) -> Option<LegacyReply> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let key = format!("{authority}{path_and_query}");
        let open = self.open.read().unwrap_or_else(|e| e.into_inner());
        open.get(key.as_str()).cloned().map(LegacyReply)
    }
}

/// The message URL an `endpoint` event names, as the key its POSTs will have: a path
/// (relative to the stream's server, as servers write it) or an absolute URL.
fn endpoint(event: &[u8], authority: &str) -> Option<String> {
    let text = std::str::from_utf8(event).ok()?;
    let mut lines = text.lines();
    if !lines
        .clone()
        .any(|l| l.trim_end() == "event: endpoint" || l.trim_end() == "event:endpoint")
    {
        return None;
    }
    let data = lines.find_map(|l| l.strip_prefix("data:"))?.trim();
    match data.split_once("://") {
        Some((_, rest)) => {
            let at = rest.find('/').unwrap_or(rest.len());
            Some(format!("{}{}", &rest[..at], &rest[at..]))
        }
        None => data.starts_with('/').then(|| format!("{authority}{data}")),
    }
}

pin_project_lite::pin_project! {
    /// A stream of this transport: its events as they come (each held until its blank
    /// line), `tools/list` answers filtered, refusals sent between events.
    pub struct Stream {
        #[pin]
        inner: Body,
        held: BytesMut,
        rewrite: Option<Rewrite>,
        authority: Box<str>,
        sessions: Arc<Sessions>,
        // The key it is registered under, and its queue of refusals.
        session: Option<(Box<str>, mpsc::Receiver<Bytes>)>,
        ended: bool,
    }

    impl PinnedDrop for Stream {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some((key, _)) = this.session.take() {
                this.sessions.close(&key);
            }
        }
    }
}

impl Stream {
    pub fn new(
        inner: Body,
        authority: &str,
        sessions: Arc<Sessions>,
        rewrite: Option<Rewrite>,
    ) -> Self {
        Self {
            inner,
            held: BytesMut::new(),
            rewrite,
            authority: authority.into(),
            sessions,
            session: None,
            ended: false,
        }
    }
}

impl HttpBody for Stream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            // A refusal goes out between two of the server's events.
            if let Some((_, rx)) = this.session
                && let Poll::Ready(Some(event)) = rx.poll_recv(cx)
            {
                return Poll::Ready(Some(Ok(Frame::data(event))));
            }
            if let Some(end) = rewrite::event_end(this.held) {
                let event = this.held.split_to(end).freeze();
                if this.session.is_none()
                    && let Some(key) = endpoint(&event, this.authority)
                    && let Some(rx) = this.sessions.open(&key)
                {
                    *this.session = Some((key.into(), rx));
                }
                let out = match this.rewrite {
                    Some(r) => rewrite::rewrite_event(&event, &**r).map_or(event, Bytes::from),
                    None => event,
                };
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            if *this.ended {
                if this.held.is_empty() {
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(Ok(Frame::data(this.held.split().freeze()))));
            }
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => *this.ended = true,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => {
                        this.held.extend_from_slice(&d);
                        if this.held.len() > rewrite::CAP && rewrite::event_end(this.held).is_none()
                        {
                            // An event too long to hold goes on as it comes.
                            return Poll::Ready(Some(Ok(Frame::data(this.held.split().freeze()))));
                        }
                    }
                    Err(f) if this.held.is_empty() => return Poll::Ready(Some(Ok(f))),
                    Err(_) => {}
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.held.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_keyed_as_their_posts_are() {
        let e = b"event: endpoint\r\ndata: /messages/?session_id=ab12\r\n\r\n";
        assert_eq!(
            endpoint(e, "mcp.example.com"),
            Some("mcp.example.com/messages/?session_id=ab12".into())
        );
        let e = b"event: endpoint\ndata: https://other.example.com:8443/m?s=1\n\n";
        assert_eq!(
            endpoint(e, "x"),
            Some("other.example.com:8443/m?s=1".into())
        );
        assert_eq!(endpoint(b"event: message\ndata: /x\n\n", "h"), None);
    }

    #[test]
    fn sessions_are_bounded_and_closed() {
        let s = Sessions::default();
        assert!(s.reply("h", "/m?s=1").is_none());
        let _rx = s.open("h/m?s=1").unwrap();
        assert!(s.reply("h", "/m?s=1").is_some());
        assert!(s.reply("h", "/m?s=2").is_none());
        s.close("h/m?s=1");
        assert!(s.reply("h", "/m?s=1").is_none());
        assert_eq!(s.count.load(Ordering::Relaxed), 0);
    }
}
