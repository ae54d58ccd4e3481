//! Response cache: keyed by method, host, path, normalised query, chosen headers and
//! optionally the request body; fresh for `ttl`, capped by the provider's `max-age`;
//! only the statuses listed; single-flight (concurrent misses of one key make one
//! provider call, the others wait for it and are served from the entry); the response
//! streams to the first client while it is stored (the first byte is never delayed);
//! `x-tollgate-cache: hit|miss|bypass` and `Age` on responses; `Vary` honoured (an entry
//! serves only requests with the values it was stored for; RFC 9111 §4.1). A stale entry with an
//! `ETag` or `Last-Modified` is revalidated with `If-None-Match`/`If-Modified-Since`,
//! and a `304` is answered from the entry (RFC 9111 §4.3), which spares the user's
//! provider quota.

mod budget;
mod config;
mod control;
mod front;
pub mod key;
mod replay;
mod shared;
pub mod store;
mod tee;

use crate::body::{Body, full};
use crate::error::ProxyError;
use crate::headers::X_TOLLGATE_CACHE;
use crate::metrics::{Families, FloatCounter, LlmLabels, LlmTokenLabels, NameLabels};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::clock;
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
pub use config::RawCache;
use http::{HeaderName, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{CacheStore, Claim, Entry};
use tokio::sync::watch;

#[derive(Debug, Clone, PartialEq)]
pub struct CacheSpec {
    pub ttl: Duration,
    pub methods: Vec<Method>,
    pub statuses: Vec<u16>,
    pub key_headers: Vec<HeaderName>,
    pub key_body: bool,
    pub max_entry: usize,
    pub max_size: u64,
    pub shared: bool,
    pub ignore_cache_control: bool,
    pub revalidate: bool,
    /// Entries kept on the shared store too (`store: shared`).
    pub store: config::CacheStore,
    /// With `store: shared`: how long a replica waits for another's fetch of a key.
    pub max_wait: Duration,
    /// With `store: shared`: the most bytes of entries the shared store holds.
    pub shared_max_size: u64,
    /// Top-level members of a JSON body left out of the key.
    pub key_ignore: Vec<String>,
    /// Cache LLM calls that sample (temperature above 0, or unset).
    pub sampled: bool,
    /// How a hit sends a stored body: at once, or frame by frame as it first came.
    pub replay: config::Replay,
}

/// One slot's keys being fetched.
#[derive(Default)]
#[repr(align(128))]
struct Filling(Mutex<FxHashMap<Arc<str>, watch::Receiver<bool>>>);

pub struct Cache {
    pub spec: CacheSpec,
    pub store: Arc<dyn CacheStore>,
    /// Keys being fetched now (single-flight), in the slots of [`front::Generations`],
    /// each on lines of its own: touched on misses only, and misses of keys in two slots
    /// never meet on a lock.
    filling: Box<[Filling]>,
    /// Keys whose last response could not be stored ("hit-for-pass", as Varnish calls
    /// it): their misses go straight to the provider instead of waiting on each other.
    /// An entry lasts while such misses keep coming (idle for a minute, or the ttl, it
    /// goes), so steady uncacheable traffic never waits on a leader again.
    pass: moka::sync::Cache<String, ()>,
    /// Per slot of keys, how many stores: what tells the workers' copies
    /// ([`front`]) that an entry they copied may have been replaced.
    generations: front::Generations,
    pub actions: Actions<Action>,
    pub entries: prometheus_client::metrics::gauge::Gauge,
    pub bytes: prometheus_client::metrics::gauge::Gauge,
    /// What LLM answers served from the cache saved.
    saving: Saving,
    /// On a shared store: when this replica last looked whether another purged the
    /// cache (unix ms; see [`Cache::follow`]).
    followed_ms: std::sync::atomic::AtomicU64,
    /// Whether entries are on a shared store (`store: shared` on Redis; with the memory
    /// store, the cache is this replica's alone and has no purge to follow).
    on_shared_store: bool,
}

/// `tollgate_cache_saved_tokens_total{policy,model,kind}` and
/// `tollgate_cache_saved_usd_total{policy,model}`: each hit of an LLM answer counts the
/// usage and cost the provider's answer had. Models are labels up to [`MAX_MODELS`] per
/// cache, `other` past them.
struct Saving {
    policy: String,
    tokens: Family<LlmTokenLabels, Counter>,
    usd: Family<LlmLabels, FloatCounter>,
    models: Mutex<rustc_hash::FxHashSet<Arc<str>>>,
}

const MAX_MODELS: usize = 100;

impl Saving {
    fn add(&self, s: &store::Saved) {
        let model = {
            let mut m = self.models.lock().unwrap_or_else(|p| p.into_inner());
            if m.contains(&s.model) || m.len() < MAX_MODELS {
                m.insert(s.model.clone());
                s.model.to_string()
            } else {
                "other".to_owned()
            }
        };
        for (kind, n) in [("input", s.input), ("output", s.output)] {
            self.tokens
                .get_or_create(&LlmTokenLabels {
                    policy: self.policy.clone(),
                    model: model.clone(),
                    kind,
                })
                .inc_by(n);
        }
        self.usd
            .get_or_create(&LlmLabels {
                policy: self.policy.clone(),
                model,
            })
            .inc_by(s.cost_nanos as f64 / 1e9);
    }
}

crate::policy::actions::actions! {
    /// What the cache did.
    pub enum Action for "cache" {
        Hit = "hit",
        SharedHit = "shared_hit",
        Miss = "miss",
        Bypass = "bypass",
        Stored = "stored",
        Revalidated = "revalidated",
        Coalesced = "coalesced",
    }
}

/// `x-tollgate-cache`: what the cache made of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    /// Answered from an entry another replica stored (read from the shared store).
    SharedHit,
    Miss,
    Bypass,
}

