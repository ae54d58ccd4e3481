//! A data-plane worker's copies of the cache entries it serves, and its marks of the keys
//! the cache passes, so that a hit, or a miss of a key whose responses cannot be stored,
//! writes no cache line another worker writes. Through the shared store they do: moka's
//! lookup records the read in structures every worker shares, and a hit's entry, body
//! and header values have reference counts that every core serving it bumps and drops.
//! A copy here is the entry's bytes copied once, into allocations of this worker's, at
//! the second hit on the worker that went to the store (a key hit once costs no copy).
//!
//! A copy or a mark is used only while it says what the shared store would: every store
//! of a key moves its slot's generation ([`Generations`]), and a copy or mark whose
//! generation moved is looked up again first (a `Vary` variant replaced it, it was
//! revalidated or stored anew). At least every `touch` (a second, or half the cache's
//! `ttl` when shorter) it is looked up anyway, which keeps the store's least recently
//! used order and the pass list's idle time as the requests left them, and drops the
//! copy of an entry the store evicted. A worker's copies hold at most `max_size / 16`
//! bytes; past that, its copies start over from the store.

use super::store::Entry;
use crate::headers::{X_TOLLGATE_CACHE, X_TOLLGATE_REQUEST_ID};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

/// How often a copy or mark is looked up in the shared store regardless, at most.
const TOUCH_MS: u64 = 1000;
/// The slots keys' generations (and fills, `super::Cache`) are spread over.
pub const SLOTS: usize = 64;

/// Per slot of keys, how many stores there have been: written on a store, read on each
/// hit (a line every core can keep, since it changes only when an entry is stored).
pub struct Generations {
    slots: Box<[Slot]>,
    hasher: rustc_hash::FxBuildHasher,
}

#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

impl Default for Generations {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            hasher: rustc_hash::FxBuildHasher,
        }
    }
}

impl Generations {
    /// The slot of `key`. Which slot a key falls in decides only how many copies a store
    /// makes look again: a client choosing keys that collide costs lookups, not
    /// correctness.
    pub fn slot(&self, key: &str) -> usize {
        self.hasher.hash_one(key) as usize % SLOTS
    }

    pub fn of(&self, key: &str) -> u64 {
        self.slots[self.slot(key)].0.load(Ordering::Acquire)
    }

    /// After a purge: every worker's copies look again (and find nothing).
    pub fn all_stored(&self) {
        for s in &self.slots {
            s.0.fetch_add(1, Ordering::Release);
        }
    }

    /// After a key of `slot` was stored (not before: a copy checked in between would be
    /// confirmed at the new generation against the entry being replaced).
    pub fn stored(&self, slot: usize) {
        self.slots[slot].0.fetch_add(1, Ordering::Release);
    }
}

/// One worker's copies and marks; its lock, taken by each of the worker's hits, on lines
/// of its own.
#[repr(align(128))]
pub struct Front {
    copies: Mutex<Copies>,
    max_bytes: u64,
    touch_ms: u64,
}

#[derive(Default)]
struct Copies {
    /// Hashed with a seed of this table's own (hashbrown's foldhash): keys carry
    /// client-chosen URLs, and a client that cannot know the seed cannot choose keys that
    /// collide. (SipHash, std's keyed hasher, cost each look 130 instructions more
    /// for the same property; the table is also capped, by `max_bytes`.)
    map: hashbrown::HashMap<String, Held>,
    bytes: u64,
}

struct Held {
    what: What,
    generation: u64,
    touched_ms: u64,
    weight: u64,
}

enum What {
    Copy {
        entry: Entry,
        /// The shared entry it was copied from (identity only: it does not keep it
        /// alive).
        source: Weak<Entry>,
    },
    /// The store held no entry and the pass list held the key.
    Pass,
    /// Served once from the store: the next hit copies it.
    Seen,
}

/// What a look at the front found.
pub enum Found {
    /// Served from the copy (the closure's answer).
    Served(http::Response<crate::body::Body>),
    /// The key is passed: no entry to look up, no fetch to wait for.
    Pass,
    /// A copy that must be checked against the store first: its source's address, to
    /// compare with [`same`] (not a clone of the `Weak`: that would write the shared
    /// entry's count).
    Check(usize),
    Nothing,
}

impl Front {
    pub fn new(max_size: u64, ttl: std::time::Duration) -> Self {
        Self {
            copies: Mutex::default(),
            max_bytes: max_size / 16,
            touch_ms: TOUCH_MS.min(ttl.as_millis() as u64 / 2),
        }
    }

