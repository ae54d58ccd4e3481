//! CONNECT tunnels to a host a policy matches. The bytes inside are TLS that tollgate
//! cannot read, so the policy cannot apply to them (no credentials, cache, limits or
//! diagnosis): an application with `HTTPS_PROXY` set would bypass it without a word.
//! Each such tunnel is counted per policy, named in `GET /policies`, and warned about
//! once per host.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Hosts remembered (and warned about) per policy: a glob can match unboundedly many.
const MAX_HOSTS: usize = 32;

#[derive(Default)]
pub struct Tunnelled {
    count: AtomicU64,
    hosts: Mutex<BTreeSet<Box<str>>>,
}

impl Tunnelled {
    /// A CONNECT to `host`, which policy `policy` matches.
    pub fn note(&self, policy: &str, host: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let first = self
            .hosts
            .lock()
            .map(|mut h| h.len() < MAX_HOSTS && h.insert(host.into()))
            .unwrap_or(false);
        if first {
            tracing::warn!(
                policy,
                host,
                "CONNECT to `{host}` is an opaque TLS tunnel: policy `{policy}` cannot apply to it \
                 (no credentials, cache, limits or diagnosis). Add `{host}` to `intercept.hosts` \
                 to decrypt its tunnels with tollgate's CA, which the application then trusts \
                 (no code change: docs/interception.md), or have the application call tollgate \
                 over plain HTTP: a route and the SDK's base_url, or the header \
                 `x-tollgate-host: {host}` (docs/policies.md: how the application reaches tollgate)"
            );
        }
    }

    /// For `GET /policies`: `None` until a tunnel bypassed the policy.
    pub fn to_json(&self) -> Option<Value> {
        let n = self.count.load(Ordering::Relaxed);
        if n == 0 {
            return None;
        }
        let hosts: Vec<String> = self
            .hosts
            .lock()
            .map(|h| h.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default();
        Some(json!({
            "connects": n,
            "hosts": hosts,
            "note": "CONNECT tunnels (HTTPS_PROXY) are opaque: this policy did not apply to them; add their hosts to intercept.hosts to decrypt them (the application trusts tollgate's CA: docs/interception.md), or call tollgate over plain HTTP (a route, or x-tollgate-host)",
        }))
    }
}