impl CacheStatus {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            CacheStatus::Hit => "hit",
            CacheStatus::SharedHit => "shared-hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Bypass => "bypass",
        })
    }
}

/// A miss's state through the exchange (the one local a miss keeps: its status is `Miss`).
pub struct PendingFill {
    pub key: String,
    /// A stale entry being revalidated.
    pub stale: Option<Arc<Entry>>,
    /// This request fetches for the others waiting on its key.
    pub fill: Option<Fill>,
    /// Whether the request carried `Authorization` as the cache saw it (a shared cache
    /// stores no answer to it: RFC 9111 §3.5).
    pub authorization: bool,
    /// The request's headers as the cache saw them, for the `Vary` of a response that is
    /// stored (the attempt took the request). Not kept for a key this worker marked
    /// hit-for-pass: its answers were not storable, and most likely will not be.
    pub request: Option<http::HeaderMap>,
}

/// The single-flight ticket of the request fetching a key: dropping it (stored, not
/// cacheable, failed, client gone) lets the waiters go on.
pub struct Fill {
    cache: Arc<Cache>,
    key: Arc<str>,
    done: watch::Sender<bool>,
    /// On a shared store, this replica's lease on fetching the key for every replica:
    /// given back after the waiters here are told (a field drops after `drop`).
    flight: Option<store::Flight>,
}

impl Drop for Fill {
    fn drop(&mut self) {
        let slot = self.cache.generations.slot(&self.key);
        if let Ok(mut f) = self.cache.filling[slot].0.lock() {
            f.remove(&self.key);
        }
        let _ = self.done.send(true);
    }
}

impl Cache {
    fn new(
        spec: CacheSpec,
        store: Arc<dyn CacheStore>,
        actions: Actions<Action>,
        (entries, bytes): (Gauge, Gauge),
        saving: Saving,
    ) -> Self {
        let pass = moka::sync::Cache::builder()
            .max_capacity(10_000)
            .time_to_idle(spec.ttl.min(Duration::from_secs(60)))
            .build();
        let on_shared_store = store.shared();
        Self {
            spec,
            store,
            pass,
            filling: (0..front::SLOTS).map(|_| Filling::default()).collect(),
            generations: front::Generations::default(),
            actions,
            entries,
            bytes,
            saving,
            followed_ms: std::sync::atomic::AtomicU64::new(0),
            on_shared_store,
        }
    }

