//! Compiles the validated policies into chains, once per config load. Resources (rate
//! limits, quotas, concurrency limits, breakers, caches, retry budgets) are built once
//! per definition and shared by the policies that name them; on reload, a resource whose
//! definition did not change is carried over with its state (counters, queue, cache),
//! and one whose definition changed starts afresh (its store keys carry a fingerprint
//! of the definition).

use super::actions::Actions;
use super::chain::{Chain, Remedy};
use super::limit::Limit;
use super::queue::{Queue, QueueSpec};
use super::remedies::breaker::{Breaker, BreakerResource};
use super::remedies::cache::store::MemoryCache;
use super::remedies::cache::{Cache, CacheStage};
use super::remedies::concurrency::{Concurrency, ConcurrencyResource};
use super::remedies::credentials::Credentials;
use super::remedies::mock;
use super::remedies::quota::{Quota, QuotaResource};
use super::remedies::rate_limit::{RateLimit, RateLimitResource};
use super::remedies::retry::{Retry, RetryStage};
use super::remedies::throttle::Throttle;
use super::spec::{QuotaSpec, Resource};
use super::store::{Key, Store};
use crate::config::Config;
use crate::metrics::{Metrics, NameLabels};
use rustc_hash::FxHashMap;
use std::any::Any;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The compiled policies of one config, and the resources they use.
#[derive(Default)]
pub struct Engine {
    /// One chain per policy, in the config's order.
    pub chains: Vec<Arc<Chain>>,
    /// What `GET /policies` reads the live state from.
    pub views: Vec<View>,
    resources: FxHashMap<String, Arc<dyn Any + Send + Sync>>,
}

/// A policy's resources, for its live state.
#[derive(Default)]
pub struct View {
    pub rate_limit: Option<Arc<RateLimitResource>>,
    pub quota: Option<Arc<QuotaResource>>,
    pub concurrency: Option<Arc<ConcurrencyResource>>,
    pub breaker: Option<Arc<BreakerResource>>,
    pub cache: Option<Arc<Cache>>,
    pub throttle: Option<Arc<Throttle>>,
    pub credentials: Option<Arc<Credentials>>,
    pub retry: Option<Arc<Retry>>,
    /// CONNECT tunnels that bypassed the policy.
    pub tunnelled: super::tunnelled::Tunnelled,
}

/// A definition's fingerprint: state kept under it survives reloads that leave the
/// definition as it was.
fn fingerprint<T: std::fmt::Debug>(spec: &T) -> String {
    let mut h = rustc_hash::FxHasher::default();
    format!("{spec:?}").hash(&mut h);
    format!("{:016x}", h.finish())
}

struct Builder<'a> {
    previous: Option<&'a Engine>,
    store: &'a Arc<dyn Store>,
    metrics: &'a Metrics,
    resources: FxHashMap<String, Arc<dyn Any + Send + Sync>>,
}

impl Builder<'_> {
    /// The resource `id`: this build's, the previous config's (same definition), or new.
    fn reuse<T: Send + Sync + 'static>(
        &mut self,
        id: String,
        make: impl FnOnce(&mut Self) -> T,
    ) -> Arc<T> {
        let found = self
            .resources
            .get(&id)
            .or_else(|| self.previous.and_then(|p| p.resources.get(&id)))
            .and_then(|r| r.clone().downcast::<T>().ok());
        let r = found.unwrap_or_else(|| Arc::new(make(self)));
        self.resources.insert(id, r.clone());
        r
    }

    fn queue(&self, name: &str, spec: &Option<QueueSpec>) -> Option<Queue> {
        spec.as_ref().map(|q| {
            let l = NameLabels {
                name: name.to_owned(),
            };
            Queue::new(
                q.clone(),
                self.metrics.queue_depth.get_or_create(&l).clone(),
                self.metrics.queue_wait.get_or_create(&l).clone(),
            )
        })
    }

    fn quota(&mut self, r: &Resource<QuotaSpec>) -> Arc<QuotaResource> {
        let id = format!("quota:{}:{}", r.name, fingerprint(&r.spec));
        self.reuse(id.clone(), |b| {
            let parent = r.spec.parent.as_ref().map(|p| b.quota(p).limit.clone());
            QuotaResource {
                name: Arc::from(r.name.as_str()),
                what: format!("quota `{}`", r.name),
                limit: Arc::new(Limit::new(
                    r.spec.limit.clone(),
                    Arc::from(id.as_str()),
                    parent,
                    b.store.clone(),
                )),
                remaining: b
                    .metrics
                    .quota_remaining
                    .get_or_create(&NameLabels {
                        name: r.name.clone(),
                    })
                    .clone(),
            }
        })
    }
}

