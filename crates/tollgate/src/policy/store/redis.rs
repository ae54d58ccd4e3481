//! The Redis [`Store`](super::Store): every operation one round trip (a Lua script sent
//! as `EVALSHA`, loaded again on `NOSCRIPT`), on one multiplexed connection per worker
//! thread (requests of a worker pipeline on it instead of waiting for each other), kept
//! alive and reconnected by redis-rs's connection manager. Keys put the resource in a
//! `{hash tag}`, so all of one resource's keys sit in one Redis Cluster slot.

use super::{Added, Key, StoreError};
use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::cell::RefCell;
use std::future::Future;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Adds `ARGV[1]` when the result stays within `ARGV[2]`; expiry at `ARGV[3]` (unix ms,
/// 0: none). Returns `{taken, count}`.
static ADD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
if c + n > tonumber(ARGV[2]) then return {0, c} end
c = redis.call('INCRBY', KEYS[1], n)
local e = tonumber(ARGV[3])
if e > 0 then redis.call('PEXPIREAT', KEYS[1], e) end
return {1, c}",
    )
});

/// Takes `ARGV[1]` back, never below 0; a counter without expiry that reaches 0 is removed.
static SUB: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
if c > n then return redis.call('DECRBY', KEYS[1], n) end
if c == 0 then return 0 end
if redis.call('PTTL', KEYS[1]) == -1 then redis.call('DEL', KEYS[1]) return 0 end
redis.call('SET', KEYS[1], 0, 'KEEPTTL')
return 0",
    )
});

/// Raises the deadline to `ARGV[1]` when later; expiry at `ARGV[2]` (0: none). Returns
/// the deadline.
static RAISE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local d = tonumber(redis.call('GET', KEYS[1]) or '0')
local u = tonumber(ARGV[1])
if u > d then d = u end
redis.call('SET', KEYS[1], d)
local e = tonumber(ARGV[2])
if e > 0 then redis.call('PEXPIREAT', KEYS[1], e) end
return d",
    )
});

/// Gives each store its own connections on each thread.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's connection to each store: a worker's tasks share one, pipelined.
    static CONNECTIONS: RefCell<Vec<(u64, ConnectionManager)>> = const { RefCell::new(Vec::new()) };
}

pub struct Redis {
    id: u64,
    client: redis::Client,
    prefix: String,
    timeout: Duration,
}

impl Redis {
    /// A store on the Redis at `url` (nothing is connected until the first operation);
    /// `timeout` bounds each connection attempt and each answer.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            client,
            prefix: prefix.to_owned(),
            timeout,
        })
    }

    /// How the store spells `key`: `PREFIX:{RESOURCE}:PART:WINDOW`, the resource as the
    /// hash tag (braces inside it would move the tag, so they become `_`).
    pub fn key(&self, key: &Key) -> String {
        let resource = key.resource.replace(['{', '}'], "_");
        format!("{}:{{{resource}}}:{}:{}", self.prefix, key.part, key.window)
    }

    /// This thread's connection, made (lazily: it connects on first use, on this
    /// thread's runtime) the first time this thread asks.
    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        CONNECTIONS.with(|all| {
            let mut all = all.borrow_mut();
            if let Some((_, c)) = all.iter().find(|(id, _)| *id == self.id) {
                return Ok(c.clone());
            }
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.timeout))
                .set_response_timeout(Some(self.timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_secs(2));
            let c = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
                .map_err(error)?;
            all.push((self.id, c.clone()));
            Ok(c)
        })
    }

    pub fn add(
        &self,
        key: &Key,
        n: u64,
        limit: u64,
        expires_ms: u64,
    ) -> impl Future<Output = Result<Added, StoreError>> + Send + use<> {
        let (conn, key) = (self.connection(), self.key(key));
        async move {
            let mut conn = conn?;
            let (taken, count): (u8, u64) = ADD
                .key(key)
                .arg(n)
                .arg(limit)
                .arg(expires_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(error)?;
            Ok(Added {
                taken: taken == 1,
                count,
            })
        }
    }

    pub fn sub(
        &self,
        key: &Key,
        n: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let (conn, key) = (self.connection(), self.key(key));
        async move {
            let mut conn = conn?;
            let _: u64 = SUB
                .key(key)
                .arg(n)
                .invoke_async(&mut conn)
                .await
                .map_err(error)?;
            Ok(())
        }
    }

    pub fn get(&self, key: &Key) -> impl Future<Output = Result<u64, StoreError>> + Send + use<> {
        let (conn, key) = (self.connection(), self.key(key));
        async move {
            let mut conn = conn?;
            let v: Option<u64> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut conn)
                .await
                .map_err(error)?;
            Ok(v.unwrap_or(0))
        }
    }

    pub fn reset(&self, key: &Key) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let (conn, key) = (self.connection(), self.key(key));
        async move {
            let mut conn = conn?;
            let _: u64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .map_err(error)?;
            Ok(())
        }
    }

    pub fn raise(
        &self,
        key: &Key,
        until_ms: u64,
        expires_ms: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + use<> {
        let (conn, key) = (self.connection(), self.key(key));
        async move {
            let mut conn = conn?;
            RAISE
                .key(key)
                .arg(until_ms)
                .arg(expires_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(error)
        }
    }
}

/// A redis-rs error as the store's: its text names the failure (connection refused,
/// timed out, a server error), never the URL and so never its password.
fn error(e: redis::RedisError) -> StoreError {
    StoreError(format!("redis: {e}"))
}