    /// On a shared store, at most once per [`store::PURGE_CHECK_MS`]: looks (in a task of
    /// its own, so the request does not wait) whether another replica purged the cache,
    /// and if so drops this replica's entries, marks and every worker's copies.
    fn follow(self: &Arc<Self>, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let last = self.followed_ms.load(Relaxed);
        if now < last + store::PURGE_CHECK_MS
            || self
                .followed_ms
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let c = self.clone();
        tokio::spawn(async move {
            if let Ok(true) = c.store.follow().await {
                c.forget_all();
            }
        });
    }

    /// After a purge: the hit-for-pass marks go, and every worker's copies look again.
    fn forget_all(&self) {
        self.pass.invalidate_all();
        self.generations.all_stored();
        let (entries, bytes) = self.store.size();
        self.entries.set(entries as i64);
        self.bytes.set(bytes as i64);
    }

    /// A response served from `e` at `now` (unix ms, read once by the caller). Its
    /// `x-tollgate-cache` is set by the response phase ([`with_status`]), as every status
    /// is, unless `e` is a worker's copy, whose head has it already (front.rs).
    fn hit(&self, e: &Entry, method: &Method, now: u64) -> Response<Body> {
        if let Some(s) = &e.llm {
            self.saving.add(s);
        }
        let mut resp = Response::new(match &e.pace {
            _ if method == Method::HEAD => crate::body::empty(),
            Some(marks) if self.spec.replay == config::Replay::Paced => {
                replay::Paced::new(e.body.clone(), marks.clone()).boxed_unsync()
            }
            _ => full(e.body.clone()),
        });
        *resp.status_mut() = e.status;
        *resp.headers_mut() = e.headers.clone();
        let age = u64::from(e.initial_age) + now.saturating_sub(e.stored_ms) / 1000;
        resp.headers_mut().insert(header::AGE, age_value(age));
        resp
    }

    /// On a shared store, this replica's first miss of `key` (holding `fill`): the
    /// answer when another replica stored it meanwhile (this replica's waiters find it in
    /// memory once the fill goes), else the fill, with the lease on fetching it for every
    /// replica when this one got it.
    async fn claim(
        &self,
        x: &mut Exchange,
        key: &str,
        mut fill: Fill,
    ) -> Result<Fill, Response<Body>> {
        let claimed = self.store.claim(key).await;
        let now = clock::now_ms();
        match claimed {
            Ok(Claim::Found(e, _)) if e.matches(&x.parts.headers) && e.fresh_until_ms > now => {
                drop(fill);
                Err(self.found(x, &e, true, now))
            }
            Ok(Claim::Fetch(flight) | Claim::Found(_, flight)) => {
                fill.flight = flight;
                Ok(fill)
            }
            Err(_) => Ok(fill),
        }
    }

    /// Answers `x` from `e`, found in the store (`shared`: read from Redis) at `now`: the
    /// hit counted, and what it saved noted.
    fn found(&self, x: &mut Exchange, e: &Entry, shared: bool, now: u64) -> Response<Body> {
        let (action, status) = match shared {
            true => (Action::SharedHit, CacheStatus::SharedHit),
            false => (Action::Hit, CacheStatus::Hit),
        };
        self.actions.record(x, action);
        x.locals.insert(status);
        note_saved(x, e.llm.clone());
        self.hit(e, &x.method, now)
    }

    /// Joins the fetch of `key` in progress, or starts one (returns its ticket).
    fn join_or_fill(self: &Arc<Self>, key: &str) -> Result<Fill, watch::Receiver<bool>> {
        let slot = self.generations.slot(key);
        let mut f = self.filling[slot]
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = f.get(key) {
            return Err(rx.clone());
        }
        let (tx, rx) = watch::channel(false);
        // One copy of the key, shared by the map and the fill that removes it.
        let key: Arc<str> = key.into();
        f.insert(key.clone(), rx);
        Ok(Fill {
            cache: self.clone(),
            key,
            done: tx,
            flight: None,
        })
    }