    /// Serves `key` from its copy with `serve` when the copy is fresh at `now` and
    /// `accepts` it, or says that the key is passed; either only while the key's
    /// `generation` has not moved and it was looked up in the store within `touch`.
    pub fn serve(
        &self,
        key: &str,
        generation: u64,
        now: u64,
        accepts: impl FnOnce(&Entry) -> bool,
        serve: impl FnOnce(&Entry) -> http::Response<crate::body::Body>,
    ) -> Found {
        let copies = self.copies.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = copies.map.get(key) else {
            return Found::Nothing;
        };
        let current =
            h.generation == generation && now.saturating_sub(h.touched_ms) < self.touch_ms;
        match &h.what {
            What::Copy { source, .. } if !current => Found::Check(source.as_ptr() as usize),
            What::Copy { entry, .. } if entry.fresh_until_ms > now && accepts(entry) => {
                Found::Served(serve(entry))
            }
            What::Pass if current => Found::Pass,
            _ => Found::Nothing,
        }
    }

    /// After a check: the store still holds the copy's source (looked up at `generation`
    /// and `now`).
    pub fn confirmed(&self, key: &str, generation: u64, now: u64) {
        let mut copies = self.copies.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = copies.map.get_mut(key) {
            h.generation = generation;
            h.touched_ms = now;
        }
    }

    /// Drops what is held for `key` (its source is no longer what the store holds).
    pub fn forget(&self, key: &str) {
        let mut copies = self.copies.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = copies.map.remove(key) {
            copies.bytes -= h.weight;
        }
    }

    /// After `shared` was served from the store for `key` at `generation`: the first
    /// time, notes it; the second, keeps a copy (a key hit once on a worker costs no
    /// copy).
    pub fn keep(&self, key: &str, shared: &std::sync::Arc<Entry>, generation: u64, now: u64) {
        let weight = u64::from(shared.weight(key));
        if weight > self.max_bytes {
            return;
        }
        let seen = {
            let copies = self.copies.lock().unwrap_or_else(|p| p.into_inner());
            copies
                .map
                .get(key)
                .is_some_and(|h| matches!(h.what, What::Seen))
        };
        if !seen {
            return self.hold(key, What::Seen, key.len() as u64 + 64, generation, now);
        }
        let what = What::Copy {
            entry: copied(shared),
            source: std::sync::Arc::downgrade(shared),
        };
        self.hold(key, what, weight, generation, now);
    }

    /// Marks `key` passed: looked up at `generation`, the store held no entry for it
    /// and the pass list held it.
    pub fn pass(&self, key: &str, generation: u64, now: u64) {
        self.hold(key, What::Pass, key.len() as u64 + 64, generation, now);
    }

    fn hold(&self, key: &str, what: What, weight: u64, generation: u64, now: u64) {
        if weight > self.max_bytes {
            return;
        }
        let mut copies = self.copies.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = copies.map.remove(key) {
            copies.bytes -= old.weight;
        }
        if copies.bytes + weight > self.max_bytes {
            copies.map.retain(|_, h| match &h.what {
                What::Copy { entry, .. } => entry.fresh_until_ms > now,
                What::Pass | What::Seen => now.saturating_sub(h.touched_ms) < TOUCH_MS,
            });
            copies.bytes = copies.map.values().map(|h| h.weight).sum();
            if copies.bytes + weight > self.max_bytes {
                copies.map.clear();
                copies.bytes = 0;
            }
        }
        copies.bytes += weight;
        let held = Held {
            what,
            generation,
            touched_ms: now,
            weight,
        };
        copies.map.insert(key.to_owned(), held);
    }

    #[cfg(test)]
    fn held(&self) -> (usize, u64) {
        let c = self.copies.lock().unwrap();
        (c.map.len(), c.bytes)
    }
}

