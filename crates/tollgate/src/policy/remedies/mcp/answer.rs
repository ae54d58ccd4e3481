//! An MCP call's answer as the `mcp` remedy watches it pass, unchanged: what the server
//! answered (a result, a tool error, a JSON-RPC error: crate::mcp::outcome) is written to
//! the call when the answer ends, for diagnosis, and a server's error is counted.

use super::tally::Tally;
use crate::body::{Body, Watched};
use crate::llm::sse::Events;
use crate::mcp::Call;
use crate::mcp::outcome::{self, Outcome, Scanner};
use bytes::Bytes;
use http::{Response, header};
use http_body_util::BodyExt;
use std::sync::Arc;

/// The longest SSE event read for its outcome (a longer one passes unread).
const EVENT_CAP: usize = 1 << 20;

/// Whether the answer is an event stream (`Some(true)`), one JSON message
/// (`Some(false)`), or neither (`None`: not read).
pub fn event_stream(resp: &Response<Body>) -> Option<bool> {
    let kind = resp.headers().get(header::CONTENT_TYPE)?.as_bytes();
    let kind = kind.trim_ascii_start();
    let starts = |p: &[u8]| kind.len() >= p.len() && kind[..p.len()].eq_ignore_ascii_case(p);
    if starts(b"text/event-stream") {
        Some(true)
    } else if starts(b"application/json") {
        Some(false)
    } else {
        None
    }
}

/// `resp`, watched for its outcome (a coded answer is not read).
pub fn watch(
    resp: Response<Body>,
    sse: bool,
    call: Arc<Call>,
    tally: Arc<Tally>,
) -> Response<Body> {
    if resp.headers().contains_key(header::CONTENT_ENCODING) {
        return resp;
    }
    let mode = match sse {
        true => Mode::Sse(Box::new(Events::new(EVENT_CAP)), Outcome::Unknown),
        false => Mode::Json(
            Scanner::default(),
            http_body::Body::size_hint(resp.body()).exact(),
        ),
    };
    resp.map(|b| {
        Watched::new(
            b,
            Answer {
                mode,
                call,
                tally,
                done: false,
            },
        )
        .boxed_unsync()
    })
}

enum Mode {
    /// One message, and its length when the answer says it (`Content-Length`): a first
    /// frame of that length is the whole message, read at once.
    Json(Scanner, Option<u64>),
    /// Events, and the outcome of the last response among them.
    Sse(Box<Events>, Outcome),
}

struct Answer {
    mode: Mode,
    call: Arc<Call>,
    tally: Arc<Tally>,
    done: bool,
}

impl Answer {
    fn finish(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let outcome = match &self.mode {
            Mode::Json(s, _) => s.outcome,
            Mode::Sse(_, o) => *o,
        };
        self.call.outcome.set(outcome);
        self.tally.error(&self.call, outcome);
    }
}

impl crate::body::Watch for Answer {
    fn data(&mut self, data: &Bytes) {
        match &mut self.mode {
            Mode::Json(s, whole) => match whole.take() {
                Some(n) if n == data.len() as u64 => s.whole(data),
                _ => s.feed(data),
            },
            Mode::Sse(events, last) => events.feed(data, |e| {
                let o = outcome::of_message(&e.data);
                if o != Outcome::Unknown {
                    *last = o;
                }
            }),
        }
    }

    fn end(&mut self, _complete: bool) {
        self.finish();
    }

    fn dropped(&mut self, _ended: bool) {
        self.finish();
    }
}