    /// How long a response may be served fresh, or `None` when it must not be stored.
    fn freshness(&self, authorization: bool, head: &http::response::Parts) -> Option<Duration> {
        if !self.spec.statuses.contains(&head.status.as_u16()) {
            return None;
        }
        if self.spec.ignore_cache_control {
            return Some(self.spec.ttl);
        }
        let d = control::parse(&head.headers);
        if d.no_store || head.headers.get(header::VARY).is_some_and(|v| v == "*") {
            return None;
        }
        // RFC 9111 §3.5: a shared cache stores neither `private` responses nor answers
        // to requests with credentials of the user's own.
        if self.spec.shared && (d.private || authorization) {
            return None;
        }
        let limit = if self.spec.shared {
            d.s_maxage.or(d.max_age)
        } else {
            d.max_age
        };
        let ttl = limit.map_or(self.spec.ttl, |m| m.min(self.spec.ttl));
        // `no-cache` (or max-age=0): storable, but every use must be revalidated.
        Some(if d.no_cache { Duration::ZERO } else { ttl })
    }
}

/// The cache stage of a policy: the cache, and in a data-plane worker's chain that
/// worker's copies of the entries it serves.
pub struct CacheStage {
    cache: Arc<Cache>,
    front: Option<front::Front>,
}

/// `cache:` in a policy.
pub struct Kind;

/// `tollgate_cache_entries`, `tollgate_cache_bytes` and
/// `tollgate_cache_shared_corrupt_total`, by policy.
#[derive(Default)]
pub struct Metrics {
    entries: Family<NameLabels, Gauge>,
    bytes: Family<NameLabels, Gauge>,
    corrupt: Family<NameLabels, Counter>,
    saved_tokens: Family<LlmTokenLabels, Counter>,
    saved_usd: Family<LlmLabels, FloatCounter>,
    shared_writes: Family<WriteLabels, Counter>,
}

/// A shared cache's writes, by what became of them.
#[derive(
    Clone, Debug, Default, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet,
)]
pub struct WriteLabels {
    pub name: String,
    pub result: &'static str,
}

impl RemedyKind for Kind {
    const NAME: &'static str = "cache";
    const PHASES: Phases = Phases {
        request: "lookup: a fresh hit answers here, before any limit; single-flight; a stale entry adds `If-None-Match`",
        attempt: "",
        response: "stores (streaming), answers a `304` from the entry, sets `x-tollgate-cache`",
    };
    const EXAMPLE: &'static str = "{ttl: 60s}";
    type Raw = RawCache;
    type Spec = CacheSpec;
    type Action = Action;
    type Metrics = Metrics;

    fn register(f: &mut Families<'_>) -> Metrics {
        Metrics {
            entries: f.add("cache_entries", "Cached responses, by policy"),
            bytes: f.add("cache_bytes", "Bytes held by a policy's cache"),
            corrupt: f.add(
                "cache_shared_corrupt",
                "Values on the shared store that were not a cache entry (read as misses), by policy",
            ),
            saved_tokens: f.add(
                "cache_saved_tokens",
                "Tokens of LLM answers served from the cache instead of the provider, by policy, model and kind (input, output): what each hit's answer had cost when it was fetched",
            ),
            saved_usd: f.add(
                "cache_saved_usd",
                "What LLM answers served from the cache would have cost in US dollars by the policy's prices, by policy and model",
            ),
            shared_writes: f.add(
                "cache_shared_writes",
                "Entries a shared cache stored, by policy and what became of them on the shared store: written; over_budget (kept in memory: shared_max_size reached); private (kept in memory: it holds a caller's secret)",
            ),
        }
    }

    fn validate(raw: &RawCache, cx: &mut Check<'_>) -> Option<CacheSpec> {
        Some(config::cache(cx.errors, &cx.path, raw))
    }

    fn build(spec: &CacheSpec, b: &mut Build<'_>) -> Built {
        let id = b.id("cache", b.policy, spec);
        let actions = b.actions();
        let cache = b.reuse(id, |b| {
            let metrics = b.metrics_of::<Kind>();
            let l = NameLabels {
                name: b.policy.to_owned(),
            };
            let memory = store::MemoryCache::new(spec.max_size);
            let shared = b.store_for(true);
            let store: Arc<dyn CacheStore> =
                if spec.store == config::CacheStore::Shared && shared.shared() {
                    Arc::new(shared_cache(spec, b.policy, &metrics, (memory, shared)))
                } else {
                    Arc::new(memory)
                };
            Cache::new(
                spec.clone(),
                store,
                actions,
                (
                    metrics.entries.get_or_create(&l).clone(),
                    metrics.bytes.get_or_create(&l).clone(),
                ),
                Saving {
                    policy: b.policy.to_owned(),
                    tokens: metrics.saved_tokens.clone(),
                    usd: metrics.saved_usd.clone(),
                    models: Mutex::default(),
                },
            )
        });
        Built::from(Arc::new(CacheStage { cache, front: None }))
    }
}

