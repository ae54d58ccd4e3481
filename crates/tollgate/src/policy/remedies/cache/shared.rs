//! The cache on the shared store (`store: shared` on a cache, with `store.backend: redis`):
//! every entry this replica stores is also written to Redis, under a key that hashes the
//! cache key (SHA-256: the caller's `Authorization` digest and any key header are in it,
//! none of them is readable in Redis), expiring when the entry can no longer be served or
//! revalidated (`SET … PX`). A replica that misses in its own memory reads Redis before it
//! calls the provider, so an answer one replica fetched serves every replica; a 304 that
//! refreshes an entry refreshes it for all of them.
//!
//! What Redis holds is a small binary record (a version tag, the status, the times, the
//! head, the `Vary` values, the body, and an LLM answer's model, usage and cost), read
//! back with every length checked: a value
//! that is not one (another program's, a truncated one) is a miss, counted. Entries that
//! carry a secret (a `Set-Cookie`, or a response that varies on `Authorization` or
//! `Cookie`, whose values the record would hold) stay in this replica's memory only.
//! Redis slow or down is the store's `on_error` path: no answer within `store.timeout`,
//! a miss; nothing waits and nothing fails ([`crate::policy::store::fallback`]).

use super::budget::Budget;
use super::replay::{MAX_MARKS, Mark, Pace};
use super::store::{CacheStore, Claim, Entry, Flight, MemoryCache, Purged, Saved};
use crate::policy::clock;
use crate::policy::store::{Key, Store, StoreFuture};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often a replica waiting for another's fetch looks for the entry.
const POLL: Duration = Duration::from_millis(10);

/// The record's first bytes: a value without them is not one of ours.
const TAG: &[u8; 4] = b"TGC1";

/// Request headers whose values a stored `Vary` would keep: entries varying on them are
/// not shared.
const SECRET_VARY: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
];

pub struct SharedCache {
    local: MemoryCache,
    /// How long a replica waits for another's fetch of a key before fetching itself; the
    /// fetching replica's lease on the key lasts as long.
    max_wait: Duration,
    store: Arc<dyn Store>,
    /// `cache:POLICY:`, before each entry's hash.
    prefix: String,
    /// The largest record this cache writes: its largest entry and head.
    max_record: u64,
    /// Values on Redis that were not a record (`tollgate_cache_shared_corrupt_total`).
    corrupt: Counter,
    /// The bytes of entries Redis may hold (`shared_max_size`).
    budget: Budget,
    writes: Writes,
    /// When the cache was last purged (unix ms; 0: never), as this replica last read it: part of every entry's hash, so a purge leaves the entries
    /// before it unreachable (they expire on Redis as they would have).
    generation: AtomicU64,
    /// `PREFIX:{cache:POLICY}:purged:0`, the last purge's time.
    purged: Key,
}

/// `tollgate_cache_shared_writes_total{name,result}`: what became of each entry this
/// replica stored, as far as the shared store goes.
pub struct Writes {
    /// Sent to the shared store.
    pub written: Counter,
    /// Kept in memory only: the cache's bytes on Redis would pass `shared_max_size`.
    pub over_budget: Counter,
    /// Kept in memory only: it holds a caller's secret (`Set-Cookie`, `Vary` on a
    /// credential).
    pub private: Counter,
}

/// How a shared cache is bounded: its largest entry, how long a replica waits for
/// another's fetch, and the budget of bytes on Redis with the longest an entry lives.
pub struct Bounds {
    pub max_entry: usize,
    pub max_wait: Duration,
    pub max_bytes: u64,
    pub longest_ms: u64,
}

