//! The answer of an LLM call, relayed as it arrives while its usage is read: a complete
//! JSON answer through [`Scan`], a server-sent-event stream event by event. Every byte
//! goes on as it came, in the frame it came in; the one exception is the usage chunk
//! tollgate asked OpenAI for (`include_usage: add`), which the client did not ask for and
//! does not get: then the stream is relayed an event at a time.

use super::meter::Meter;
use super::scan::Scan;
use super::sse::{Event, Events};
use super::{Api, Call};
use crate::body::{Body, BoxError};
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// A kept value or event is at most this long (a usage object, a model's name, an
/// event's data): longer ones are not read.
const CAP: usize = 1 << 20;

enum Reader {
    Json(Scan),
    Sse {
        events: Events,
        /// `include_usage` was added: the usage chunk is removed, and bytes after the last
        /// whole event wait for the rest of it.
        strip: Option<BytesMut>,
    },
}

pin_project_lite::pin_project! {
    /// The answer's body, read as it passes.
    pub struct Metered {
        #[pin]
        inner: Body,
        reader: Reader,
        meter: Arc<Meter>,
        started: Instant,
        first: bool,
    }
}

/// The answer `resp` of `call`, its body read for usage. An answer that is not a success
/// used nothing the provider bills.
pub fn meter(call: &Call, resp: http::Response<Body>) -> http::Response<Body> {
    let meter = call.meter.clone();
    if !resp.status().is_success() {
        meter.update(|m| m.whole = true);
        return resp;
    }
    let sse = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    let reader = if sse {
        Reader::Sse {
            events: Events::new(CAP),
            strip: call.strip_usage.then(BytesMut::new),
        }
    } else {
        Reader::Json(Scan::new(keys(meter.api), CAP))
    };
    meter.update(|m| m.relayed = true);
    let (mut parts, body) = resp.into_parts();
    if call.strip_usage && sse {
        // Its length changes when the usage chunk is removed.
        parts.headers.remove(http::header::CONTENT_LENGTH);
    }
    let body = Metered {
        inner: body,
        reader,
        meter,
        started: call.started,
        first: true,
    };
    http::Response::from_parts(parts, body.boxed_unsync())
}

/// The keys of a complete answer that tell its usage and model.
fn keys(api: Api) -> &'static [&'static str] {
    match api {
        Api::Gemini => &["usageMetadata", "modelVersion"],
        _ => &["usage", "model"],
    }
}