/// The cache of `policy` on the shared store `shared`, over this replica's `memory`.
fn shared_cache(
    spec: &CacheSpec,
    policy: &str,
    metrics: &Metrics,
    (memory, shared): (store::MemoryCache, Arc<dyn crate::policy::store::Store>),
) -> shared::SharedCache {
    let counter = |result| {
        metrics
            .shared_writes
            .get_or_create(&WriteLabels {
                name: policy.to_owned(),
                result,
            })
            .clone()
    };
    // The longest an entry lives on Redis: its keep time (`tee.rs`, and a
    // revalidation's refresh).
    let longest = if spec.revalidate {
        2 * spec.ttl
    } else {
        spec.ttl
    };
    let corrupt = metrics
        .corrupt
        .get_or_create(&NameLabels {
            name: policy.to_owned(),
        })
        .clone();
    shared::SharedCache::new(
        memory,
        shared,
        policy,
        shared::Bounds {
            max_entry: spec.max_entry,
            max_wait: spec.max_wait,
            max_bytes: spec.shared_max_size,
            longest_ms: longest.as_millis() as u64,
        },
        (
            corrupt,
            shared::Writes {
                written: counter("written"),
                over_budget: counter("over_budget"),
                private: counter("private"),
            },
        ),
    )
}

/// A request's key, and what this worker's copy said of it, for the look at the store.
struct Look {
    key: String,
    generation: u64,
    /// The copy to check against the store's entry (its source's address).
    check: Option<usize>,
    carries: control::Carries,
}

impl CacheStage {
    /// The request's key, then this worker's copy: a hit there touches nothing another
    /// worker writes, and a key it passes waits for no one. `Err`: the store is looked at
    /// ([`CacheStage::look`]).
    fn front(
        &self,
        x: &mut Exchange,
        carries: control::Carries,
        body: Option<&[u8]>,
    ) -> Result<Flow, Look> {
        let c = &self.cache;
        let key = key::key(
            &x.method,
            x.target.authority.as_str(),
            &x.parts.uri,
            &x.parts.headers,
            &c.spec.key_headers,
            carries.authorization,
            body,
        );
        let generation = c.generations.of(&key);
        let mut check = None;
        if let Some(f) = &self.front {
            let now = clock::now_ms();
            let accepts = |e: &Entry| e.matches(&x.parts.headers);
            let mut saved = None;
            let answer = |e: &Entry| {
                saved = e.llm.clone();
                c.hit(e, &x.method, now)
            };
            match f.serve(&key, generation, now, accepts, answer) {
                front::Found::Served(resp) => {
                    note_saved(x, saved);
                    c.actions.record(x, Action::Hit);
                    // No status for the response phase: the copy's head carries
                    // `x-tollgate-cache: hit` (front.rs, `copied`).
                    return Ok(Flow::Answer(resp));
                }
                // No entry since the mark (the generation did not move): a miss that
                // waits for no one.
                front::Found::Pass => return Ok(self.missed(x, key, None, None, carries, true)),
                front::Found::Check(source) => check = Some(source),
                front::Found::Nothing => {}
            }
        }
        Err(Look {
            key,
            generation,
            check,
            carries,
        })
    }

