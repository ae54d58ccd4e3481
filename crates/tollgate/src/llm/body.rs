//! The answer of an LLM call, relayed as it arrives while its usage is read: a complete
//! JSON answer through [`Scan`], a server-sent-event stream event by event, a compressed
//! answer through a decoder ([`super::decode`]) feeding either. Every byte goes on as it
//! came, in the frame it came in; the one exception is the usage chunk tollgate asked
//! OpenAI for (`include_usage: add`), which the client did not ask for and does not get:
//! then the stream is relayed an event at a time (an event longer than [`CAP`] passes as
//! it comes, unread).

use super::decode::{Decoder, Feed};
use super::meter::Meter;
use super::scan::Scan;
use super::sse::{Event, Events};
use super::{Api, Call};
use crate::body::{Body, BoxError};
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use memchr::memmem::Finder;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use tokio::time::Instant;

/// A kept value or event is at most this long (a usage object, a model's name, an
/// event's data): longer ones are not kept (a long `data:` line is scanned as it passes).
pub const CAP: usize = 1 << 20;

/// Reads an answer's plain bytes for usage, leaving them as they are.
struct Reader {
    kind: Plain,
    meter: Arc<Meter>,
    /// A plain JSON answer's `Content-Length`, until its first piece: a first piece that
    /// long is the whole answer, read in one pass ([`super::whole`]).
    whole: Option<u64>,
}

enum Plain {
    Json(Scan),
    Sse(Events),
}

impl Feed for Reader {
    fn feed(&mut self, data: &[u8]) {
        match &mut self.kind {
            Plain::Json(scan) => {
                if self.whole.take() == Some(data.len() as u64) {
                    let api = self.meter.api;
                    // The first usage object is read as the pass reaches it.
                    let mut usage = None;
                    let read = |v| {
                        if usage.is_some() {
                            return None;
                        }
                        let (r, n) = super::usage::Reported::parse_prefix(api, v)?;
                        usage = Some(r);
                        Some(n)
                    };
                    if let Some(found) = super::whole::read(api.answer_keys(), data, CAP, read) {
                        for (k, v, read) in found.iter() {
                            match read {
                                true => self.meter.reported(usage.take(), api.final_usage(None)),
                                false => json_value(&self.meter, k, v),
                            }
                        }
                        return;
                    }
                }
                scan.feed(data);
                for (k, v) in scan.found.drain(..) {
                    json_value(&self.meter, k, &v);
                }
            }
            Plain::Sse(events) => {
                let meter = &*self.meter;
                events.feed(data, |e| {
                    sse_event(meter, e);
                });
            }
        }
    }
}

enum Mode {
    /// Read as it passes.
    Plain(Reader),
    /// Decoded as it passes, and read (boxed: the decoders are large, and rare).
    Coded(Box<Decoder<Reader>>),
    /// `include_usage` was added: the usage chunk is removed, and bytes after the last
    /// whole event wait for the rest of it (at most [`CAP`] of them).
    Strip { events: Events, pending: BytesMut },
}

pin_project_lite::pin_project! {
    /// The answer's body, read as it passes.
    pub struct Metered {
        #[pin]
        inner: Body,
        mode: Mode,
        meter: Arc<Meter>,
        started: Instant,
        first: bool,
    }
}

