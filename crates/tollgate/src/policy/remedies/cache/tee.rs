//! The body of a response being cached: streamed to the client frame by frame as it
//! arrives (the first byte is never delayed) while a copy is kept, up to the entry cap;
//! stored when the body has ended complete.

use super::Cache;
use super::store::Entry;
use crate::body::{Body, Watch, Watched};
use crate::policy::clock;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use std::sync::Arc;
use std::time::Duration;

pub struct Storing {
    pub cache: Arc<Cache>,
    pub key: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub ttl: Duration,
    pub keep: Duration,
    pub initial_age: u32,
    pub vary: Vec<(http::HeaderName, Option<http::HeaderValue>)>,
    pub fill: Option<super::Fill>,
    /// An LLM call's meter: read when the body ends, for what the entry's hits save.
    pub llm: Option<Arc<crate::llm::Meter>>,
    /// With `replay: paced`: the frames' ends and times, noted as they pass.
    pub pace: Option<super::replay::Marks>,
}

/// Watches a response body being cached: keeps a copy up to the cap, stores it when the
/// body has ended complete.
pub struct Keep {
    copy: BytesMut,
    cap: usize,
    storing: Option<Storing>,
}

/// The response body being cached.
pub type Tee = Watched<Body, Keep>;

/// `inner`, copied up to `cap` bytes and stored when it ends complete.
pub fn tee(inner: Body, cap: usize, storing: Storing) -> Tee {
    Watched::new(
        inner,
        Keep {
            copy: BytesMut::new(),
            cap,
            storing: Some(storing),
        },
    )
}

impl Watch for Keep {
    fn data(&mut self, d: &Bytes) {
        if let Some(s) = &mut self.storing {
            if self.copy.len() + d.len() > self.cap {
                // Too big to store: stream on, let the waiters go.
                self.storing.take();
                self.copy = BytesMut::new();
            } else {
                self.copy.extend_from_slice(d);
                if let Some(p) = &mut s.pace {
                    p.frame(self.copy.len());
                }
            }
        }
    }

    fn end(&mut self, complete: bool) {
        match self.storing.take() {
            Some(s) if complete => store(s, std::mem::take(&mut self.copy).freeze()),
            _ => {}
        }
    }

    fn dropped(&mut self, ended: bool) {
        // hyper stops polling once `is_end_stream` says so: a body that ended without a
        // final `None` poll is stored here.
        if ended && let Some(s) = self.storing.take() {
            store(s, std::mem::take(&mut self.copy).freeze());
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
        vary: s.vary.into_boxed_slice(),
        llm: s.llm.as_deref().and_then(super::store::Saved::of),
        pace: s.pace.map(|m| Arc::new(m.done())),
    });
    let cache = s.cache;
    let fill = s.fill;
    let key = s.key;
    tokio::spawn(async move {
        cache.actions.inc(super::Action::Stored);
        let slot = cache.generations.slot(&key);
        let _ = cache.store.put(key, entry).await;
        cache.generations.stored(slot);
        let (entries, bytes) = cache.store.size();
        cache.entries.set(entries as i64);
        cache.bytes.set(bytes as i64);
        // The waiters look again only now that the entry is there.
        drop(fill);
    });
}
