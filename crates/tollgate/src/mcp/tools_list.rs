//! A `tools/list` answer without the tools a policy refuses, so the model is never offered
//! one it may not call. Only the refused entries of `result.tools` are cut out: every
//! other byte of the message stays as the server wrote it. A JSON answer is held until
//! it is whole (at most [`CAP`]); an SSE answer (2025-11-25 and older) is relayed an event
//! at a time, each event held until its blank line. A message larger than the cap passes
//! as it is: the list is what the model is offered, and a call to a refused tool is
//! still refused whatever the list said.

use crate::body::{Body, BoxError};
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The largest message (a JSON answer, or one SSE event) held to be filtered.
pub const CAP: usize = 4 << 20;

/// Which tools stay in a list.
pub type Keep = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// `message` (one JSON-RPC response, as text) without the tools `keep` refuses; `None`
/// when it has none of them (or is no `tools/list` result), so it goes on untouched.
pub fn filter(message: &str, keep: &dyn Fn(&str) -> bool) -> Option<String> {
    let r: Response<'_> = serde_json::from_str(message).ok()?;
    let l: ListResult<'_> = serde_json::from_str(r.result?.get()).ok()?;
    let tools = l.tools?;
    let refused = |t: &RawValue| {
        serde_json::from_str::<Tool<'_>>(t.get())
            .ok()
            .and_then(|t| t.name)
            .is_some_and(|n| !keep(&n))
    };
    if !tools.iter().any(|t| refused(t)) {
        return None;
    }
    // Every element borrows from `message`: where each lies in it is its address less
    // the message's.
    let at = |t: &RawValue| t.get().as_ptr() as usize - message.as_ptr() as usize;
    let (first, last) = (tools.first()?, tools.last()?);
    let (start, end) = (at(first), at(last) + last.get().len());
    let mut out = String::with_capacity(message.len());
    out.push_str(&message[..start]);
    let kept: Vec<&str> = tools
        .iter()
        .filter(|t| !refused(t))
        .map(|t| t.get())
        .collect();
    out.push_str(&kept.join(","));
    out.push_str(&message[end..]);
    Some(out)
}

/// One SSE event (its lines and the blank line ending it) with the refused tools cut
/// from its `data:` line; `None` when nothing changes. An event whose data spans several
/// lines is left as it is (MCP servers write each message on one line).
pub fn filter_event(event: &[u8], keep: &dyn Fn(&str) -> bool) -> Option<Vec<u8>> {
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
    let filtered = filter(value, keep)?;
    let start = value.as_ptr() as usize - text.as_ptr() as usize;
    let mut out = Vec::with_capacity(event.len());
    out.extend_from_slice(&event[..start]);
    out.extend_from_slice(filtered.as_bytes());
    out.extend_from_slice(&event[start + value.len()..]);
    Some(out)
}

/// Where an SSE event ends in `buf` (after its blank line), if a whole one is there.
fn event_end(buf: &[u8]) -> Option<usize> {
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
    /// A `tools/list` answer's body, its refused tools cut out.
    pub struct Filtered {
        #[pin]
        inner: Body,
        mode: Mode,
        held: BytesMut,
        keep: Keep,
        ended: bool,
    }
}

impl Filtered {
    /// `sse`: the answer is an event stream (else one JSON message).
    pub fn new(inner: Body, sse: bool, keep: Keep) -> Self {
        Self {
            inner,
            mode: if sse { Mode::Sse } else { Mode::Json },
            held: BytesMut::new(),
            keep,
            ended: false,
        }
    }
}

impl HttpBody for Filtered {
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
                let out = filter_event(&event, &**this.keep).map_or(event, Bytes::from);
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
                        .and_then(|m| filter(m, &**this.keep))
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

    fn keep(n: &str) -> bool {
        !n.starts_with("delete")
    }

    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","tools":[{"name":"add","inputSchema":{"type":"object"}}, {"description":"x","name":"delete_repository"} ,{"name":"echo"}],"ttlMs":0}}"#;

    #[test]
    fn refused_tools_are_cut_and_the_rest_kept_as_written() {
        assert_eq!(
            filter(LIST, &keep).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","tools":[{"name":"add","inputSchema":{"type":"object"}},{"name":"echo"}],"ttlMs":0}}"#
        );
        let only = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[ {"name":"delete_all"} ]}}"#;
        assert_eq!(
            filter(only, &keep).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[  ]}}"#
        );
        // Nothing refused, an error, another result: untouched.
        assert_eq!(
            filter(
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"add"}]}}"#,
                &keep
            ),
            None
        );
        assert_eq!(
            filter(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#,
                &keep
            ),
            None
        );
        assert_eq!(
            filter(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#, &keep),
            None
        );
    }

    #[test]
    fn events_keep_their_other_lines() {
        let event = format!("event: message\r\nid: 7\r\ndata: {LIST}\r\n\r\n");
        let out = String::from_utf8(filter_event(event.as_bytes(), &keep).unwrap()).unwrap();
        assert!(out.starts_with("event: message\r\nid: 7\r\ndata: {"));
        assert!(out.ends_with("}}\r\n\r\n"));
        assert!(!out.contains("delete_repository"));
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some(9));
        assert_eq!(event_end(b"data: 1\r\n\r\n"), Some(11));
        assert_eq!(event_end(b"data: 1\n"), None);
    }

    #[tokio::test]
    async fn bodies_are_filtered_in_pieces() {
        let keep: Keep = Arc::new(keep);
        let pieces = |s: &str| {
            let chunks: Vec<Result<_, BoxError>> = s
                .as_bytes()
                .chunks(7)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            http_body_util::StreamBody::new(futures_util::stream::iter(chunks)).boxed_unsync()
        };
        let json = Filtered::new(pieces(LIST), false, keep.clone());
        let got = json.collect().await.unwrap().to_bytes();
        assert_eq!(got, filter(LIST, &|n| !n.starts_with("delete")).unwrap());
        let stream = format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}}\n\nevent: message\ndata: {LIST}\n\n"
        );
        let sse = Filtered::new(pieces(&stream), true, keep);
        let got = String::from_utf8(sse.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        assert!(got.starts_with(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"
        ));
        assert!(got.contains("\"echo\"") && !got.contains("delete_repository"));
    }
}
