//! DNS for upstream connections: hickory-resolver, configured from `/etc/resolv.conf`
//! (search domains, `/etc/hosts`) or from `upstream.dns_servers`. Each answer is kept
//! for its records' TTL, up to `upstream.dns_ttl`, so a provider that moves its
//! addresses is followed as soon as its records say (RFC 1035 §3.2.1, RFC 2181 §8).
//! Concurrent lookups of one name are coalesced into one, which runs on its own task:
//! a caller that gives up (its connect deadline) leaves it running for the others and
//! for the cache, rather than leaving the next waiter to ask again. Failures are not
//! cached. Where the
//! system's configuration cannot be read, the system's resolver (getaddrinfo) answers,
//! kept for `dns_ttl`.

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, NameServerConfigGroup, ResolverConfig,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use moka::future::Cache;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The addresses of a name, and how long they may be used.
#[derive(Clone)]
struct Answer {
    ips: Arc<[IpAddr]>,
    ttl: Duration,
}

/// Each answer expires after its own TTL.
struct ByTtl;

impl moka::Expiry<Arc<str>, Answer> for ByTtl {
    fn expire_after_create(&self, _: &Arc<str>, a: &Answer, _: Instant) -> Option<Duration> {
        Some(a.ttl)
    }
}

/// A lookup in flight, awaited by every caller of its name.
type Lookup = Shared<BoxFuture<'static, Result<Answer, String>>>;

#[derive(Clone)]
pub struct Resolver {
    cache: Cache<Arc<str>, Answer>,
    /// The lookups in flight, by name (removed when each ends).
    inflight: Arc<Mutex<HashMap<Arc<str>, Lookup>>>,
    /// `None`: getaddrinfo (the system's configuration could not be read).
    dns: Option<Arc<TokioResolver>>,
    /// The longest an answer is kept (`upstream.dns_ttl`).
    cap: Duration,
}

impl Resolver {
    /// A resolver keeping answers for their TTL, up to `cap`; asking `servers`
    /// (`ip:port`), or the system's when there are none.
    pub fn new(cap: Duration, servers: &[SocketAddr]) -> Self {
        let builder = if servers.is_empty() {
            match TokioResolver::builder_tokio() {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(
                        "cannot read the system's DNS configuration ({e}): names are resolved by getaddrinfo and kept for upstream.dns_ttl, whatever their TTL"
                    );
                    None
                }
            }
        } else {
            // Each server over UDP, then TCP for answers too large for a datagram.
            let group: NameServerConfigGroup = servers
                .iter()
                .flat_map(|s| [Protocol::Udp, Protocol::Tcp].map(|p| NameServerConfig::new(*s, p)))
                .collect::<Vec<_>>()
                .into();
            Some(TokioResolver::builder_with_config(
                ResolverConfig::from_parts(None, Vec::new(), group),
                TokioConnectionProvider::default(),
            ))
        };
        let dns = builder.map(|mut b| {
            let o = b.options_mut();
            // Both families, as getaddrinfo gives them; the connector tries each.
            o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
            // hickory's own cache never keeps an answer longer than ours.
            o.positive_max_ttl = Some(cap);
            Arc::new(b.build())
        });
        Self {
            cache: Cache::builder()
                .max_capacity(10_000)
                .expire_after(ByTtl)
                .build(),
            inflight: Arc::default(),
            dns,
            cap,
        }
    }

    /// Addresses for `host` (an IP literal is returned as is, without a lookup).
    pub async fn resolve(&self, host: &Arc<str>, port: u16) -> Result<Vec<SocketAddr>, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let answer = match self.cache.get(host).await {
            Some(a) => a,
            None => self.lookup(host).await?,
        };
        Ok(answer
            .ips
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect())
    }
}

impl Resolver {
    /// The lookup of `host` in flight, or a new one on its own task: it runs to its end
    /// whoever stops waiting, and puts its answer in the cache.
    fn lookup(&self, host: &Arc<str>) -> Lookup {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = inflight.get(host) {
            return l.clone();
        }
        let (name, dns, cap) = (host.clone(), self.dns.clone(), self.cap);
        let (cache, all) = (self.cache.clone(), self.inflight.clone());
        let task = tokio::spawn(async move {
            let found = match dns {
                // `localhost` is what the hosts file says, as getaddrinfo reads it:
                // hickory answers it with both 127.0.0.1 and ::1 (RFC 6761 §6.3)
                // where the file may name one.
                Some(dns) if !is_localhost(&name) => lookup(&dns, &name, cap).await,
                _ => system(&name, cap).await,
            };
            if let Ok(a) = &found {
                cache.insert(name.clone(), a.clone()).await;
            }
            all.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
            found.map_err(|e| e.to_string())
        });
        let l = async move { task.await.unwrap_or_else(|e| Err(e.to_string())) }
            .boxed()
            .shared();
        inflight.insert(host.clone(), l.clone());
        l
    }
}

fn is_localhost(name: &str) -> bool {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    n == "localhost" || n.ends_with(".localhost")
}

/// Asks hickory: the addresses and their TTL (the smallest of the records', as
/// `valid_until` gives it), capped at `cap`.
async fn lookup(dns: &TokioResolver, name: &str, cap: Duration) -> Result<Answer, std::io::Error> {
    let found = dns.lookup_ip(name).await.map_err(std::io::Error::other)?;
    let ttl = found
        .valid_until()
        .saturating_duration_since(Instant::now())
        .min(cap);
    let ips: Vec<IpAddr> = found.iter().collect();
    if ips.is_empty() {
        return Err(std::io::Error::other("no addresses"));
    }
    Ok(Answer {
        ips: ips.into(),
        ttl,
    })
}

/// getaddrinfo on tokio's blocking pool, kept for `cap`.
async fn system(name: &str, cap: Duration) -> Result<Answer, std::io::Error> {
    let ips: Vec<IpAddr> = tokio::net::lookup_host((name, 0))
        .await?
        .map(|a| a.ip())
        .collect();
    if ips.is_empty() {
        return Err(std::io::Error::other("no addresses"));
    }
    Ok(Answer {
        ips: ips.into(),
        ttl: cap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn localhost_resolves_as_the_hosts_file_says() {
        let r = Resolver::new(Duration::from_secs(30), &[]);
        let got = r.resolve(&Arc::from("localhost"), 80).await;
        let system: Vec<SocketAddr> = tokio::net::lookup_host(("localhost", 80))
            .await
            .unwrap()
            .collect();
        assert_eq!(got.as_deref().ok(), Some(&system[..]));
        assert!(
            got.as_ref()
                .is_ok_and(|a| a.iter().all(|a| a.ip().is_loopback())),
            "{got:?}"
        );
    }
}
