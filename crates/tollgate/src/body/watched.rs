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
    /// says so, so the last `None` may never be seen). The body inside is dropped
    /// first: the watches inside it have been told theirs (a nested wrapper's, the
    /// policy engine's end of the exchange, which settles its reservations).
    fn dropped(&mut self, _ended: bool) {}
}

pin_project_lite::pin_project! {
    /// `inner`, with `watch` told of what passes.
    pub struct Watched<B, W>
    where
        B: HttpBody,
        W: Watch,
    {
        // `None` only while the wrapper is dropped.
        #[pin]
        inner: Option<B>,
        watch: W,
    }

    impl<B, W> PinnedDrop for Watched<B, W>
    where
        B: HttpBody,
        W: Watch,
    {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            let ended = this.inner.as_ref().as_pin_ref().is_none_or(|b| b.is_end_stream());
            this.inner.set(None);
            this.watch.dropped(ended);
        }
    }
}

impl<B: HttpBody, W: Watch> Watched<B, W> {
    pub fn new(inner: B, watch: W) -> Self {
        Self {
            inner: Some(inner),
            watch,
        }
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
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(None);
        };
        let r = inner.poll_frame(cx);
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
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Notes its name when dropped.
    struct Note(&'static str, Arc<Mutex<Vec<&'static str>>>);

    impl Watch for Note {
        fn dropped(&mut self, ended: bool) {
            assert!(ended, "{}: an empty body has ended", self.0);
            self.1.lock().unwrap().push(self.0);
        }
    }

    #[test]
    fn a_wrapper_inside_is_told_of_the_drop_before_the_one_around_it() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let inner = Watched::new(crate::body::empty(), Note("inner", order.clone()));
        let outer = Watched::new(inner, Note("outer", order.clone()));
        assert!(outer.is_end_stream());
        drop(outer);
        assert_eq!(*order.lock().unwrap(), ["inner", "outer"]);
    }
}