/// `e` in allocations of its own: names, values and body copied, so the reference
/// counts a hit bumps are this copy's alone.
fn copied(e: &Entry) -> Entry {
    let own_name =
        |n: &HeaderName| HeaderName::from_bytes(n.as_str().as_bytes()).unwrap_or(n.clone());
    let own_value = |v: &HeaderValue| {
        let mut c = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(v.as_bytes()))
            .unwrap_or_else(|_| v.clone());
        c.set_sensitive(v.is_sensitive());
        c
    };
    // One more than the fields it will hold: an insert, even one that only replaces a
    // value, grows a map that is full (`HeaderMap::try_reserve_one`).
    let mut headers = HeaderMap::with_capacity(e.headers.len() + super::HIT_ADDS + 1);
    for (n, v) in &e.headers {
        headers.append(own_name(n), own_value(v));
    }
    // The fields a hit adds, in the order it adds them: a hit clones this map, a clone
    // keeps no spare room, and a field added to it would grow it (a `realloc` and a copy
    // per hit). Present here, each is only given its value: `Age` by `Cache::hit`, the
    // request id by the response's relay. `x-tollgate-cache` already has its value, so a
    // hit from this copy sets no status for the response phase to insert.
    headers.insert(http::header::AGE, HeaderValue::from_static("0"));
    headers.insert(X_TOLLGATE_CACHE, super::CacheStatus::Hit.header());
    headers.insert(X_TOLLGATE_REQUEST_ID, crate::request_id::PLACEHOLDER);
    Entry {
        status: e.status,
        headers,
        body: Bytes::copy_from_slice(&e.body),
        stored_ms: e.stored_ms,
        fresh_until_ms: e.fresh_until_ms,
        keep_until_ms: e.keep_until_ms,
        initial_age: e.initial_age,
        vary: e
            .vary
            .iter()
            .map(|(n, v)| (own_name(n), v.as_ref().map(own_value)))
            .collect(),
        llm: e.llm.clone(),
        pace: e.pace.clone(),
    }
}

