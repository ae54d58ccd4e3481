//! The state interface behind every remedy: counters in windows, deadlines, and cache
//! entries. Shaped for a remote store (Redis) as much as for memory: every operation is
//! one atomic step (add-if-within-limit with expiry, raise-a-deadline, reset), returns a
//! future, and names its state by a [`Key`] a remote store can spell as a string.
//! [`memory::Memory`] is the in-process implementation; [`fallback::RedisBacked`] the one
//! replicas share (`store.backend: redis`), over [`redis::Redis`].

pub mod blocks;
mod capped;
pub mod exhausted;
pub mod fallback;
pub mod health;
pub mod memory;
mod names;
pub mod redis;
pub mod sentinel;
pub mod settings;

pub use names::Names;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A store operation's result: known at once (the in-memory store, with no allocation
/// per operation), or still to come from a remote store.
pub enum StoreFuture<'a, T> {
    Ready(Option<Result<T, StoreError>>),
    Pending(Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>),
}

impl<T> StoreFuture<'_, T> {
    pub fn ready(result: Result<T, StoreError>) -> Self {
        Self::Ready(Some(result))
    }
}

// Nothing in it is pinned in place: the value is moved out, the pending future is boxed.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Ready(v) => Poll::Ready(v.take().unwrap_or_else(|| {
                Err(StoreError::new(
                    Cause::Internal,
                    "a store result read twice",
                ))
            })),
            Self::Pending(f) => f.as_mut().poll(cx),
        }
    }
}

/// A store could not answer (a remote store unreachable, refusing, too slow). The shared
/// store decides each such operation by `store.on_error`, counts it, shows the last one
/// in `/policies` and warns once per cause with what to do.
#[derive(Debug, Clone, thiserror::Error)]
#[error("state store: {message}")]
pub struct StoreError {
    pub cause: Cause,
    /// What failed, never holding a password (redis-rs's texts do not name the URL).
    pub message: String,
}

impl StoreError {
    pub fn new(cause: Cause, message: impl Into<String>) -> Self {
        Self {
            cause,
            message: message.into(),
        }
    }
}

/// Why a store operation failed: a bounded set, each with the fix an operator applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No answer within `store.timeout`.
    Timeout,
    /// Redis refused the credentials (`WRONGPASS`, `NOAUTH`, an ACL's `NOPERM`).
    Auth,
    /// Nothing reachable at the address (refused, reset, unreachable, a TLS failure).
    Connect,
    /// Redis answered with an error (read-only replica, cluster down, …).
    Server,
    /// What answered is not Redis, or sent a reply over the size tollgate accepts.
    Reply,
    /// Inside tollgate (a poisoned lock).
    Internal,
}

impl Cause {
    pub fn name(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Auth => "auth",
            Self::Connect => "connect",
            Self::Server => "server",
            Self::Reply => "reply",
            Self::Internal => "internal",
        }
    }

    /// The `kind` label of `tollgate_store_errors_total`: no answer in time, or an answer
    /// that was an error (whatever its cause; `/policies` names the cause).
    pub fn metric_kind(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            _ => "error",
        }
    }

    /// What to do about it, as the warning and `/policies` say.
    pub fn fix(self) -> &'static str {
        match self {
            Self::Timeout => {
                "Redis did not answer within `store.timeout`: check that the address in `store.url` is reachable from here and that Redis is not overloaded, or raise `store.timeout`"
            }
            Self::Auth => {
                "Redis refused the credentials: check the user and password in `store.url` (`redis://USER:PASSWORD@HOST:PORT`, `${VAR}` to read them from the environment) or `store.sentinel.password`"
            }
            Self::Connect => {
                "no Redis answered at the store's address: check the host and port in `store.url` (or `store.cluster`, `store.sentinel.nodes`), that Redis runs, and `rediss://` against the server's TLS setting"
            }
            Self::Server => {
                "Redis answered with an error (see the message): a read-only replica, a Cluster that is down, or a command its ACL does not permit"
            }
            Self::Reply => {
                "what answers at the store's address does not speak Redis, or sent a reply larger than tollgate accepts: check `store.url`"
            }
            Self::Internal => "an error inside tollgate: please report it",
        }
    }
}

/// The name of one piece of state: the resource (its kind, name and a fingerprint of its
/// definition, so a changed definition starts afresh), a part (a consumer group, `total`,
/// `fail`…) and a window number (0 for state without windows).
#[derive(Clone, Debug, Eq)]
pub struct Key {
    pub resource: Arc<str>,
    pub part: Arc<str>,
    pub window: u64,
}

/// Equal names: a worker's keys share its copies of the names ([`names`]), so the same
/// reference is the common case and no byte is compared; another worker's copy of the
/// same name is compared by its text.
fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

impl PartialEq for Key {
    fn eq(&self, o: &Self) -> bool {
        self.window == o.window && same(&self.resource, &o.resource) && same(&self.part, &o.part)
    }
}

/// By text, as equal keys are equal text.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.resource.hash(h);
        self.part.hash(h);
        self.window.hash(h);
    }
}

impl Key {
    pub fn new(resource: &Arc<str>, part: &Arc<str>, window: u64) -> Self {
        Self {
            resource: resource.clone(),
            part: part.clone(),
            window,
        }
    }
}

impl fmt::Display for Key {
    /// How a remote store spells it: `tollgate:{resource}:{part}:{window}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tollgate:{}:{}:{}",
            self.resource, self.part, self.window
        )
    }
}

/// The id of a lease taken in this process's memory (a counted slot, not a remote lease).
pub const LOCAL_LEASE: u64 = 0;

/// What [`Store::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    /// Whether `n` was added (the result stayed within the limit).
    pub taken: bool,
    /// The counter after the operation.
    pub count: u64,
}

