//! Credentials: a bearer token, basic auth, an API-key header or query parameter, set on
//! every attempt (the last stage, so no secret reaches a cache key, a log line or a
//! metric). Several accounts rotate round robin; an account the provider answered 429 is
//! skipped until its `Retry-After` (or the cooldown) has passed, and a retry after that
//! 429 goes at once to an account that is not cooling down.

use crate::body::Body;
use crate::error::ProxyError;
use crate::policy::chain::{BoxFuture, Exchange, Flow, Outcome, Remedy, Stage};
use crate::policy::{clock, provider_hints};
use crate::secret::Secret;
use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// One account's credential, ready to set.
#[derive(Clone)]
pub enum Credential {
    /// `Authorization` (bearer, basic) or an API-key header; the value marked sensitive.
    Header(HeaderName, HeaderValue),
    /// A query parameter; the value percent-encoded.
    Query(String, Secret),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Header(n, _) => write!(f, "header {n}: MASKED"),
            Credential::Query(n, _) => write!(f, "query {n}=MASKED"),
        }
    }
}

impl Credential {
    pub fn describe(&self) -> String {
        format!("{self:?}")
    }

    fn apply(&self, req: &mut Request<Body>) -> Result<(), ProxyError> {
        match self {
            Credential::Header(n, v) => {
                req.headers_mut().insert(n.clone(), v.clone());
            }
            Credential::Query(name, value) => {
                let uri = req.uri();
                let mut q: Vec<&str> = uri
                    .query()
                    .unwrap_or("")
                    .split('&')
                    .filter(|p| !p.is_empty() && p.split('=').next() != Some(name.as_str()))
                    .collect();
                let pair = format!("{name}={}", value.expose());
                q.push(&pair);
                let pq = PathAndQuery::try_from(format!("{}?{}", uri.path(), q.join("&")))
                    .map_err(|_| ProxyError::BadTarget("credential query parameter".into()))?;
                let mut parts = std::mem::take(req.uri_mut()).into_parts();
                parts.path_and_query = Some(pq);
                *req.uri_mut() =
                    Uri::from_parts(parts).map_err(|e| ProxyError::BadTarget(e.to_string()))?;
            }
        }
        Ok(())
    }
}

pub struct Credentials {
    pub accounts: Vec<Credential>,
    pub cooldown: Duration,
    next: AtomicUsize,
    /// Per account: skipped until this unix-ms instant.
    cooling: Vec<AtomicU64>,
}

impl Credentials {
    pub fn new(accounts: Vec<Credential>, cooldown: Duration) -> Self {
        let cooling = accounts.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            accounts,
            cooldown,
            next: AtomicUsize::new(0),
            cooling,
        }
    }

    /// The next account in turn that is not cooling down; when all are, the one whose
    /// cooldown ends first.
    fn pick(&self) -> usize {
        let n = self.accounts.len();
        if n == 1 {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = clock::now_ms();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.cooling[i].load(Ordering::Relaxed) <= now)
            .unwrap_or_else(|| {
                (0..n)
                    .min_by_key(|&i| self.cooling[i].load(Ordering::Relaxed))
                    .unwrap_or(0)
            })
    }

    /// Whether some account other than `i` is not cooling down now.
    fn another_free(&self, i: usize) -> bool {
        let now = clock::now_ms();
        (0..self.accounts.len()).any(|k| k != i && self.cooling[k].load(Ordering::Relaxed) <= now)
    }

    /// Live state for `GET /policies`: each account's masked description and cooldown.
    pub fn state(&self) -> serde_json::Value {
        let now = clock::now_ms();
        serde_json::json!(
            self.accounts
                .iter()
                .zip(&self.cooling)
                .map(|(a, c)| {
                    let until = c.load(Ordering::Relaxed);
                    serde_json::json!({
                        "credential": a.describe(),
                        "cooling_down_s": (until > now).then(|| (until - now).div_ceil(1000)),
                    })
                })
                .collect::<Vec<_>>()
        )
    }
}

impl Remedy for Credentials {
    fn stage(&self) -> Stage {
        Stage::Credentials
    }

    fn request<'a>(&'a self, _x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(std::future::ready(Ok(Flow::Continue)))
    }

    fn attempts(&self) -> bool {
        true
    }

    fn before_attempt<'a>(
        &'a self,
        x: &'a mut Exchange,
        req: &'a mut Request<Body>,
    ) -> BoxFuture<'a, Result<(), ProxyError>> {
        let i = self.pick();
        x.account = Some(i);
        Box::pin(std::future::ready(self.accounts[i].apply(req)))
    }

    fn after_attempt<'a>(&'a self, x: &'a mut Exchange, o: Outcome<'a>) -> BoxFuture<'a, ()> {
        x.fresh_account = false;
        if let (Ok(head), Some(i)) = (o, x.account)
            && head.status == StatusCode::TOO_MANY_REQUESTS
            && self.accounts.len() > 1
        {
            let wait = provider_hints::retry_after(&head.headers).unwrap_or(self.cooldown);
            let until = clock::now_ms().saturating_add(wait.as_millis() as u64);
            self.cooling[i].fetch_max(until, Ordering::Relaxed);
            x.fresh_account = self.another_free(i);
        }
        Box::pin(std::future::ready(()))
    }
}