impl SharedCache {
    pub fn new(
        local: MemoryCache,
        store: Arc<dyn Store>,
        policy: &str,
        bounds: Bounds,
        (corrupt, writes): (Counter, Writes),
    ) -> Self {
        let resource: Arc<str> = format!("cache:{policy}").into();
        Self {
            local,
            generation: AtomicU64::new(0),
            purged: Key::new(&resource, &Arc::from("purged"), 0),
            max_wait: bounds.max_wait,
            budget: Budget::new(store.clone(), policy, bounds.longest_ms, bounds.max_bytes),
            store,
            prefix: format!("cache:{policy}:"),
            // Heads are bounded by hyper's limits (100 fields of at most 64 KiB each,
            // far above what providers send); 1 MiB covers them.
            max_record: bounds.max_entry as u64 + (1 << 20),
            corrupt,
            writes,
        }
    }

    /// The entry's key on the store: its own hash as the Cluster hash tag, so a cache's
    /// entries spread over the slots.
    fn key(&self, key: &str) -> Key {
        self.key_of(key, "entry")
    }

    /// `part` of the entry's keys (`entry`, `fetching`), in the entry's hash tag: a hash
    /// of the cache key and the cache's generation (the last purge).
    fn key_of(&self, key: &str, part: &str) -> Key {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(&self.generation.load(Ordering::Relaxed).to_le_bytes());
        ctx.update(key.as_bytes());
        let digest = ctx.finish();
        let mut resource = String::with_capacity(self.prefix.len() + 64);
        resource.push_str(&self.prefix);
        for b in digest.as_ref() {
            resource.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
            resource.push(char::from(b"0123456789abcdef"[(b & 0xf) as usize]));
        }
        let resource: Arc<str> = resource.into();
        Key::new(&resource, &Arc::from(part), 0)
    }

    /// The entry on the store, fresh enough to keep, kept in this replica's memory too;
    /// `None` when there is none (or Redis cannot say). A value that is not an entry is
    /// counted where `count_corrupt` (a request's first look, not its claim's looks
    /// again: one count per request that met it).
    async fn read(&self, k: &Key, key: &str, count_corrupt: bool) -> Option<Arc<Entry>> {
        let Ok(Some(value)) = self.store.value(k, self.max_record).await else {
            return None;
        };
        let Some(entry) = decode(&value) else {
            if count_corrupt {
                self.corrupt.inc();
            }
            return None;
        };
        if entry.keep_until_ms <= clock::now_ms() {
            return None;
        }
        let entry = Arc::new(entry);
        // This replica's copy: its next hits do not ask Redis.
        self.local.insert(key.to_owned(), entry.clone());
        Some(entry)
    }
}