    /// The store looked at for a key this worker's copy did not answer: a hit, or a miss
    /// that fetches (single-flight: at most one round of waiting for another request's
    /// fetch).
    async fn look(&self, x: &mut Exchange, look: Look) -> Result<Flow, ProxyError> {
        let c = &self.cache;
        let s = &c.spec;
        let Look {
            key,
            generation,
            mut check,
            carries,
        } = look;
        let mut waited = false;
        // This request's ticket to fetch, held while it looks at the store once more.
        let mut ticket = None;
        let (fill, stale) = loop {
            let (got, from_shared) = match c.store.get(&key).await {
                Ok(Some((e, shared))) => (Some(e), shared),
                _ => (None, false),
            };
            let empty = got.is_none();
            let now = clock::now_ms();
            let mut copied = false;
            if let (Some(f), Some(source)) = (&self.front, check.take()) {
                match &got {
                    Some(e) if front::same(source, e) => {
                        f.confirmed(&key, generation, now);
                        copied = true;
                    }
                    _ => f.forget(&key),
                }
            }
            // An entry stored for other values of the headers its response varied on
            // is no entry for this request (the new response replaces it).
            let found = got.filter(|e| e.matches(&x.parts.headers));
            if let Some(e) = &found
                && e.fresh_until_ms > now
            {
                if let Some(f) = &self.front
                    && !copied
                {
                    f.keep(&key, e, generation, now);
                }
                return Ok(Flow::Answer(c.found(x, e, from_shared, now)));
            }
            let stale = found.filter(|e| s.revalidate && e.has_validators());
            // `get`, not `contains_key`: a use keeps the entry alive.
            if c.pass.get(&key).is_some() {
                if let Some(f) = &self.front
                    && empty
                    && !waited
                {
                    f.pass(&key, generation, now);
                }
                break (None, stale);
            }
            if let Some(fill) = ticket.take() {
                break (Some(fill), stale);
            }
            match c.join_or_fill(&key) {
                Ok(fill) if c.store.shared() => match c.claim(x, &key, fill).await {
                    Ok(fill) => break (Some(fill), stale),
                    Err(answer) => return Ok(Flow::Answer(answer)),
                },
                // A fetch ending on another worker between this look and the ticket
                // stored its entry first: looked at once more, the ticket held (a
                // shared store's claim does the same on Redis).
                Ok(fill) => ticket = Some(fill),
                Err(_) if waited => break (None, stale),
                Err(mut rx) => {
                    c.actions.record(x, Action::Coalesced);
                    waited = true;
                    let _ = rx.wait_for(|done| *done).await;
                }
            }
        };
        // Held only if the look found the key passed since: no fetch to share.
        drop(ticket);
        if let Some(e) = &stale {
            add_validators(x, e);
        }
        Ok(self.missed(x, key, fill, stale, carries, false))
    }

    /// A miss: the response to come is stored (or fills the key for those waiting) by
    /// the response phase.
    fn missed(
        &self,
        x: &mut Exchange,
        key: String,
        fill: Option<Fill>,
        stale: Option<Arc<Entry>>,
        carries: control::Carries,
        passed: bool,
    ) -> Flow {
        self.cache.actions.record(x, Action::Miss);
        x.locals.insert(PendingFill {
            key,
            stale,
            fill,
            authorization: carries.authorization,
            request: (!passed).then(|| x.parts.headers.clone()),
        });
        Flow::Continue
    }
}

