//! An answer's messages rewritten as they pass: each JSON-RPC message of it (a JSON
//! answer is one message, held until it is whole, at most [`CAP`]; an SSE answer is
//! relayed an event at a time, each event held until its blank line) given to a
//! [`Rewrite`], whose change replaces it. A message larger than the cap passes as it is.
//! What rewrites answers: a `tools/list` without refused tools ([`super::tools_list`]),
//! and an answer from the cache with the asking call's `id` ([`with_id`]).

use crate::body::{Body, BoxError};
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The largest message (a JSON answer, or one SSE event) held to be rewritten.
pub const CAP: usize = 4 << 20;

/// A message's rewrite: `None` leaves it as it is.
pub type Rewrite = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

#[derive(Deserialize)]
struct Identified<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
}

/// `message` (one JSON-RPC response) answering the call whose id is `id` (as written):
/// `None` when it already does, or has no id.
pub fn with_id(message: &str, id: &str) -> Option<String> {
    let m: Identified<'_> = serde_json::from_str(message).ok()?;
    let old = m.id?;
    if old.get() == id {
        return None;
    }
    // The id borrows from `message`: where it lies in it is its address less the message's.
    let at = old.get().as_ptr() as usize - message.as_ptr() as usize;
    let mut out = String::with_capacity(message.len() + id.len());
    out.push_str(&message[..at]);
    out.push_str(id);
    out.push_str(&message[at + old.get().len()..]);
    Some(out)
}

/// One SSE event (its lines and the blank line ending it) with its `data:` line
/// rewritten; `None` when nothing changes. An event whose data spans several lines is
/// left as it is (MCP servers write each message on one line).
pub fn rewrite_event(event: &[u8], rewrite: &dyn Fn(&str) -> Option<String>) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let mut data = text
        .split_inclusive('\n')
        .filter(|l| l.starts_with("data:"));
    let line = data.next()?;
    if data.next().is_some() {
        return None;
    }
    let value = line["data:".len()..].trim_end_matches(['\r', '\n']);
    let value = value.strip_prefix(' ').unwrap_or(value);
    let filtered = rewrite(value)?;
    let start = value.as_ptr() as usize - text.as_ptr() as usize;
    let mut out = Vec::with_capacity(event.len());
    out.extend_from_slice(&event[..start]);
    out.extend_from_slice(filtered.as_bytes());
    out.extend_from_slice(&event[start + value.len()..]);
    Some(out)
}

/// Where an SSE event ends in `buf` (after its blank line), if a whole one is there.
pub fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(n) = memchr::memchr(b'\n', &buf[i..]) {
        let nl = i + n;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

enum Mode {
    Json,
    Sse,
    /// Past the cap, or done: relayed as it comes.
    Through,
}

pin_project_lite::pin_project! {
    /// An answer's body, each message rewritten.
    pub struct Rewritten {
        #[pin]
        inner: Body,
        mode: Mode,
        held: BytesMut,
        rewrite: Rewrite,
        ended: bool,
    }
}

impl Rewritten {
    /// `sse`: the answer is an event stream (else one JSON message).
    pub fn new(inner: Body, sse: bool, rewrite: Rewrite) -> Self {
        Self {
            inner,
            mode: if sse { Mode::Sse } else { Mode::Json },
            held: BytesMut::new(),
            rewrite,
            ended: false,
        }
    }
}

impl HttpBody for Rewritten {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if let Mode::Sse = this.mode
                && let Some(end) = event_end(this.held)
            {
                let event = this.held.split_to(end).freeze();
                let out = rewrite_event(&event, &**this.rewrite).map_or(event, Bytes::from);
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            if *this.ended {
                // What is left after the last whole event, or the whole JSON message.
                if this.held.is_empty() {
                    return Poll::Ready(None);
                }
                let held = this.held.split().freeze();
                let out = match this.mode {
                    Mode::Json => std::str::from_utf8(&held)
                        .ok()
                        .and_then(|m| (this.rewrite)(m))
                        .map_or(held, Bytes::from),
                    _ => held,
                };
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            let frame = match this.inner.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    *this.ended = true;
                    continue;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(f))) => f,
            };
            let data = match frame.into_data() {
                Ok(d) => d,
                // Trailers: what is held goes first.
                Err(f) if this.held.is_empty() => return Poll::Ready(Some(Ok(f))),
                Err(_) => continue,
            };
            if let Mode::Through = this.mode {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            this.held.extend_from_slice(&data);
            if this.held.len() > CAP
                && !matches!(this.mode, Mode::Sse if event_end(this.held).is_some())
            {
                // Too large to hold: what is held goes on, and the rest as it comes.
                *this.mode = Mode::Through;
                return Poll::Ready(Some(Ok(Frame::data(this.held.split().freeze()))));
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
    use http_body_util::BodyExt;

    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","tools":[{"name":"add","inputSchema":{"type":"object"}}, {"description":"x","name":"delete_repository"} ,{"name":"echo"}],"ttlMs":0}}"#;

    fn cut(m: &str) -> Option<String> {
        super::super::tools_list::filter(m, &|n| !n.starts_with("delete"))
    }

    #[test]
    fn ids_are_put_back_as_the_call_wrote_them() {
        assert_eq!(
            with_id(
                r#"{"jsonrpc":"2.0","id":1,"result":{"id":1}}"#,
                r#""req-9""#
            )
            .unwrap(),
            r#"{"jsonrpc":"2.0","id":"req-9","result":{"id":1}}"#
        );
        assert_eq!(
            with_id(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, "7"),
            None
        );
        assert_eq!(with_id(r#"{"jsonrpc":"2.0","method":"x"}"#, "7"), None);
    }

    #[test]
    fn events_keep_their_other_lines() {
        let event = format!("event: message\r\nid: 7\r\ndata: {LIST}\r\n\r\n");
        let out = String::from_utf8(rewrite_event(event.as_bytes(), &cut).unwrap()).unwrap();
        assert!(out.starts_with("event: message\r\nid: 7\r\ndata: {"));
        assert!(out.ends_with("}}\r\n\r\n"));
        assert!(!out.contains("delete_repository"));
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some(9));
        assert_eq!(event_end(b"data: 1\r\n\r\n"), Some(11));
        assert_eq!(event_end(b"data: 1\n"), None);
    }

    #[tokio::test]
    async fn bodies_are_rewritten_in_pieces() {
        let rewrite: Rewrite = Arc::new(|m: &str| {
            let m = cut(m).unwrap_or_else(|| m.to_owned());
            Some(with_id(&m, "42").unwrap_or(m))
        });
        let pieces = |s: &str| {
            let chunks: Vec<Result<_, BoxError>> = s
                .as_bytes()
                .chunks(7)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            http_body_util::StreamBody::new(futures_util::stream::iter(chunks)).boxed_unsync()
        };
        let json = Rewritten::new(pieces(LIST), false, rewrite.clone());
        let got = String::from_utf8(json.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        assert_eq!(got, with_id(&cut(LIST).unwrap(), "42").unwrap());
        let stream = format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}}\n\nevent: message\ndata: {LIST}\n\n"
        );
        let sse = Rewritten::new(pieces(&stream), true, rewrite);
        let got = String::from_utf8(sse.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        assert!(got.starts_with(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"
        ));
        assert!(got.contains("\"echo\"") && !got.contains("delete_repository"));
        assert!(got.contains("\"id\":42"));
    }
}