/// The events of an answer of `api`, long `data:` lines scanned for its usage and model.
fn events(api: Api) -> Events {
    Events::new(CAP).scanning(Box::new(move |name| {
        Some(match api.nested_event(name) {
            true => Scan::nested(api.answer_keys(), CAP),
            false => Scan::new(api.answer_keys(), CAP),
        })
    }))
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
    // RFC 9110 §8.4: the codings applied, in order; `identity` is none.
    let coding = resp
        .headers()
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .collect::<Vec<_>>()
        .join(",");
    meter.update(|m| m.relayed = true);
    let length = resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let reader = |meter: &Arc<Meter>, whole: Option<u64>| Reader {
        kind: match sse {
            true => Plain::Sse(events(meter.api)),
            false => Plain::Json(Scan::new(meter.api.answer_keys(), CAP)),
        },
        meter: meter.clone(),
        whole,
    };
    let mode = if !coding.is_empty() {
        // A compressed stream cannot have the chunk tollgate asked for removed (tollgate
        // asks for `identity` when it adds `include_usage`; a provider may compress
        // anyway): it is relayed as it came, the chunk with it.
        // Its length is the coded one's.
        match Decoder::new(&coding, reader(&meter, None)) {
            Ok(d) => Mode::Coded(Box::new(d)),
            Err(_) => {
                tracing::debug!("an LLM answer in `{coding}`: its usage cannot be read");
                meter.update(|m| m.unread = true);
                return resp;
            }
        }
    } else if call.strip_usage && sse {
        Mode::Strip {
            events: events(meter.api),
            pending: BytesMut::new(),
        }
    } else {
        Mode::Plain(reader(&meter, length))
    };
    let (mut parts, body) = resp.into_parts();
    if matches!(mode, Mode::Strip { .. }) {
        // Its length changes when the usage chunk is removed.
        parts.headers.remove(http::header::CONTENT_LENGTH);
    }
    let body = Metered {
        inner: body,
        mode,
        meter,
        started: call.started,
        first: true,
    };
    http::Response::from_parts(parts, body.boxed_unsync())
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
                    if let Mode::Coded(decoder) = this.mode
                        && !decoder.failed()
                    {
                        decoder.finish();
                        if decoder.failed() {
                            this.meter.update(|m| m.unread = true);
                        }
                    }
                    // An answer that ended whole told its final usage (Gemini's last
                    // chunk repeats the whole count).
                    this.meter
                        .update(|m| m.whole |= m.reported.output.is_some());
                    if let Mode::Strip { pending, .. } = this.mode
                        && !pending.is_empty()
                    {
                        let rest = std::mem::take(pending).freeze();
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
            match this.mode {
                Mode::Plain(reader) => {
                    reader.feed(data);
                    return Poll::Ready(Some(Ok(frame)));
                }
                Mode::Coded(decoder) => {
                    if !decoder.failed() {
                        decoder.feed(data);
                        // A body at its length is not polled again (hyper stops once
                        // `is_end_stream` says so): the answer ends here.
                        if this.inner.is_end_stream() {
                            decoder.finish();
                        }
                        if decoder.failed() {
                            tracing::debug!(
                                "an LLM answer stopped decoding: its usage is estimated"
                            );
                            this.meter.update(|m| m.unread = true);
                        }
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Mode::Strip { events, pending } => {
                    let data = frame.into_data().unwrap_or_default();
                    let start = events_offset(events, pending);
                    pending.extend_from_slice(&data);
                    let mut out = BytesMut::new();
                    let mut kept = 0u64;
                    let meter = &*this.meter;
                    events.feed(&data, |e| {
                        let upto = (e.end - start) as usize;
                        if !sse_event(meter, e) {
                            without_null_usage(&mut out, &pending[kept as usize..upto]);
                        }
                        kept = upto as u64;
                    });
                    let _ = pending.split_to(kept as usize);
                    if pending.len() > CAP {
                        // An event longer than the cap passes as it comes (it is no usage
                        // chunk, which is small): what waits stays bounded.
                        out.extend_from_slice(&std::mem::take(pending));
                    }
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
            && !matches!(&self.mode, Mode::Strip { pending, .. } if !pending.is_empty())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.mode {
            Mode::Strip { .. } => SizeHint::default(),
            _ => self.inner.size_hint(),
        }
    }
}

/// `event` as the client would have had it without `include_usage`: OpenAI adds
/// `"usage":null` to every chunk then, which is removed. (Inside a JSON string its quotes
/// would be escaped, so the sequence is only ever the key and its value.)
fn without_null_usage(out: &mut BytesMut, mut event: &[u8]) {
    const KEY: &[u8] = b"\"usage\":null";
    static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(KEY));
    while let Some(i) = FINDER.find(event) {
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

/// A kept value of a complete answer (or of a Gemini chunk): its usage (key 0) or model.
pub fn json_value(meter: &Meter, key: usize, v: &[u8]) {
    match key {
        0 => meter.usage_json(v, meter.api.final_usage(None)),
        _ => meter.model_json(v),
    }
}

/// An event longer than [`CAP`]: what the scan of its long line found (its usage and
/// model), else it passed unread and the call is charged its estimate.
fn long_event(meter: &Meter, e: &Event) {
    if e.found.is_empty() {
        meter.update(|m| m.unread = true);
        return;
    }
    // Which events tell the final usage (not Gemini's chunks, Anthropic's
    // `message_start` or a Responses `response.created`): the API's to say.
    let whole = meter.api.final_usage(Some(&e.name));
    for (k, v) in &e.found {
        match k {
            0 => meter.usage_json(v, whole),
            _ => meter.model_json(v),
        }
    }
}

/// Counts a chat chunk that carries generated text (a token's worth, about): the role
/// chunk (`"content":""`) and the finish chunk (`"delta":{}`) carry none.
pub fn count_content(meter: &Meter, data: &[u8]) {
    if has_text(data) {
        meter.update(|m| m.chunks += 1);
    }
}

/// Whether a chunk holds a non-empty string under a key that carries generated text:
/// `content`, `text` (legacy completions), `arguments` (tool calls), `reasoning_content`,
/// `reasoning`, `refusal`. Read on the bytes: such a key inside a string would have its
/// quotes escaped.
fn has_text(data: &[u8]) -> bool {
    // Searchers built once: building one costs more than searching a chunk.
    static KEYS: LazyLock<[Finder<'static>; 6]> = LazyLock::new(|| {
        [
            &b"\"content\""[..],
            b"\"text\"",
            b"\"arguments\"",
            b"\"reasoning_content\"",
            b"\"reasoning\"",
            b"\"refusal\"",
        ]
        .map(Finder::new)
    });
    // OpenAI's own spelling (no whitespace), which nearly every chunk with text has: one
    // search, and the byte after the quote.
    static CONTENT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"content\":\""));
    if let Some(i) = CONTENT.find(data)
        && data
            .get(i + CONTENT.needle().len())
            .is_some_and(|&c| c != b'"')
    {
        return true;
    }
    // `find` from each position rather than `find_iter`, which copies the searcher.
    KEYS.iter().any(|k| {
        let mut at = 0;
        while let Some(i) = k.find(&data[at..]) {
            let i = at + i;
            let mut rest = data[i + k.needle().len()..]
                .iter()
                .skip_while(|c| c.is_ascii_whitespace());
            if rest.next() == Some(&b':')
                && rest.find(|c| !c.is_ascii_whitespace()) == Some(&b'"')
                && rest.next().is_some_and(|&c| c != b'"')
            {
                return true;
            }
            at = i + 1;
        }
        false
    })
}

/// One event of a stream, read for usage; whether it is the usage chunk tollgate asked
/// for (removed when `include_usage` was added).
fn sse_event(meter: &Meter, e: &Event) -> bool {
    let data = &e.data[..];
    if e.long {
        long_event(meter, e);
        return false;
    }
    if data.is_empty() || data == b"[DONE]" {
        return false;
    }
    meter.api.event(meter, e)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_chunks_with_text_are_counted() {
        let text = |e: &str| super::has_text(e.as_bytes());
        assert!(!text(
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#
        ));
        assert!(!text(
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#
        ));
        assert!(text(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#));
        assert!(text(r#"{"choices":[{"delta": {"content" : "Hi"}}]}"#));
        assert!(text(r#"{"choices":[{"text":"Hi","index":0}]}"#));
        assert!(text(
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\""}}]}}]}"#
        ));
        assert!(!text(r#"{"choices":[{"delta":{"content":null}}]}"#));
        // An empty one first, text after it: found past the first.
        assert!(text(r#"{"a":{"content":""},"b":{"content":"x"}}"#));
        assert!(!text(r#"{"content":""#));
    }

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
