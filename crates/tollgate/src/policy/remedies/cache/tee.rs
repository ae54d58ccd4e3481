//! The body of a response being cached: streamed to the client frame by frame as it
//! arrives (the first byte is never delayed) while a copy is kept, up to the entry cap;
//! stored when the body has ended complete.

use super::Cache;
use super::store::Entry;
use crate::body::{Body, BoxError};
use crate::policy::clock;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

pub struct Storing {
    pub cache: Arc<Cache>,
    pub key: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub ttl: Duration,
    pub keep: Duration,
    pub initial_age: u64,
    pub vary: Vec<(http::HeaderName, Option<http::HeaderValue>)>,
    pub fill: Option<super::Fill>,
}

pin_project_lite::pin_project! {
    pub struct Tee {
        #[pin]
        inner: Body,
        copy: BytesMut,
        cap: usize,
        storing: Option<Storing>,
    }

    impl PinnedDrop for Tee {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // hyper stops polling once `is_end_stream` says so: a body that ended without
            // a final `None` poll is stored here.
            if this.inner.is_end_stream()
                && let Some(s) = this.storing.take()
            {
                store(s, std::mem::take(this.copy).freeze());
            }
        }
    }
}

impl Tee {
    pub fn new(inner: Body, cap: usize, storing: Storing) -> Self {
        Self {
            inner,
            copy: BytesMut::new(),
            cap,
            storing: Some(storing),
        }
    }
}

fn store(s: Storing, body: Bytes) {
    let now = clock::now_ms();
    let entry = Arc::new(Entry {
        status: s.status,
        headers: s.headers,
        body,
        stored_ms: now,
        fresh_until_ms: now + s.ttl.as_millis() as u64,
        keep_until_ms: now + s.keep.max(s.ttl).as_millis() as u64,
        initial_age: s.initial_age,
        vary: s.vary,
    });
    let cache = s.cache;
    let fill = s.fill;
    let key = s.key;
    tokio::spawn(async move {
        cache.actions.inc(super::Action::Stored);
        let _ = cache.store.put(key, entry).await;
        let (entries, bytes) = cache.store.size();
        cache.entries.set(entries as i64);
        cache.bytes.set(bytes as i64);
        // The waiters look again only now that the entry is there.
        drop(fill);
    });
}

impl HttpBody for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let r = this.inner.poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(frame))) => {
                if this.storing.is_some()
                    && let Some(d) = frame.data_ref()
                {
                    if this.copy.len() + d.len() > *this.cap {
                        // Too big to store: stream on, let the waiters go.
                        this.storing.take();
                        *this.copy = BytesMut::new();
                    } else {
                        this.copy.extend_from_slice(d);
                    }
                }
            }
            Poll::Ready(None) => {
                if let Some(s) = this.storing.take() {
                    store(s, std::mem::take(this.copy).freeze());
                }
            }
            Poll::Ready(Some(Err(_))) => {
                this.storing.take();
            }
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
