//! DNS with a TTL cache: concurrent lookups of one name are coalesced, failures are not cached.

use moka::future::Cache;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct Resolver {
    cache: Cache<Arc<str>, Arc<[IpAddr]>>,
}

impl Resolver {
    pub fn new(ttl: Duration) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build(),
        }
    }

    /// Addresses for `host` (an IP literal is returned as is, without a lookup).
    pub async fn resolve(&self, host: &Arc<str>, port: u16) -> Result<Vec<SocketAddr>, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let name = host.clone();
        let ips = self
            .cache
            .try_get_with(host.clone(), async move {
                // getaddrinfo runs on tokio's blocking pool.
                let addrs = tokio::net::lookup_host((&*name, 0)).await?;
                let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                if ips.is_empty() {
                    return Err(std::io::Error::other("no addresses"));
                }
                Ok::<_, std::io::Error>(Arc::from(ips))
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
    }
}
