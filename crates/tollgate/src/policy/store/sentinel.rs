//! A Redis whose primary Sentinel names: each worker thread asks the Sentinels for the
//! primary (redis-rs checks its `ROLE`), keeps one multiplexed connection to it, and drops
//! that connection on any failure but a missing script, so that the next operation asks
//! the Sentinels again and a failover is followed without a restart (in the meantime the
//! store's circuit and `on_error` hold).

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

/// One worker's connection to the current primary.
pub struct Primary {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    conn: Mutex<Option<MultiplexedConnection>>,
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
            conn: Mutex::new(None),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                // Later than the store's own bound, which fires first.
                .set_response_timeout(Some(timeout * 2)),
        }))
    }

    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let client = self.sentinel.lock().await.async_get_client().await?;
        let c = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        if let Ok(mut slot) = self.conn.lock() {
            *slot = Some(c.clone());
        }
        Ok(c)
    }

    fn current(&self) -> Option<MultiplexedConnection> {
        self.conn.lock().ok().and_then(|c| c.clone())
    }

    /// After a failure: the next operation asks the Sentinels again (the primary may have
    /// died, or been demoted and answer `READONLY`).
    fn after<T>(&self, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r
            && e.kind() != ErrorKind::Server(ServerErrorKind::NoScript)
            && let Ok(mut slot) = self.conn.lock()
        {
            *slot = None;
        }
        r
    }

    pub fn command<'a>(&'a self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut c = self.after(self.connection().await)?;
            let r = c.req_packed_command(cmd).await;
            self.after(r)
        })
    }

    pub fn commands<'a>(
        &'a self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut c = self.after(self.connection().await)?;
            let r = c.req_packed_commands(cmd, offset, count).await;
            self.after(r)
        })
    }
}
