//! The Redis [`Store`](super::Store): every operation one round trip (a Lua script sent
//! as `EVALSHA`, loaded again on `NOSCRIPT`; the admission every counted request makes,
//! native commands pipelined), on one multiplexed connection per worker
//! thread (requests of a worker pipeline on it instead of waiting for each other), kept
//! alive and reconnected by redis-rs's connection manager. Keys put the resource in a
//! `{hash tag}`, so all of one resource's keys sit in one Redis Cluster slot, and every
//! script touches one key: the store works against a Cluster as against one Redis.

use super::sentinel::{Primary, Sentinels};
use super::{Added, Cause, Key, StoreError};
use redis::Script;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// Takes a block for `ARGV[1]` admissions: `ARGV[2]` of them, or what is left below
/// `ARGV[3]` when less (at least `ARGV[1]`); expiry at `ARGV[4]` (unix ms, 0: none).
/// Returns `{granted, count}`, `granted` 0 when `ARGV[1]` does not fit.
static GRANT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
local room = tonumber(ARGV[3]) - c
if room < n then return {0, c} end
local g = math.max(n, math.min(tonumber(ARGV[2]), room))
c = redis.call('INCRBY', KEYS[1], g)
local e = tonumber(ARGV[4])
if e > 0 then redis.call('PEXPIREAT', KEYS[1], e) end
return {g, c}",
    )
});

/// Adds `ARGV[1]` when the result stays within `ARGV[2]`, checked before adding, so the
/// counter never shows more than the limit (another replica reading it meanwhile sees only
/// what was admitted); expiry at `ARGV[3]` (unix ms, 0: none). Returns `{taken, count}`.
/// Lua compares in doubles: exact up to 2^53 (tokens, and budgets up to $9 million in
/// nano-dollars); above that an amount within a few units of the limit may be judged
/// either way.
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

/// Redis's own clock in ms, so that replicas whose clocks differ agree on leases.
const NOW: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// Takes a lease (member `ARGV[3]`, ending `ARGV[2]` ms from now) when fewer than
/// `ARGV[1]` unexpired leases are held; the set itself expires once its last lease has.
static LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1"
    ))
});

/// Extends lease `ARGV[2]` to `ARGV[1]` ms from now, if it is still held.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}local ttl = tonumber(ARGV[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1"
    ))
});

/// Unexpired leases.
static LEASED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')"
    ))
});

/// Gives each store its own connections on each thread.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's connection to each store (by the store's id, with the generation it
    /// was made in): a worker's tasks share one, pipelined.
    static CONNECTIONS: RefCell<Vec<(u64, u64, Conn)>> = const { RefCell::new(Vec::new()) };
}

/// Where the store's Redis is: one server, a Cluster named by some of its nodes, or the
/// primary Sentinels name.
enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
    /// One connection for all workers (see [`super::sentinel`]).
    Sentinel(Arc<Primary>),
}

/// A connection being made, shared by the operations that wait for it.
type Connecting = futures_util::future::Shared<
    futures_util::future::BoxFuture<'static, Result<MultiplexedConnection, redis::RedisError>>,
>;

/// A worker's connection to any of them: each pipelines; a failed one is replaced (the
/// store's generation), a Cluster's and a Sentinel's reconnect on their own.
#[derive(Clone)]
enum Conn {
    /// One server over TCP or TLS, its reads bounded ([`super::capped`]).
    Single(Connecting),
    /// One server on a Unix socket: redis-rs's connection manager.
    Managed(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<Primary>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => {
                let c = c.clone();
                Box::pin(async move { c.await?.req_packed_command(cmd).await })
            }
            Conn::Managed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(p) => p.command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => {
                let c = c.clone();
                Box::pin(async move { c.await?.req_packed_commands(cmd, offset, count).await })
            }
            Conn::Managed(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Sentinel(p) => p.commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(_) => 0,
            Conn::Managed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(_) => 0,
        }
    }
}

pub struct Redis {
    id: u64,
    /// Lease ids: a random start (replicas' ids do not meet) and a counter.
    lease_base: u64,
    leases: AtomicU64,
    /// Raised by [`Redis::reconnect`]: a worker's connection of an older generation is
    /// replaced before its next use.
    generation: AtomicU64,
    client: Client,
    prefix: String,
    timeout: Duration,
    /// What value-reading commands announced they may read ([`super::capped::Credit`]).
    credit: super::capped::Credit,
}

