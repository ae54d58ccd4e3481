//! HTTPS interception (#25): CONNECT tunnels to the hosts a user chose (`intercept.hosts`)
//! are decrypted with leaf certificates from a local CA, and their requests run the whole
//! pipeline as `https` requests to the CONNECT host; every other tunnel stays a byte relay
//! (tunnel.rs). The CA is made, shown and exported by `tollgate ca` (`ca.rs`); leaves are
//! made per host on demand and cached (`leaves.rs`); a client that refuses them is
//! remembered (`refusals.rs`); the client's TLS is terminated by `terminate.rs`, and the
//! server serves what it yields (`server/decrypted.rs`).

pub mod ca;
pub mod leaves;
mod refusals;
pub mod terminate;

use crate::error::ProxyError;
use crate::glob::HostGlob;
use crate::metrics::{KindLabels, Metrics};
use crate::target::Target;
use ca::Ca;
use leaves::Leaves;
use refusals::Refusals;
use std::sync::Arc;
use std::time::Duration;

/// The validated `intercept:` section.
#[derive(Debug, Clone, Default)]
pub struct Intercept {
    pub hosts: Vec<HostGlob>,
    /// Loaded when the config is (`check` loads it too); `None` when no host is named
    /// and no CA is configured.
    pub ca: Option<Arc<Ca>>,
    pub tunnel_refused_for: Duration,
    pub max_hosts: u64,
}

impl Intercept {
    /// Whether CONNECT tunnels to `host` (lower-case) are decrypted.
    pub fn covers(&self, host: &str) -> bool {
        self.hosts.iter().any(|g| g.matches(host))
    }
}

/// The target of a decrypted tunnel, carried by each of its requests (a request
/// extension): it is their upstream whatever their `Host` says (a different host gets 421).
#[derive(Clone)]
pub struct Intercepted(pub Target);

/// Checks that a decrypted request is for its tunnel's host (its `:authority`, or else
/// its `Host`; no port check: the tunnel's port is the one connected to). Another host
/// gets 421 (RFC 9110 §15.5.20): its certificate was not made for it, and sending it to
/// the tunnel's host would be domain fronting through the proxy.
pub fn same_host<B>(req: &http::Request<B>, target: &Target) -> Result<(), ProxyError> {
    let named = match req.uri().authority() {
        Some(a) => a.host(),
        None => match req.headers().get(http::header::HOST) {
            Some(h) => host_of(h.to_str().unwrap_or_default()),
            None => return Ok(()),
        },
    };
    let host = named
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.');
    if host.eq_ignore_ascii_case(&target.host) {
        return Ok(());
    }
    // The same address spelt another way (`127.1`, `2130706433`, `0x7f000001`,
    // `[::ffff:127.0.0.1]` for 127.0.0.1): compared as the addresses they mean, as the
    // egress rules compare them.
    if let (Some(a), Some(b)) = (
        crate::egress::canonical_ip(host),
        crate::egress::canonical_ip(&target.host),
    ) && a == b
    {
        return Ok(());
    }
    Err(ProxyError::Misdirected(format!(
        "this connection is a decrypted tunnel to `{}`; a request for `{host}` needs a tunnel of its own",
        target.host
    )))
}

/// The host of a `Host` value: `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_of(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
}

/// A CONNECT tunnel to decrypt, handed by the request path to the server: the client's
/// connection once the 200 is written, the tunnel's target, and the request id of the
/// CONNECT (for the logs).
pub struct Decrypt {
    pub upgrade: hyper::upgrade::OnUpgrade,
    pub target: Target,
    pub interceptor: Arc<Interceptor>,
    pub id: http::HeaderValue,
    /// The client socket's ACK on demand (an HTTP/1.1 CONNECT's), for the tunnel's
    /// requests whose bodies are still to come.
    pub ack: Option<crate::conns::AckNow>,
}

/// What decrypting needs at run time, shared by every worker: the leaves and the
/// refusals. Kept across reloads while the CA and the cache size stay the same.
pub struct Interceptor {
    pub leaves: Arc<Leaves>,
    refusals: Refusals,
    fingerprint: String,
    max_hosts: u64,
    metrics: Metrics,
}

impl Interceptor {
    /// The interceptor for `settings`, `previous`'s when it still fits; `None` when no
    /// host is intercepted.
    pub fn build(
        settings: &Intercept,
        previous: Option<&Arc<Interceptor>>,
        metrics: &Metrics,
    ) -> Option<Arc<Interceptor>> {
        let ca = settings
            .ca
            .as_ref()
            .filter(|_| !settings.hosts.is_empty())?;
        let fingerprint = ca.fingerprint();
        if let Some(p) = previous
            && p.fingerprint == fingerprint
            && p.max_hosts == settings.max_hosts
        {
            return Some(p.clone());
        }
        Some(Arc::new(Interceptor {
            leaves: Leaves::new(
                ca.clone(),
                settings.max_hosts,
                metrics.intercept_leaves.clone(),
            ),
            refusals: Refusals::new(settings.max_hosts),
            fingerprint,
            max_hosts: settings.max_hosts,
            metrics: metrics.clone(),
        }))
    }

    /// Whether this CONNECT to an intercepted `host` is decrypted: not when a client
    /// refused its certificate within `tunnel_refused_for` (then it is relayed untouched).
    pub fn decrypts(&self, host: &str, tunnel_refused_for: Duration) -> bool {
        let decrypt =
            tunnel_refused_for.is_zero() || !self.refusals.within(host, tunnel_refused_for);
        let kind = if decrypt { "decrypted" } else { "tunnelled" };
        self.count(&self.metrics.intercepted, kind);
        decrypt
    }

    fn count(
        &self,
        family: &prometheus_client::metrics::family::Family<
            KindLabels,
            prometheus_client::metrics::counter::Counter,
        >,
        kind: &'static str,
    ) {
        family.get_or_create(&KindLabels { kind }).inc();
    }
}