impl CacheStore for SharedCache {
    fn get(&self, key: &str) -> StoreFuture<'_, Option<(Arc<Entry>, bool)>> {
        if let Some(e) = self.local.entry(key) {
            return StoreFuture::ready(Ok(Some((e, false))));
        }
        let k = self.key(key);
        let key = key.to_owned();
        StoreFuture::Pending(Box::pin(async move {
            Ok(self.read(&k, &key, true).await.map(|e| (e, true)))
        }))
    }

    /// Single flight across replicas: a lease on the key's `fetching` (one holder, ending
    /// after `max_wait`). Without it, another replica is fetching: wait for its entry,
    /// looking every 10 ms, until it is there (found), or the lease is given back or
    /// ended without one (its answer could not be stored, or the replica died): then
    /// race for the lease again. Past `max_wait`, fetch regardless. So N replicas asked
    /// for one missing key at once make one call when the first stores its answer, and
    /// at most one each otherwise. Redis away: the store's `on_error` lease, a fetch here.
    fn claim(&self, key: &str) -> StoreFuture<'_, Claim> {
        let lock = self.key_of(key, "fetching");
        let entry = self.key(key);
        let key = key.to_owned();
        StoreFuture::Pending(Box::pin(async move {
            let ttl = self.max_wait.as_millis() as u64;
            let deadline = tokio::time::Instant::now() + self.max_wait;
            // The lease, or the entry of whoever holds it; when a holder gives it back
            // without an entry (or dies and it ends), the waiters race for it again, so
            // one of them fetches and the others wait for that one's entry.
            loop {
                match self.store.lease(&lock, 1, ttl).await {
                    Ok(Some(id)) => {
                        let flight = Flight {
                            store: self.store.clone(),
                            key: lock,
                            id,
                        };
                        // A holder stores its entry before it gives the lease back, but
                        // the entry may have come between this replica's last look and
                        // the lease it just took (the holder stored it and let go in
                        // between): looked for once more, now that no one else can be
                        // fetching, so that it is not fetched twice. Found, it comes
                        // with the lease, which the request keeps if the entry does not
                        // serve it (stale, or stored for other values of `Vary`).
                        return Ok(match self.read(&entry, &key, false).await {
                            Some(e) => Claim::Found(e, Some(flight)),
                            None => Claim::Fetch(Some(flight)),
                        });
                    }
                    Ok(None) => {}
                    Err(_) => return Ok(Claim::Fetch(None)),
                }
                loop {
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(Claim::Fetch(None));
                    }
                    tokio::time::sleep(POLL).await;
                    if let Some(e) = self.read(&entry, &key, false).await {
                        return Ok(Claim::Found(e, None));
                    }
                    if self.store.leased(&lock).await.unwrap_or(0) == 0 {
                        break;
                    }
                }
            }
        }))
    }

    fn put(&self, key: String, entry: Arc<Entry>) -> StoreFuture<'_, ()> {
        let shared = shareable(&entry).then(|| (self.key(&key), encode(&entry)));
        if shared.is_none() {
            self.writes.private.inc();
        }
        let ttl = entry.keep_until_ms.saturating_sub(clock::now_ms());
        self.local.insert(key, entry);
        match shared {
            Some((k, record)) if ttl > 0 => StoreFuture::Pending(Box::pin(async move {
                if !self.budget.admit(record.len() as u64).await {
                    self.writes.over_budget.inc();
                    return Ok(());
                }
                self.writes.written.inc();
                // A failure is the store's to count; the entry is in memory regardless.
                let _ = self.store.set_value(&k, record, ttl).await;
                Ok(())
            })),
            _ => StoreFuture::ready(Ok(())),
        }
    }

    /// Marks the purge's time on Redis, which every replica adopts as the generation its
    /// entries are hashed with. The mark only rises and never expires (one key per
    /// purged cache): a generation that went back could reach entries from before it.
    /// With Redis away the purge drops this replica's memory only, and says so.
    fn purge(&self) -> StoreFuture<'_, Purged> {
        StoreFuture::Pending(Box::pin(async move {
            let mark = self.store.raise(&self.purged, clock::now_ms(), 0).await;
            // The store answers from memory when Redis does not: such a mark is this
            // replica's alone, so it is not adopted.
            let reached = mark.is_ok() && self.store.describe()["answering"] != false;
            if let (Ok(mark), true) = (mark, reached) {
                self.generation.fetch_max(mark, Ordering::Relaxed);
            }
            Ok(Purged {
                entries: self.local.clear(),
                shared: Some(reached),
            })
        }))
    }

    fn follow(&self) -> StoreFuture<'_, bool> {
        StoreFuture::Pending(Box::pin(async move {
            let Ok(mark) = self.store.deadline(&self.purged).await else {
                return Ok(false);
            };
            if self.generation.fetch_max(mark, Ordering::Relaxed) >= mark {
                return Ok(false);
            }
            self.local.clear();
            Ok(true)
        }))
    }

    fn shared_bytes(&self) -> StoreFuture<'_, Option<(u64, u64)>> {
        StoreFuture::Pending(Box::pin(async move {
            Ok(self.budget.held().await.map(|b| (b, self.budget.max())))
        }))
    }

    fn size(&self) -> (u64, u64) {
        self.local.size()
    }

    fn shared(&self) -> bool {
        true
    }
}