/// The store `settings` name. Nothing is connected yet: a Redis is first reached by the
/// first operation of each worker.
pub fn build(
    settings: &settings::StoreSettings,
    metrics: &crate::metrics::Metrics,
) -> Result<Arc<dyn Store>, String> {
    Ok(match settings {
        settings::StoreSettings::Memory => Arc::new(memory::Memory::default()),
        settings::StoreSettings::Redis(r) => Arc::new(fallback::RedisBacked::new(r, metrics)?),
    })
}

pub trait Store: Send + Sync + 'static {
    /// Adds `n` to the counter `key` when the result stays within `limit`; the counter
    /// disappears at `expires_ms` (unix milliseconds; 0: never). Redis: a script doing
    /// GET, compare, INCRBY and PEXPIREAT in one step.
    fn add(&self, key: &Key, n: u64, limit: u64, expires_ms: u64) -> StoreFuture<'_, Added>;
    /// An admission (a rate limit's or a quota's window): `add`, which a shared store may
    /// batch (`store.sync: lease`). What it took is given back by `sub` or `release`.
    fn take(&self, key: &Key, n: u64, limit: u64, expires_ms: u64) -> StoreFuture<'_, Added> {
        self.add(key, n, limit, expires_ms)
    }
    /// Takes `n` back (a grant whose request did not go ahead, a released slot).
    fn sub(&self, key: &Key, n: u64) -> StoreFuture<'_, ()>;
    /// Takes `n` back without waiting for the answer (a slot released from a drop; a
    /// remote store sends it in the background). A counter without expiry that reaches 0
    /// is removed.
    fn release(&self, key: &Key, n: u64);
    /// The counter's value (0 when absent).
    fn get(&self, key: &Key) -> StoreFuture<'_, u64>;
    /// Sets the counter to 0.
    fn reset(&self, key: &Key) -> StoreFuture<'_, ()>;
    /// Raises the deadline `key` to `until_ms` when that is later; returns the deadline.
    /// The key disappears at `expires_ms` (0: never), which may be later than the
    /// deadline (a breaker remembers when it was last open).
    fn raise(&self, key: &Key, until_ms: u64, expires_ms: u64) -> StoreFuture<'_, u64>;
    /// The deadline `key` (0 when absent).
    fn deadline(&self, key: &Key) -> StoreFuture<'_, u64>;
    /// Takes one of `limit` slots under `key` as a lease that ends `ttl_ms` from now
    /// unless renewed (a gateway killed with requests in flight gives its slots back
    /// when their leases end): the lease's id, or `None` when all slots are taken.
    /// In memory a slot is a counter (the process that holds it is the one that counts).
    fn lease(&self, key: &Key, limit: u64, ttl_ms: u64) -> StoreFuture<'_, Option<u64>> {
        let _ = ttl_ms;
        match self.add(key, 1, limit, 0) {
            StoreFuture::Ready(r) => {
                StoreFuture::Ready(r.map(|r| r.map(|a| a.taken.then_some(LOCAL_LEASE))))
            }
            StoreFuture::Pending(f) => StoreFuture::Pending(Box::pin(async move {
                Ok(f.await?.taken.then_some(LOCAL_LEASE))
            })),
        }
    }
    /// How long a lease lasts unless renewed (a remote store; the holder renews it before
    /// then); `None`: leases last until given back (memory).
    fn lease_ttl(&self) -> Option<std::time::Duration> {
        None
    }
    /// Extends lease `id` to `ttl_ms` from now.
    fn renew(&self, key: &Key, id: u64, ttl_ms: u64) -> StoreFuture<'_, ()> {
        let _ = (key, id, ttl_ms);
        StoreFuture::ready(Ok(()))
    }
    /// Gives lease `id` back without waiting (from a drop).
    fn unlease(&self, key: &Key, id: u64) {
        let _ = id;
        self.release(key, 1);
    }
    /// Leases held under `key` now.
    fn leased(&self, key: &Key) -> StoreFuture<'_, u64> {
        self.get(key)
    }
    /// The value at `key` (a shared cache's entry, at most `max` bytes), `None` when
    /// absent. Memory keeps no values here (the cache's own memory does): always `None`.
    fn value(&self, key: &Key, max: u64) -> StoreFuture<'_, Option<Vec<u8>>> {
        let _ = (key, max);
        StoreFuture::ready(Ok(None))
    }
    /// Stores `value` at `key` for `ttl_ms`; memory: nothing.
    fn set_value(&self, key: &Key, value: Vec<u8>, ttl_ms: u64) -> StoreFuture<'_, ()> {
        let _ = (key, value, ttl_ms);
        StoreFuture::ready(Ok(()))
    }
    /// Whether replicas share it (`store.backend: redis`).
    fn shared(&self) -> bool {
        false
    }
    /// What `GET /policies` shows of the store: its backend, and for a remote one whether
    /// it answers.
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({"backend": "memory"})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn keys_are_equal_by_text_whoever_made_their_names() {
        let (r, p) = (Arc::<str>::from("rate:a"), Arc::<str>::from("total"));
        let mine = Key::new(&r, &p, 7);
        // Another worker's copies: the same text, other references.
        let theirs = Key::new(&Arc::from("rate:a"), &Arc::from("total"), 7);
        assert_eq!(mine, theirs);
        let h = rustc_hash::FxBuildHasher;
        assert_eq!(h.hash_one(&mine), h.hash_one(&theirs));
        assert_ne!(mine, Key::new(&r, &p, 8));
        assert_ne!(mine, Key::new(&r, &Arc::from("group"), 7));
        assert_ne!(mine, Key::new(&Arc::from("rate:b"), &p, 7));
    }
}