impl Remedy for CacheStage {
    fn for_worker(&self) -> Option<Arc<dyn Remedy>> {
        Some(Arc::new(CacheStage {
            cache: self.cache.clone(),
            front: Some(front::Front::new(
                self.cache.spec.max_size,
                self.cache.spec.ttl,
            )),
        }))
    }

    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        let c = &self.cache;
        let (entries, bytes) = c.store.size();
        let shared_hits = c.actions.get(Action::SharedHit);
        let hits = c.actions.get(Action::Hit) + shared_hits;
        let misses = c.actions.get(Action::Miss);
        let mut state = serde_json::json!({
            "store": if c.store.shared() { "shared" } else { "local" },
            "entries": entries,
            "bytes": bytes,
            "hits": hits,
            "shared_hits": shared_hits,
            "misses": misses,
            "bypassed": c.actions.get(Action::Bypass),
            "revalidated": c.actions.get(Action::Revalidated),
            "hit_ratio": if hits + misses > 0 { hits as f64 / (hits + misses) as f64 } else { 0.0 },
        });
        Some(Box::pin(async move {
            if let Ok(Some((held, max))) = c.store.shared_bytes().await {
                state["shared_bytes"] = held.into();
                state["shared_max_size"] = max.into();
            }
            state
        }))
    }

    fn purge(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        let c = &self.cache;
        Some(Box::pin(async move {
            let done = c.store.purge().await;
            c.forget_all();
            match done {
                Ok(p) => serde_json::json!({
                    "entries": p.entries,
                    "store": if p.shared.is_some() { "shared" } else { "local" },
                    // Whether every replica follows (Redis reached).
                    "replicas": p.shared.map(|s| if s { "all" } else { "this one: the shared store did not answer" }),
                }),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            }
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        let c = &self.cache;
        let s = &c.spec;
        if c.on_shared_store {
            c.follow(clock::now_ms());
        }
        let carries = control::Carries::of(&x.parts.headers);
        if !s.methods.contains(&x.method) || carries.bypasses(&x.parts.headers) {
            return Phase::Now(Ok(bypass(x, c)));
        }
        if !s.key_body {
            // A hit on this worker's copy, or a key it passes, is decided at once.
            return match self.front(x, carries, None) {
                Ok(flow) => Phase::Now(Ok(flow)),
                Err(look) => Phase::wait(self.look(x, look)),
            };
        }
        Phase::wait(async move {
            let llm = x.method == Method::POST
                && crate::protocol::llm_api(&crate::policy::path::normalized(x.parts.uri.path()))
                    .is_some();
            let digest = match x.buffer(s.max_entry).await? {
                Some(b) => key::body_digest(b, &s.key_ignore, llm, s.sampled),
                None => None,
            };
            let Some(digest) = digest else {
                return Ok(bypass(x, c));
            };
            match self.front(x, carries, Some(&digest[..])) {
                Ok(flow) => Ok(flow),
                Err(look) => self.look(x, look).await,
            }
        })
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        let c = &self.cache;
        // A miss keeps its pending fill alone (its status is `Miss`); a hit or a bypass
        // its status.
        let Some(pending) = x.locals.take::<PendingFill>() else {
            return match x.locals.get::<CacheStatus>() {
                Some(&status) => with_status(resp, status),
                None => resp,
            };
        };
        let status = CacheStatus::Miss;
        let (mut head, body) = resp.into_parts();
        // RFC 9111 §4.3.4: a 304 freshens the stored entry with its headers.
        if head.status == StatusCode::NOT_MODIFIED
            && let Some(stale) = &pending.stale
        {
            c.actions.record(x, Action::Revalidated);
            let mut headers = stale.headers.clone();
            for (n, v) in &head.headers {
                if n != header::CONTENT_LENGTH {
                    headers.insert(n.clone(), v.clone());
                }
            }
            headers.reserve(HIT_ADDS);
            let mut fresh_head = head.clone();
            fresh_head.status = stale.status;
            fresh_head.headers = headers.clone();
            let ttl = c
                .freshness(pending.authorization, &fresh_head)
                .unwrap_or(Duration::ZERO);
            let now = clock::now_ms();
            let entry = Arc::new(Entry {
                status: stale.status,
                headers,
                body: stale.body.clone(),
                stored_ms: now,
                fresh_until_ms: now + ttl.as_millis() as u64,
                keep_until_ms: now + 2 * c.spec.ttl.as_millis() as u64,
                initial_age: 0,
                vary: stale.vary.clone(),
                llm: stale.llm.clone(),
                pace: stale.pace.clone(),
            });
            let resp = with_status(c.hit(&entry, &x.method, now), CacheStatus::Hit);
            let cache = c.clone();
            let fill = pending.fill;
            tokio::spawn(async move {
                let slot = cache.generations.slot(&pending.key);
                let _ = cache.store.put(pending.key, entry).await;
                cache.generations.stored(slot);
                drop(fill);
            });
            return resp;
        }
        let Some(ttl) = c.freshness(pending.authorization, &head) else {
            // Not storable: the next misses of this key need not wait for one another.
            if pending.fill.is_some() {
                c.pass.insert(pending.key, ());
            }
            return with_status(Response::from_parts(head, body), status);
        };
        let too_big = http_body::Body::size_hint(&body)
            .exact()
            .is_some_and(|n| n > c.spec.max_entry as u64);
        if too_big {
            if pending.fill.is_some() {
                c.pass.insert(pending.key, ());
            }
            return with_status(Response::from_parts(head, body), status);
        }
        let vary = match &pending.request {
            Some(request) => vary(&head.headers, request),
            None if !head.headers.contains_key(header::VARY) => Vec::new(),
            None => {
                // A key marked hit-for-pass answered storably, varying on request
                // headers that were not kept: not stored this time. Its marks give way
                // (the pass entry goes, the slot's generation moves), so the next
                // request of the key fetches and stores.
                c.pass.invalidate(&pending.key);
                c.generations.stored(c.generations.slot(&pending.key));
                return with_status(Response::from_parts(head, body), status);
            }
        };
        head.headers
            .insert(X_TOLLGATE_CACHE, CacheStatus::Miss.header());
        let mut stored = head.headers.clone();
        crate::headers::strip_hop_by_hop(&mut stored);
        stored.remove(X_TOLLGATE_CACHE);
        stored.reserve(HIT_ADDS);
        let initial_age = head
            .headers
            .get(header::AGE)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        let keep = if c.spec.revalidate {
            2 * c.spec.ttl
        } else {
            ttl
        };
        let tee = tee::tee(
            body,
            c.spec.max_entry,
            tee::Storing {
                cache: c.clone(),
                key: pending.key,
                status: head.status,
                headers: stored,
                ttl,
                keep,
                initial_age,
                vary,
                fill: pending.fill,
                llm: x
                    .locals
                    .get::<crate::llm::request::Call>()
                    .map(|c| c.meter.clone()),
                pace: (c.spec.replay == config::Replay::Paced).then(replay::Marks::new),
            },
        );
        Response::from_parts(head, tee.boxed_unsync())
    }
}

/// The request headers a response's `Vary` names, with this request's values.
fn vary(
    response: &http::HeaderMap,
    request: &http::HeaderMap,
) -> Vec<(HeaderName, Option<HeaderValue>)> {
    response
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().to_ascii_lowercase().as_bytes()).ok())
        .map(|n| {
            let v = request.get(&n).cloned();
            (n, v)
        })
        .collect()
}

