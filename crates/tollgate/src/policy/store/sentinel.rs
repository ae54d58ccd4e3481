//! A Redis whose primary Sentinel names: the store asks the Sentinels for the primary
//! (redis-rs checks its `ROLE`), keeps one multiplexed connection to it that every worker
//! pipelines on, and drops that connection on any failure but a missing script, so that
//! the next operation asks the Sentinels again and a failover is followed without a
//! restart (in the meantime the store's circuit and `on_error` hold). One connection, not
//! one per worker: a failover is then found once, not once per worker, each finding
//! opening the store's circuit again.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, ErrorKind, RedisResult, ServerErrorKind, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the Sentinels are and which primary to ask them for.
#[derive(Clone)]
pub struct Sentinels {
    pub nodes: Vec<String>,
    pub master: String,
    /// The primary's password (the Sentinels' own go in their URLs).
    pub password: Option<String>,
}

/// The connection to the current primary, shared by the workers.
pub struct Primary {
    /// Held by the one task that asks the Sentinels.
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The connection and its generation: a failure drops it only if it is still the one
    /// that failed.
    conn: Mutex<(u64, Option<MultiplexedConnection>)>,
    config: AsyncConnectionConfig,
}

impl Primary {
    pub fn new(s: &Sentinels, timeout: Duration) -> RedisResult<Arc<Self>> {
        let mut redis = redis::RedisConnectionInfo::default();
        if let Some(p) = &s.password {
            redis = redis.set_password(p);
        }
        let mut info = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis);
        // Sentinels reached over TLS name a primary reached over TLS.
        if s.nodes.iter().any(|n| n.starts_with("rediss://")) {
            info = info.set_tls_mode(redis::TlsMode::Secure);
        }
        let client = SentinelClient::build(
            s.nodes.clone(),
            s.master.clone(),
            Some(info),
            SentinelServerType::Master,
        )?;
        Ok(Arc::new(Self {
            sentinel: tokio::sync::Mutex::new(client),
            conn: Mutex::new((0, None)),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                // Later than the store's own bound, which fires first.
                .set_response_timeout(Some(timeout * 2)),
        }))
    }

    /// The connection to the primary and its generation; made (once, however many ask
    /// together) when there is none.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let mut sentinel = self.sentinel.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let client = sentinel.async_get_client().await?;
        let c = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let mut slot = self.conn.lock().map_err(|_| poisoned())?;
        slot.0 += 1;
        slot.1 = Some(c.clone());
        Ok((slot.0, c))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        let slot = self.conn.lock().ok()?;
        slot.1.clone().map(|c| (slot.0, c))
    }

    /// After a failure on connection `generation`: the next operation asks the Sentinels
    /// again (the primary may have died, or been demoted and answer `READONLY`).
    fn after<T>(&self, generation: u64, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r
            && e.kind() != ErrorKind::Server(ServerErrorKind::NoScript)
            && let Ok(mut slot) = self.conn.lock()
            && slot.0 == generation
        {
            slot.1 = None;
        }
        r
    }

    pub fn command<'a>(&'a self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut c) = self.connection().await?;
            let r = c.req_packed_command(cmd).await;
            self.after(generation, r)
        })
    }

    pub fn commands<'a>(
        &'a self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut c) = self.connection().await?;
            let r = c.req_packed_commands(cmd, offset, count).await;
            self.after(generation, r)
        })
    }
}

fn poisoned() -> redis::RedisError {
    redis::RedisError::from((ErrorKind::Client, "sentinel connection lock poisoned"))
}