/// Whether `e` may go to the shared store: nothing in it is a caller's secret.
fn shareable(e: &Entry) -> bool {
    !e.headers.contains_key(header::SET_COOKIE)
        && !e.vary.iter().any(|(n, _)| SECRET_VARY.contains(n))
}

fn encode(e: &Entry) -> Vec<u8> {
    let head: usize = e
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 6)
        .sum();
    let mut out = Vec::with_capacity(64 + head + e.body.len());
    out.extend_from_slice(TAG);
    out.extend_from_slice(&e.status.as_u16().to_le_bytes());
    for n in [
        e.stored_ms,
        e.fresh_until_ms,
        e.keep_until_ms,
        u64::from(e.initial_age),
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&(e.headers.len() as u32).to_le_bytes());
    for (n, v) in &e.headers {
        bytes(&mut out, n.as_str().as_bytes());
        bytes(&mut out, v.as_bytes());
    }
    out.extend_from_slice(&(e.vary.len() as u32).to_le_bytes());
    for (n, v) in &e.vary {
        bytes(&mut out, n.as_str().as_bytes());
        match v {
            Some(v) => {
                out.push(1);
                bytes(&mut out, v.as_bytes());
            }
            None => out.push(0),
        }
    }
    bytes(&mut out, &e.body);
    match &e.llm {
        Some(l) => {
            out.push(1);
            bytes(&mut out, l.model.as_bytes());
            for n in [l.input, l.output, l.cost_nanos] {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        None => out.push(0),
    }
    let marks: &[Mark] = e.pace.as_deref().map_or(&[], |p| &p.0);
    match &e.pace {
        Some(_) => out.push(1),
        None => out.push(0),
    }
    out.extend_from_slice(&(marks.len() as u32).to_le_bytes());
    for m in marks {
        out.extend_from_slice(&m.end.to_le_bytes());
        out.extend_from_slice(&m.at_ms.to_le_bytes());
    }
    out
}

/// A length (u32, little-endian) and the bytes.
fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The record read back, `None` unless every part of it is one.
fn decode(v: &[u8]) -> Option<Entry> {
    let mut r = Reader(v);
    if r.take(4)? != TAG {
        return None;
    }
    let status = StatusCode::from_u16(u16::from_le_bytes(r.take(2)?.try_into().ok()?)).ok()?;
    let stored_ms = r.u64()?;
    let fresh_until_ms = r.u64()?;
    let keep_until_ms = r.u64()?;
    let initial_age = u32::try_from(r.u64()?).ok()?;
    let fields = r.u32()? as usize;
    // Each field takes at least 8 bytes: a count past what is left is not a record.
    if fields > r.0.len() / 8 {
        return None;
    }
    // Room for what a hit adds (as a stored head keeps: see `HIT_ADDS`).
    let mut headers = HeaderMap::with_capacity(fields + super::HIT_ADDS);
    for _ in 0..fields {
        let n = HeaderName::from_bytes(r.bytes()?).ok()?;
        let v = HeaderValue::from_bytes(r.bytes()?).ok()?;
        headers.append(n, v);
    }
    let varied = r.u32()? as usize;
    if varied > r.0.len() / 5 {
        return None;
    }
    let mut vary = Vec::with_capacity(varied);
    for _ in 0..varied {
        let n = HeaderName::from_bytes(r.bytes()?).ok()?;
        let v = match r.take(1)?[0] {
            0 => None,
            1 => Some(HeaderValue::from_bytes(r.bytes()?).ok()?),
            _ => return None,
        };
        vary.push((n, v));
    }
    let body = Bytes::copy_from_slice(r.bytes()?);
    let llm = match r.take(1)?[0] {
        0 => None,
        1 => Some(Box::new(Saved {
            model: std::str::from_utf8(r.bytes()?).ok()?.into(),
            input: r.u64()?,
            output: r.u64()?,
            cost_nanos: r.u64()?,
        })),
        _ => return None,
    };
    let paced = match r.take(1)?[0] {
        0 => false,
        1 => true,
        _ => return None,
    };
    let marks = r.u32()? as usize;
    if marks > r.0.len() / 8 || marks > MAX_MARKS || (!paced && marks > 0) {
        return None;
    }
    let mut pace = Vec::with_capacity(marks);
    for _ in 0..marks {
        pace.push(Mark {
            end: r.u32()?,
            at_ms: r.u32()?,
        });
    }
    if !r.0.is_empty() {
        return None;
    }
    Some(Entry {
        status,
        headers,
        body,
        stored_ms,
        fresh_until_ms,
        keep_until_ms,
        initial_age,
        vary: vary.into_boxed_slice(),
        llm,
        pace: paced.then(|| Arc::new(Pace(pace.into()))),
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.append("x-multi", HeaderValue::from_static("a"));
        headers.append("x-multi", HeaderValue::from_static("b"));
        headers.insert(header::ETAG, HeaderValue::from_static("\"v1\""));
        Entry {
            status: StatusCode::CREATED,
            headers,
            body: Bytes::from_static(b"{\"ok\":true}"),
            stored_ms: 1,
            fresh_until_ms: 2,
            keep_until_ms: 3,
            initial_age: 4,
            vary: vec![
                (
                    header::ACCEPT,
                    Some(HeaderValue::from_static("application/json")),
                ),
                (HeaderName::from_static("x-tenant"), None),
            ]
            .into(),
            llm: Some(Box::new(Saved {
                model: "gpt-4o-mini-2025-01-01".into(),
                input: 12,
                output: 7,
                cost_nanos: 6_000,
            })),
            pace: Some(Arc::new(Pace(
                vec![
                    Mark { end: 4, at_ms: 0 },
                    Mark {
                        end: 11,
                        at_ms: 120,
                    },
                ]
                .into(),
            ))),
        }
    }

    #[test]
    fn a_record_reads_back_as_the_entry_it_was() {
        let e = entry();
        let d = decode(&encode(&e)).unwrap();
        assert_eq!(d.status, e.status);
        assert_eq!(d.headers, e.headers);
        let order = |h: &HeaderMap| {
            h.iter()
                .map(|(n, v)| format!("{n}:{v:?}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&d.headers), order(&e.headers));
        assert_eq!(d.body, e.body);
        assert_eq!(
            (
                d.stored_ms,
                d.fresh_until_ms,
                d.keep_until_ms,
                d.initial_age
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(d.vary, e.vary);
        assert_eq!(d.llm, e.llm);
        assert_eq!(d.pace, e.pace);
        let plain = Entry {
            llm: None,
            pace: None,
            ..entry()
        };
        let d = decode(&encode(&plain)).unwrap();
        assert_eq!((d.llm, d.pace), (None, None));
    }

    #[test]
    fn what_is_not_a_whole_record_is_none() {
        let record = encode(&entry());
        for cut in 0..record.len() {
            assert!(decode(&record[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        assert!(decode(b"{\"not\":\"ours\"}").is_none());
        // A count of fields far past the bytes there are.
        let mut huge = record[..4 + 2 + 32].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_none());
        // A header name that is not one.
        let mut bad = record.clone();
        let at = 4 + 2 + 32 + 4 + 4;
        bad[at] = b' ';
        assert!(decode(&bad).is_none());
    }

    #[test]
    fn entries_that_hold_a_secret_are_not_shared() {
        assert!(shareable(&entry()));
        let mut e = entry();
        e.headers
            .insert(header::SET_COOKIE, HeaderValue::from_static("s=1"));
        assert!(!shareable(&e));
        let mut e = entry();
        e.vary = vec![(
            header::AUTHORIZATION,
            Some(HeaderValue::from_static("Bearer x")),
        )]
        .into();
        assert!(!shareable(&e));
    }
}
