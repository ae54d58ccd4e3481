//! One body wrapper for everything that watches a body pass without changing it: a
//! [`Watch`] is told of each data frame, of the end (complete or failed) and of the drop,
//! and may end the body early with an error (a deadline). The HAR tap, the response
//! observer, the cache's tee and the policy engine's end hooks are each a `Watch`.

use super::BoxError;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// What a [`Watched`] body tells as its frames pass. Every method does nothing by default.
pub trait Watch {
    /// Before each poll: `Some` ends the body with that error (a deadline passed).
    fn interrupt(&mut self, _cx: &mut Context<'_>) -> Option<BoxError> {
        None
    }

    /// A data frame passed.
    fn data(&mut self, _data: &Bytes) {}

    /// The body ended: `complete` after its last frame, not after an error.
    fn end(&mut self, _complete: bool) {}

    /// The wrapper is dropped (the body ended, or the client went away); `ended` says
    /// whether the body had reached its end (hyper stops polling once `is_end_stream`
    /// says so, so the last `None` may never be seen).
    fn dropped(&mut self, _ended: bool) {}
}

pin_project_lite::pin_project! {
    /// `inner`, with `watch` told of what passes.
    pub struct Watched<B, W>
    where
        B: HttpBody,
        W: Watch,
    {
        #[pin]
        inner: B,
        watch: W,
    }

    impl<B, W> PinnedDrop for Watched<B, W>
    where
        B: HttpBody,
        W: Watch,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            this.watch.dropped(this.inner.is_end_stream());
        }
    }
}

impl<B: HttpBody, W: Watch> Watched<B, W> {
    pub fn new(inner: B, watch: W) -> Self {
        Self { inner, watch }
    }
}

impl<B, W> HttpBody for Watched<B, W>
where
    B: HttpBody<Data = Bytes, Error = BoxError>,
    W: Watch,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(e) = this.watch.interrupt(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        let r = this.inner.poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.watch.data(d);
                }
            }
            Poll::Ready(None) => this.watch.end(true),
            Poll::Ready(Some(Err(_))) => this.watch.end(false),
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