/// Whether the source at `address` ([`Found::Check`]) is `shared`. The copy's `Weak`
/// keeps the address from being reused while the copy exists.
pub fn same(address: usize, shared: &std::sync::Arc<Entry>) -> bool {
    address == std::sync::Arc::as_ptr(shared) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Response, StatusCode};
    use std::sync::Arc;
    use std::time::Duration;

    const NOW: u64 = 1_000_000;

    fn entry(body: &str, fresh_for: u64) -> Arc<Entry> {
        let mut headers = HeaderMap::new();
        headers.insert("etag", HeaderValue::from_static("\"v1\""));
        headers.append("x-custom", HeaderValue::from_str("one").unwrap());
        headers.append("x-custom", HeaderValue::from_str("two").unwrap());
        Arc::new(Entry {
            status: StatusCode::OK,
            headers,
            body: Bytes::copy_from_slice(body.as_bytes()),
            stored_ms: NOW,
            fresh_until_ms: NOW + fresh_for,
            keep_until_ms: NOW + fresh_for,
            initial_age: 0,
            vary: Box::default(),
            llm: None,
            pace: None,
        })
    }

    /// Serves `key` and returns the body and header values of the response it made
    /// (`None`: not served).
    fn served(
        f: &Front,
        key: &str,
        generation: u64,
        now: u64,
    ) -> Option<(Bytes, Vec<HeaderValue>)> {
        let mut seen = None;
        let found = f.serve(
            key,
            generation,
            now,
            |_| true,
            |e| {
                seen = Some((e.body.clone(), e.headers.values().cloned().collect()));
                Response::new(crate::body::empty())
            },
        );
        match found {
            Found::Served(_) => seen,
            _ => None,
        }
    }

    /// Two hits from the store: the second copies.
    fn twice(f: &Front, key: &str, shared: &Arc<Entry>, generation: u64, now: u64) {
        f.keep(key, shared, generation, now);
        f.keep(key, shared, generation, now);
    }

    #[test]
    fn a_copy_serves_from_bytes_of_its_own_in_the_order_stored() {
        let f = Front::new(64 << 20, Duration::from_secs(60));
        let shared = entry("hello", 10_000);
        assert!(matches!(
            f.serve("k", 0, NOW, |_| true, |_| unreachable!()),
            Found::Nothing
        ));
        f.keep("k", &shared, 0, NOW);
        assert!(
            served(&f, "k", 0, NOW).is_none(),
            "the first hit only notes the key"
        );
        f.keep("k", &shared, 0, NOW);
        let (body, values) = served(&f, "k", 0, NOW + 10).expect("served from the copy");
        assert_eq!(body, "hello");
        assert_ne!(
            body.as_ptr(),
            shared.body.as_ptr(),
            "the body is the copy's"
        );
        let shared_values: Vec<_> = shared.headers.values().collect();
        let n = shared_values.len();
        assert_eq!(values[..n].iter().collect::<Vec<_>>(), shared_values);
        for (mine, theirs) in values.iter().zip(&shared_values) {
            assert_ne!(mine.as_bytes().as_ptr(), theirs.as_bytes().as_ptr());
        }
        assert_eq!(
            values[n..],
            ["0", "hit", ""],
            "then the fields a hit adds, in place for their values: Age, the cache \
             status, the request id"
        );
        assert_eq!(f.held(), (1, u64::from(shared.weight("k"))));
    }

    #[test]
    fn a_moved_generation_or_a_second_without_a_look_sends_the_copy_to_the_store_first() {
        let f = Front::new(64 << 20, Duration::from_secs(60));
        let shared = entry("hello", 60_000);
        twice(&f, "k", &shared, 7, NOW);
        match f.serve("k", 8, NOW, |_| true, |_| unreachable!()) {
            Found::Check(source) => assert!(same(source, &shared)),
            _ => panic!("a moved generation is checked"),
        }
        assert!(!same(Arc::as_ptr(&entry("other", 1)) as usize, &shared));
        f.confirmed("k", 8, NOW);
        assert!(served(&f, "k", 8, NOW + 999).is_some());
        assert!(matches!(
            f.serve("k", 8, NOW + 1000, |_| true, |_| unreachable!()),
            Found::Check(_)
        ));
        f.forget("k");
        assert_eq!(f.held(), (0, 0));
    }

    #[test]
    fn a_stale_or_unaccepted_copy_serves_nothing() {
        let f = Front::new(64 << 20, Duration::from_secs(60));
        twice(&f, "k", &entry("hello", 100), 0, NOW);
        assert!(served(&f, "k", 0, NOW + 100).is_none(), "stale");
        twice(&f, "k", &entry("hello", 10_000), 0, NOW);
        let found = f.serve("k", 0, NOW, |_| false, |_| unreachable!());
        assert!(matches!(found, Found::Nothing), "another Vary variant");
    }

    #[test]
    fn a_pass_mark_holds_while_its_generation_does_within_the_touch() {
        // A ttl of 400 ms: looked up again every 200 ms, within the pass list's idle time.
        let f = Front::new(64 << 20, Duration::from_millis(400));
        f.pass("k", 3, NOW);
        assert!(matches!(
            f.serve("k", 3, NOW + 199, |_| true, |_| unreachable!()),
            Found::Pass
        ));
        assert!(matches!(
            f.serve("k", 3, NOW + 200, |_| true, |_| unreachable!()),
            Found::Nothing
        ));
        assert!(matches!(
            f.serve("k", 4, NOW, |_| true, |_| unreachable!()),
            Found::Nothing
        ));
    }

    #[test]
    fn copies_stay_within_a_sixteenth_of_max_size_and_start_over_past_it() {
        let one = u64::from(entry("x", 10_000).weight("k0"));
        let f = Front::new(16 * 3 * one, Duration::from_secs(60));
        for k in ["k0", "k1", "k2"] {
            twice(&f, k, &entry("x", 10_000), 0, NOW);
        }
        assert_eq!(f.held(), (3, 3 * one));
        twice(&f, "k3", &entry("x", 10_000), 0, NOW);
        assert_eq!(f.held(), (1, one), "full: started over");
        assert!(served(&f, "k3", 0, NOW).is_some());
        twice(
            &f,
            "big",
            &entry(&"x".repeat(4 * one as usize), 10_000),
            0,
            NOW,
        );
        assert_eq!(f.held(), (1, one), "an entry over the bound is not copied");
        // Stale copies go first.
        let f = Front::new(16 * 2 * one, Duration::from_secs(60));
        twice(&f, "k0", &entry("x", 10), 0, NOW);
        twice(&f, "k1", &entry("x", 10_000), 0, NOW);
        twice(&f, "k2", &entry("x", 10_000), 0, NOW + 20);
        assert_eq!(f.held(), (2, 2 * one));
        assert!(served(&f, "k1", 0, NOW + 20).is_some());
    }

    #[test]
    fn a_store_moves_only_its_keys_slot() {
        let g = Generations::default();
        let (a, b) = (
            "GET api/a",
            (0..)
                .map(|i| format!("GET api/{i}"))
                .find(|k| g.slot(k) != g.slot("GET api/a"))
                .unwrap(),
        );
        let (a0, b0) = (g.of(a), g.of(&b));
        g.stored(g.slot(a));
        assert_eq!((g.of(a), g.of(&b)), (a0 + 1, b0));
    }
}