impl Engine {
    pub fn build(
        config: &Config,
        previous: Option<&Engine>,
        store: &Arc<dyn Store>,
        metrics: &Metrics,
    ) -> Engine {
        let mut b = Builder {
            previous,
            store,
            metrics,
            resources: FxHashMap::default(),
        };
        let mut chains = Vec::new();
        let mut views = Vec::new();
        for p in &config.policies.policies {
            let s = &p.spec;
            let name = p.name.as_str();
            let mut remedies: Vec<Arc<dyn Remedy>> = Vec::new();
            let mut view = View::default();
            if let Some(t) = &s.timeouts {
                remedies.push(Arc::new(t.clone()));
            }
            if let Some(m) = &s.mock {
                remedies.push(Arc::new(mock::MockStage {
                    mock: m.clone(),
                    actions: Actions::new(metrics, name),
                }));
            }
            if let Some(t) = &s.request {
                remedies.push(Arc::new(t.clone()));
            }
            if let Some(c) = &s.cache {
                let id = format!("cache:{name}:{}", fingerprint(c));
                let cache = b.reuse(id, |b| {
                    let l = NameLabels {
                        name: name.to_owned(),
                    };
                    Cache::new(
                        c.clone(),
                        Arc::new(MemoryCache::new(c.max_size)),
                        Actions::new(metrics, name),
                        b.metrics.cache_entries.get_or_create(&l).clone(),
                        b.metrics.cache_bytes.get_or_create(&l).clone(),
                    )
                });
                view.cache = Some(cache.clone());
                remedies.push(Arc::new(CacheStage(cache)));
            }
            if let Some(r) = &s.breaker {
                let id = format!("breaker:{}:{}", r.name, fingerprint(&r.spec));
                let res = b.reuse(id.clone(), |b| {
                    BreakerResource::new(
                        Arc::from(r.name.as_str()),
                        r.spec.clone(),
                        Arc::from(id.as_str()),
                        b.store.clone(),
                        b.metrics
                            .breaker_state
                            .get_or_create(&NameLabels {
                                name: r.name.clone(),
                            })
                            .clone(),
                    )
                });
                view.breaker = Some(res.clone());
                remedies.push(Arc::new(Breaker {
                    resource: res,
                    actions: Actions::new(metrics, name),
                }));
            }
            if let Some(t) = &s.throttle {
                let id = format!("throttle:{name}:{}", fingerprint(t));
                let th = Arc::new(Throttle {
                    spec: t.clone(),
                    store: store.clone(),
                    key: Key::new(&Arc::from(id.as_str()), &Arc::from("until"), 0),
                    actions: Actions::new(metrics, name),
                });
                view.throttle = Some(th.clone());
                remedies.push(th);
            }
            if let Some(q) = &s.quota {
                let res = b.quota(q);
                view.quota = Some(res.clone());
                remedies.push(Arc::new(Quota {
                    resource: res,
                    actions: Actions::new(metrics, name),
                }));
            }
            if let Some(r) = &s.rate_limit {
                let id = format!("rate:{}:{}", r.name, fingerprint(&r.spec));
                let res = b.reuse(id.clone(), |b| RateLimitResource {
                    name: Arc::from(r.name.as_str()),
                    what: format!("rate limit `{}`", r.name),
                    limit: Limit::new(
                        r.spec.limit.clone(),
                        Arc::from(id.as_str()),
                        None,
                        b.store.clone(),
                    ),
                    queue: b.queue(&r.name, &r.spec.queue),
                });
                view.rate_limit = Some(res.clone());
                remedies.push(Arc::new(RateLimit {
                    resource: res,
                    actions: Actions::new(metrics, name),
                }));
            }
            if let Some(r) = &s.concurrency {
                let id = format!("concurrency:{}:{}", r.name, fingerprint(&r.spec));
                let res = b.reuse(id.clone(), |b| {
                    ConcurrencyResource::new(
                        Arc::from(r.name.as_str()),
                        r.spec.limit.clone(),
                        Arc::from(id.as_str()),
                        b.store.clone(),
                        b.queue(&r.name, &r.spec.queue),
                    )
                });
                view.concurrency = Some(res.clone());
                remedies.push(Arc::new(Concurrency {
                    resource: res,
                    actions: Actions::new(metrics, name),
                }));
            }
            if let Some(t) = &s.response {
                remedies.push(Arc::new(t.clone()));
            }
            if let Some((accounts, cooldown)) = &s.credentials {
                // Built anew on every load: a secret that changed must take effect, and
                // the masked definition cannot tell.
                let c = Arc::new(Credentials::new(accounts.clone(), *cooldown));
                view.credentials = Some(c.clone());
                remedies.push(c);
            }
            let mut retry = None;
            if let Some(r) = &s.retry {
                let id = format!("retry:{name}:{}", fingerprint(r));
                let rt = b.reuse(id.clone(), |b| {
                    Retry::new(
                        r.clone(),
                        Arc::from(id.as_str()),
                        b.store.clone(),
                        Actions::new(metrics, name),
                    )
                });
                view.retry = Some(rt.clone());
                retry = Some(rt.clone());
                remedies.push(Arc::new(RetryStage(rt)));
            }
            debug_assert!(remedies.windows(2).all(|w| w[0].stage() < w[1].stage()));
            let attempt_hooks = remedies
                .iter()
                .enumerate()
                .filter(|(_, r)| r.attempts())
                .map(|(i, _)| i)
                .collect();
            chains.push(Arc::new(Chain {
                policy: Arc::from(name),
                remedies,
                attempt_hooks,
                retry,
                total: s.timeouts.as_ref().and_then(|t| t.total),
            }));
            views.push(view);
        }
        Engine {
            chains,
            views,
            resources: b.resources,
        }
    }
}