impl HttpBody for Metered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            let frame = match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => f,
                Poll::Ready(None) => {
                    // An answer that ended whole told its final usage (Gemini's last
                    // chunk repeats the whole count).
                    this.meter
                        .update(|m| m.whole |= m.reported.output.is_some());
                    if let Reader::Sse {
                        strip: Some(rest), ..
                    } = this.reader
                        && !rest.is_empty()
                    {
                        let rest = std::mem::take(rest).freeze();
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                    return Poll::Ready(None);
                }
                other => return other,
            };
            let Some(data) = frame.data_ref() else {
                return Poll::Ready(Some(Ok(frame)));
            };
            if std::mem::take(this.first) {
                let at = this.started.elapsed();
                this.meter.update(|m| m.first_byte = Some(at));
            }
            match this.reader {
                Reader::Json(scan) => {
                    scan.feed(data);
                    for (k, v) in scan.found.drain(..) {
                        json_value(this.meter, k, &v);
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Reader::Sse {
                    events,
                    strip: None,
                } => {
                    events.feed(data, |e| {
                        sse_event(this.meter, &e);
                    });
                    return Poll::Ready(Some(Ok(frame)));
                }
                Reader::Sse {
                    events,
                    strip: Some(pending),
                } => {
                    let data = frame.into_data().unwrap_or_default();
                    let start = events_offset(events, pending);
                    pending.extend_from_slice(&data);
                    let mut out = BytesMut::new();
                    let mut kept = 0u64;
                    let meter = &*this.meter;
                    events.feed(&data, |e| {
                        let upto = (e.end - start) as usize;
                        if !sse_event(meter, &e) {
                            without_null_usage(&mut out, &pending[kept as usize..upto]);
                        }
                        kept = upto as u64;
                    });
                    let _ = pending.split_to(kept as usize);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
                    }
                    // Nothing whole to send yet (or only the removed chunk): read on.
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
            && !matches!(&self.reader, Reader::Sse { strip: Some(p), .. } if !p.is_empty())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.reader {
            Reader::Sse { strip: Some(_), .. } => SizeHint::default(),
            _ => self.inner.size_hint(),
        }
    }
}

/// `event` as the client would have had it without `include_usage`: OpenAI adds
/// `"usage":null` to every chunk then, which is removed. (Inside a JSON string its quotes
/// would be escaped, so the sequence is only ever the key and its value.)
fn without_null_usage(out: &mut BytesMut, mut event: &[u8]) {
    const KEY: &[u8] = b"\"usage\":null";
    while let Some(i) = memchr::memmem::find(event, KEY) {
        let (before, after) = (&event[..i], &event[i + KEY.len()..]);
        // The key goes with the comma that joins it to its neighbour.
        match (before.last(), after.first()) {
            (Some(b','), _) => {
                out.extend_from_slice(&before[..before.len() - 1]);
                event = after;
            }
            (_, Some(b',')) => {
                out.extend_from_slice(before);
                event = &after[1..];
            }
            _ => {
                out.extend_from_slice(&event[..i + KEY.len()]);
                event = after;
            }
        }
    }
    out.extend_from_slice(event);
}

/// Where the bytes waiting in `pending` start in the stream.
fn events_offset(events: &Events, pending: &BytesMut) -> u64 {
    events.offset() - pending.len() as u64
}

/// A kept value of a complete answer (or of Gemini's streamed array).
fn json_value(meter: &Meter, key: usize, v: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(v) else {
        return;
    };
    match key {
        0 => meter.usage_value(&v, meter.api != Api::Gemini),
        _ => meter.model_value(&v),
    }
}

/// One event of a stream, read for usage; whether it is the usage chunk tollgate asked
/// for (removed when `include_usage` was added).
fn sse_event(meter: &Meter, e: &Event) -> bool {
    let data = &e.data[..];
    if data.is_empty() || data == b"[DONE]" {
        return false;
    }
    match meter.api {
        Api::OpenAiChat | Api::OpenAiEmbeddings => {
            let has_usage = memchr::memmem::find(data, b"\"usage\"").is_some()
                && memchr::memmem::find(data, b"\"usage\":null").is_none();
            let need_model = !meter.knows_model();
            if !has_usage && !need_model {
                meter.update(|m| m.chunks += 1);
                return false;
            }
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
                return false;
            };
            if let Some(m) = v.get("model") {
                meter.model_value(m);
            }
            let usage = v.get("usage").filter(|u| u.is_object());
            match usage {
                Some(u) => {
                    meter.usage_value(u, true);
                    // The chunk `include_usage` adds carries no choice.
                    v.get("choices")
                        .and_then(|c| c.as_array())
                        .is_some_and(|c| c.is_empty())
                }
                None => {
                    meter.update(|m| m.chunks += 1);
                    false
                }
            }
        }
        Api::OpenAiResponses => {
            match &e.name[..] {
                b"response.output_text.delta" => meter.update(|m| m.chunks += 1),
                b"response.created"
                | b"response.completed"
                | b"response.incomplete"
                | b"response.failed" => {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data)
                        && let Some(r) = v.get("response")
                    {
                        if let Some(m) = r.get("model") {
                            meter.model_value(m);
                        }
                        if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
                            meter.usage_value(u, true);
                        }
                    }
                }
                _ => {}
            }
            false
        }
        Api::Anthropic => {
            match &e.name[..] {
                b"content_block_delta" => meter.update(|m| m.chunks += 1),
                b"message_start" => {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data)
                        && let Some(msg) = v.get("message")
                    {
                        if let Some(m) = msg.get("model") {
                            meter.model_value(m);
                        }
                        if let Some(u) = msg.get("usage") {
                            meter.usage_value(u, false);
                        }
                    }
                }
                b"message_delta" => {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data)
                        && let Some(u) = v.get("usage")
                    {
                        // The final output count (and, lately, the input again).
                        meter.usage_value(u, true);
                    }
                }
                _ => {}
            }
            false
        }
        Api::Gemini => {
            let mut scan = Scan::new(keys(Api::Gemini), CAP);
            scan.feed(data);
            let mut told = false;
            for (k, v) in scan.found.drain(..) {
                told |= k == 0;
                json_value(meter, k, &v);
            }
            if !told {
                meter.update(|m| m.chunks += 1);
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_null_usage_openai_adds_is_removed() {
        let strip = |e: &[u8]| {
            let mut out = bytes::BytesMut::new();
            super::without_null_usage(&mut out, e);
            String::from_utf8(out.to_vec()).unwrap()
        };
        assert_eq!(
            strip(br#"data: {"id":"x","choices":[],"usage":null}"#),
            r#"data: {"id":"x","choices":[]}"#
        );
        assert_eq!(
            strip(br#"data: {"usage":null,"id":"x"}"#),
            r#"data: {"id":"x"}"#
        );
        assert_eq!(
            strip(br#"data: {"c":"say "usage":null"}"#),
            r#"data: {"c":"say "usage":null"}"#,
            "escaped inside a string: kept"
        );
    }
}
