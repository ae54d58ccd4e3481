//! `Expect: 100-continue` (RFC 9110 §10.1.1) relayed end to end: the client's body is
//! held back until the provider says `100 Continue`, so the client never uploads a body
//! the provider was about to refuse on its headers alone.
//!
//! hyper's server sends the client `100 Continue` the first time the request body is
//! polled, so the body is not polled until the gate opens: on the provider's `100`
//! (hyper's informational callback), or after `upstream.expect_continue_timeout` for a
//! provider that never sends one (RFC 9110 lets a client wait only so long). When the
//! provider's final answer comes first, the gate refuses: the body is never read, the
//! client never gets a `100`, and the upstream connection is closed rather than reused.

use crate::body::{Body, BoxError};
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{HeaderMap, Request, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

const WAITING: u8 = 0;
const GO: u8 = 1;
const REFUSED: u8 = 2;

/// Whether the request asks for `100-continue` (the only expectation defined).
pub fn expects_continue(h: &HeaderMap) -> bool {
    h.get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Shared between the body, hyper's informational callback and the pipeline.
#[derive(Default)]
pub struct Gate {
    state: AtomicU8,
    waker: AtomicWaker,
}

impl Gate {
    fn set(&self, to: u8) {
        if self
            .state
            .compare_exchange(WAITING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.waker.wake();
        }
    }

    /// The provider's final response head arrived: a body not yet released never will be.
    pub fn final_response(&self) {
        self.set(REFUSED);
    }
}

/// Puts the gate on a request: the body waits for the provider's `100 Continue`.
/// Returns the gate, for the pipeline to close when the final answer comes first.
pub fn hold_body(req: &mut Request<Body>, timeout: Duration) -> Arc<Gate> {
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    hyper::ext::on_informational(req, move |res| {
        if res.status() == http::StatusCode::CONTINUE {
            g.set(GO);
        }
    });
    let body = std::mem::replace(req.body_mut(), crate::body::empty());
    *req.body_mut() = Held {
        inner: body,
        gate: gate.clone(),
        timer: Box::pin(tokio::time::sleep(timeout)),
    }
    .boxed_unsync();
    gate
}

struct Held {
    inner: Body,
    gate: Arc<Gate>,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        this.gate.waker.register(cx.waker());
        if this.gate.state.load(Ordering::Acquire) == WAITING
            && this.timer.as_mut().poll(cx).is_ready()
        {
            this.gate.set(GO);
        }
        match this.gate.state.load(Ordering::Acquire) {
            WAITING => Poll::Pending,
            GO => Pin::new(&mut this.inner).poll_frame(cx),
            _ => Poll::Ready(Some(Err(
                "the provider answered before asking for the body; the body is not sent".into(),
            ))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