impl Redis {
    /// A store on the Redis at `url`, on the Cluster whose nodes `cluster` names, or on
    /// the primary `sentinels` name (nothing is connected until the first operation);
    /// `timeout` bounds each connection attempt and each answer.
    pub fn new(
        url: &str,
        cluster: &[&str],
        sentinels: Option<Sentinels>,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, String> {
        let client = if let Some(s) = sentinels {
            Client::Sentinel(Primary::new(&s, timeout).map_err(|e| e.to_string())?)
        } else if cluster.is_empty() {
            Client::Single(redis::Client::open(url).map_err(|e| e.to_string())?)
        } else {
            Client::Cluster(ClusterClient::new(cluster.to_vec()).map_err(|e| e.to_string())?)
        };
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            lease_base: h.finish(),
            leases: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            client,
            prefix: prefix.to_owned(),
            timeout,
            credit: Default::default(),
        })
    }

    /// How the store spells `key`: `PREFIX:{RESOURCE}:PART:WINDOW`, the resource as the
    /// hash tag (braces inside it would move the tag, so they become `_`).
    pub fn key(&self, key: &Key) -> String {
        use std::fmt::Write as _;
        // Built in one allocation: this runs once per admission.
        let mut k =
            String::with_capacity(self.prefix.len() + key.resource.len() + key.part.len() + 26);
        k.push_str(&self.prefix);
        k.push_str(":{");
        if key.resource.contains(['{', '}']) {
            k.push_str(&key.resource.replace(['{', '}'], "_"));
        } else {
            k.push_str(&key.resource);
        }
        k.push_str("}:");
        k.push_str(&key.part);
        let _ = write!(k, ":{}", key.window);
        k
    }

    /// This thread's connection, made (lazily: it connects on first use, on this
    /// thread's runtime) the first time this thread asks.
    fn connection(&self) -> Result<Conn, StoreError> {
        let generation = self.generation.load(Ordering::Relaxed);
        CONNECTIONS.with(|all| {
            let mut all = all.borrow_mut();
            if let Some(i) = all.iter().position(|(id, _, _)| *id == self.id) {
                if all[i].1 == generation {
                    return Ok(all[i].2.clone());
                }
                all.swap_remove(i);
            }
            let c = match &self.client {
                Client::Single(client) if super::capped::handles(client.get_connection_info()) => {
                    use futures_util::FutureExt;
                    let info = client.get_connection_info().clone();
                    let connect = super::capped::connect(info, self.timeout, self.credit.clone());
                    Conn::Single(connect.boxed().shared())
                }
                Client::Single(client) => {
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(self.timeout))
                        // Later than the store's own bound, which then fires first and
                        // counts the wait as a timeout.
                        .set_response_timeout(Some(self.timeout * 2))
                        // One attempt, whose own error is then seen (a wrong password is
                        // `auth`, not a timeout spent in a retry's backoff): the store's
                        // circuit is the backoff, and its next try takes a new connection.
                        .set_number_of_retries(0);
                    Conn::Managed(
                        ConnectionManager::new_lazy_with_config(client.clone(), config)
                            .map_err(error)?,
                    )
                }
                Client::Cluster(client) => {
                    let config = ClusterConfig::new()
                        .set_connection_timeout(self.timeout)
                        .set_response_timeout(self.timeout * 2);
                    Conn::Cluster(client.get_pending_async_connection_with_config(config))
                }
                Client::Sentinel(p) => Conn::Sentinel(p.clone()),
            };
            all.push((self.id, generation, c.clone()));
            Ok(c)
        })
    }

    /// After a failure: every worker's next operation takes a new connection (a Sentinel
    /// connection follows its own rule, see [`super::sentinel`]). A connection that failed
    /// may be broken without knowing it, or in its own reconnect backoff, which would fail
    /// the first tries after Redis is back.
    pub fn reconnect(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `script` on `key` with `args` (all of them numbers) on this thread's
    /// connection: one round trip (`EVALSHA`, the script loaded again on `NOSCRIPT`).
    fn script<T: redis::FromRedisValue + Send + 'static>(
        &self,
        script: &'static Script,
        key: &Key,
        args: &[u64],
    ) -> impl Future<Output = Result<T, StoreError>> + Send + use<T> {
        let conn = self.connection();
        let mut call = script.key(self.key(key));
        for a in args {
            call.arg(*a);
        }
        async move { call.invoke_async(&mut conn?).await.map_err(error) }
    }

    /// One command on `key` (`GET`, `DEL`, `ZREM` …) with `args` after it.
    fn command<T: redis::FromRedisValue + Send + 'static>(
        &self,
        name: &str,
        key: &Key,
        args: &[u64],
    ) -> impl Future<Output = Result<T, StoreError>> + Send + use<T> {
        let conn = self.connection();
        let mut cmd = redis::cmd(name);
        cmd.arg(self.key(key)).arg(args);
        async move { cmd.query_async(&mut conn?).await.map_err(error) }
    }

    /// Adds `n` when the result stays within `limit`. An amount (`n` > 1: a token
    /// limit's or a budget's reservation) is checked before it is added, in one script
    /// ([`ADD`]): added first, a refused reservation would show the other replicas a
    /// counter past the limit until it was taken back, and they would refuse calls that
    /// fit. One request (`n` = 1), and a correction added whatever the limit: `INCRBY`
    /// (and `PEXPIREAT` for a
    /// counter that expires) pipelined, one round trip of native commands, since a Lua
    /// script costs Redis 11 µs more per call in a tight loop and about 70 µs more when
    /// calls come apart (measured with `INFO commandstats`, Redis 7.0). A result over the
    /// limit is refused and `n` taken back (a second round trip, only when refusing: the
    /// known-full cache keeps later refusals local). A concurrent request that sees the
    /// counter between the two may be refused as well: this errs towards refusing, never
    /// past the limit.
    pub fn add(
        &self,
        key: &Key,
        n: u64,
        limit: u64,
        expires_ms: u64,
    ) -> impl Future<Output = Result<Added, StoreError>> + Send + use<> {
        let conn = self.connection();
        let k = self.key(key);
        let checked = (n > 1 && limit != u64::MAX)
            .then(|| self.script::<(u8, u64)>(&ADD, key, &[n, limit, expires_ms]));
        let mut pipe = redis::pipe();
        pipe.cmd("INCRBY").arg(&k).arg(n);
        if expires_ms > 0 {
            pipe.cmd("PEXPIREAT").arg(&k).arg(expires_ms).ignore();
        }
        async move {
            if let Some(run) = checked {
                let (taken, count) = run.await?;
                return Ok(Added {
                    taken: taken == 1,
                    count,
                });
            }
            let mut conn = conn?;
            let (count,): (u64,) = pipe.query_async(&mut conn).await.map_err(error)?;
            if count <= limit {
                return Ok(Added { taken: true, count });
            }
            let mut undo = SUB.key(k);
            undo.arg(n);
            undo.invoke_async::<u64>(&mut conn).await.map_err(error)?;
            Ok(Added {
                taken: false,
                count: count - n,
            })
        }
    }

    /// A block of up to `size` admissions holding `n`: `(granted, count)`, granted 0 when
    /// `n` does not fit under `limit`.
    pub fn grant(
        &self,
        key: &Key,
        n: u64,
        size: u64,
        limit: u64,
        expires_ms: u64,
    ) -> impl Future<Output = Result<(u64, u64), StoreError>> + Send + use<> {
        self.script(&GRANT, key, &[n, size, limit, expires_ms])
    }

    pub fn sub(
        &self,
        key: &Key,
        n: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let run = self.script::<u64>(&SUB, key, &[n]);
        async move { run.await.map(drop) }
    }

    pub fn get(&self, key: &Key) -> impl Future<Output = Result<u64, StoreError>> + Send + use<> {
        let run = self.command::<Option<u64>>("GET", key, &[]);
        async move { Ok(run.await?.unwrap_or(0)) }
    }

    /// The value at `key` (a shared cache's entry), `None` when absent; at most `max`
    /// bytes are expected (the connection's read bound is raised by that much first).
    pub fn value(
        &self,
        key: &Key,
        max: u64,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send + use<> {
        // The reply's framing: `$<len>\r\n` … `\r\n`.
        self.credit
            .fetch_add(max.saturating_add(32), Ordering::Relaxed);
        self.command::<Option<Vec<u8>>>("GET", key, &[])
    }

    /// Stores `value` at `key` for `ttl_ms` (`SET … PX`): the key never outlives it.
    pub fn set_value(
        &self,
        key: &Key,
        value: Vec<u8>,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let conn = self.connection();
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(key))
            .arg(value)
            .arg("PX")
            .arg(ttl_ms.max(1));
        async move { cmd.query_async::<()>(&mut conn?).await.map_err(error) }
    }

    pub fn reset(&self, key: &Key) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let run = self.command::<u64>("DEL", key, &[]);
        async move { run.await.map(drop) }
    }

    pub fn raise(
        &self,
        key: &Key,
        until_ms: u64,
        expires_ms: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + use<> {
        self.script(&RAISE, key, &[until_ms, expires_ms])
    }

    /// A lease on one of `limit` slots: its id (never [`super::LOCAL_LEASE`]), or `None`.
    pub fn lease(
        &self,
        key: &Key,
        limit: u64,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send + use<> {
        let id = self.next_lease_id();
        let run = self.script::<u8>(&LEASE, key, &[limit, ttl_ms, id]);
        async move { Ok((run.await? == 1).then_some(id)) }
    }

    /// A lease id no other lease of this process holds: the random start plus a counter
    /// (a bijection, so ids repeat only after 2^64 leases), skipping
    /// [`super::LOCAL_LEASE`], which names a slot counted in memory.
    fn next_lease_id(&self) -> u64 {
        loop {
            let id = self
                .lease_base
                .wrapping_add(self.leases.fetch_add(1, Ordering::Relaxed));
            if id != super::LOCAL_LEASE {
                return id;
            }
        }
    }

    pub fn renew(
        &self,
        key: &Key,
        id: u64,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let run = self.script::<u8>(&RENEW, key, &[ttl_ms, id]);
        async move { run.await.map(drop) }
    }

    pub fn unlease(
        &self,
        key: &Key,
        id: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let run = self.command::<u64>("ZREM", key, &[id]);
        async move { run.await.map(drop) }
    }

    pub fn leased(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + use<> {
        self.script(&LEASED, key, &[])
    }
}

/// A redis-rs error as the store's, with its cause: its text names the failure
/// (connection refused, timed out, a server error), never the URL and so never its
/// password.
fn error(e: redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind};
    let cause = if e.is_timeout() {
        Cause::Timeout
    } else if e.to_string().contains(super::capped::TOO_LARGE) {
        Cause::Reply
    } else if e.kind() == ErrorKind::AuthenticationFailed
        || e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
    {
        Cause::Auth
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.kind() == ErrorKind::ClusterConnectionNotFound
    {
        Cause::Connect
    } else if matches!(e.kind(), ErrorKind::Parse | ErrorKind::UnexpectedReturnType) {
        Cause::Reply
    } else {
        Cause::Server
    };
    StoreError::new(cause, format!("redis: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_prefix_resource_as_hash_tag_part_window() {
        // Nothing connects until the first operation.
        let r = Redis::new(
            "redis://127.0.0.1:1",
            &[],
            None,
            "tg",
            Duration::from_millis(5),
        )
        .unwrap();
        let key = |resource: &str| Key::new(&Arc::from(resource), &Arc::from("all"), 42);
        assert_eq!(r.key(&key("github")), "tg:{github}:all:42");
        // Braces in a name would move Redis Cluster's hash tag.
        assert_eq!(r.key(&key("a{b}c")), "tg:{a_b_c}:all:42");
    }

    #[test]
    fn lease_ids_are_distinct_and_never_the_local_lease() {
        let mut r = Redis::new(
            "redis://127.0.0.1:1",
            &[],
            None,
            "tg",
            Duration::from_millis(5),
        )
        .unwrap();
        // A start just below the wrap, so the counter passes through 0.
        r.lease_base = u64::MAX - 2;
        let ids: Vec<u64> = (0..6).map(|_| r.next_lease_id()).collect();
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
        assert!(!ids.contains(&super::super::LOCAL_LEASE), "{ids:?}");
    }
}