/// A hit's LLM answer: what it saved goes to diagnosis (discovery, HAR).
fn note_saved(x: &mut Exchange, saved: Option<Box<store::Saved>>) {
    if let (Some(d), Some(s)) = (&mut x.diag, saved) {
        d.saved = Some(s);
    }
}

fn bypass(x: &mut Exchange, c: &Cache) -> Flow {
    c.actions.record(x, Action::Bypass);
    x.locals.insert(CacheStatus::Bypass);
    Flow::Continue
}

/// An `Age` value. Those of the first ten minutes are made once, over static text: a
/// hit's copy of one is a copy of two words (no formatting, no allocation, and no
/// reference count that every worker's hits would write).
fn age_value(age: u64) -> HeaderValue {
    static FIRST: std::sync::LazyLock<Vec<HeaderValue>> = std::sync::LazyLock::new(|| {
        (0..600u64)
            .map(|n| HeaderValue::from_static(Box::leak(n.to_string().into_boxed_str())))
            .collect()
    });
    match FIRST.get(age as usize) {
        Some(v) => v.clone(),
        None => age.into(),
    }
}

/// The fields a hit adds to its entry's head: `Age`, `x-tollgate-cache` and the request
/// id. A stored head keeps room for them: its clone keeps the size of its index table,
/// so a hit's inserts never grow it (rehashing every field). Its list of fields is
/// cloned without room, so the first insert grows that (a `realloc`); a worker's copy
/// (`front.rs`) holds the three fields already, and a hit from it grows nothing.
const HIT_ADDS: usize = 3;

fn with_status(mut resp: Response<Body>, status: CacheStatus) -> Response<Body> {
    resp.headers_mut().insert(X_TOLLGATE_CACHE, status.header());
    resp
}

/// Conditional headers for revalidating `e`, unless the client sent its own.
fn add_validators(x: &mut Exchange, e: &Entry) {
    let h = &mut x.parts.headers;
    if h.contains_key(header::IF_NONE_MATCH) || h.contains_key(header::IF_MODIFIED_SINCE) {
        return;
    }
    if let Some(etag) = e.headers.get(header::ETAG) {
        h.insert(header::IF_NONE_MATCH, etag.clone());
    } else if let Some(lm) = e.headers.get(header::LAST_MODIFIED) {
        h.insert(header::IF_MODIFIED_SINCE, lm.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::age_value;

    #[test]
    fn an_age_reads_as_its_seconds_made_or_not() {
        for age in [0, 1, 59, 599, 600, 86_400, u64::MAX] {
            assert_eq!(age_value(age), age.to_string().as_str(), "{age}");
        }
    }
}
