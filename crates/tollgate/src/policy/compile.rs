//! Compiles the validated policies into chains, once per config load. Resources (rate
//! limits, quotas, concurrency limits, breakers, caches, retry budgets) are built once
//! per definition and shared by the policies that name them; on reload, a resource whose
//! definition did not change is carried over with its state (counters, queue, cache),
//! and one whose definition changed starts afresh (its store keys carry a fingerprint
//! of the definition).

use super::actions::{Action, Actions};
use super::chain::Chain;
use super::queue::{Queue, QueueSpec};
use super::store::Store;
use super::{PolicySet, tunnelled::Tunnelled};
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
    /// CONNECT tunnels that bypassed each policy (for `GET /policies`), one set for
    /// every worker's copy.
    pub tunnelled: Arc<[Tunnelled]>,
    resources: FxHashMap<String, Arc<dyn Any + Send + Sync>>,
}

/// A definition's fingerprint: state kept under it survives reloads that leave the
/// definition as it was.
fn fingerprint<T: std::fmt::Debug>(spec: &T) -> String {
    let mut h = rustc_hash::FxHasher::default();
    format!("{spec:?}").hash(&mut h);
    format!("{:016x}", h.finish())
}

/// What a remedy is built with: the store, the metrics, the policy it is for, and the
/// resources built so far (this config's, and the previous config's to carry over).
pub struct Build<'a> {
    previous: Option<&'a Engine>,
    pub store: &'a Arc<dyn Store>,
    /// This process's memory, for resources that are not `shared` when `store` is.
    local: Arc<dyn Store>,
    pub metrics: &'a Metrics,
    /// The policy whose chain is being built.
    pub policy: &'a str,
    /// It counts prompts with the model's tokenizer (`Policy::counts_prompts`): its
    /// LLM calls' prompt text is kept from the request's first read for the count.
    pub counts_prompts: bool,
    resources: FxHashMap<String, Arc<dyn Any + Send + Sync>>,
}

impl Build<'_> {
    /// The resource `id`: this build's, the previous config's (same definition), or new.
    pub fn reuse<T: Send + Sync + 'static>(
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

    /// A resource's id: its kind, its name, and its definition's fingerprint (also the
    /// prefix of its store keys).
    pub fn id<T: std::fmt::Debug>(&self, kind: &str, name: &str, spec: &T) -> String {
        format!("{kind}:{name}:{}", fingerprint(spec))
    }

    /// The store of a resource: the configured one, or this process's memory for one
    /// that is not `shared`.
    pub fn store_for(&self, shared: bool) -> Arc<dyn Store> {
        if shared {
            self.store.clone()
        } else {
            self.local.clone()
        }
    }

    /// The policy's counters of a remedy's actions.
    pub fn actions<A: Action>(&self) -> Actions<A> {
        Actions::new(self.metrics, self.policy)
    }

    /// A limit's queue, with its depth and wait metrics.
    pub fn queue(&self, name: &str, spec: &Option<QueueSpec>) -> Option<Queue> {
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
}

impl Engine {
    pub fn build(
        policies: &PolicySet,
        previous: Option<&Engine>,
        store: &Arc<dyn Store>,
        metrics: &Metrics,
    ) -> Engine {
        let mut b = Build {
            previous,
            store,
            local: if store.shared() {
                Arc::new(super::store::memory::Memory::default())
            } else {
                store.clone()
            },
            metrics,
            policy: "",
            counts_prompts: false,
            resources: FxHashMap::default(),
        };
        let mut chains = Vec::new();
        for p in &policies.policies {
            b.policy = &p.name;
            b.counts_prompts = p.counts_prompts();
            let remedies = p.spec.build(&mut b);
            chains.push(Arc::new(Chain::new(&p.name, remedies, p.spec.remedies())));
        }
        Engine {
            tunnelled: (0..chains.len()).map(|_| Tunnelled::default()).collect(),
            chains,
            resources: b.resources,
        }
    }

    /// A data-plane worker's copy: chains of its own (the remedies in them, and their
    /// state, shared), so the reference counts a matched request clones and drops, the
    /// chain's and the policy name's, are written by that worker's thread alone. With one
    /// `Arc` shared by all workers, every matched request on every core wrote the same
    /// cache line.
    pub fn for_worker(&self) -> Engine {
        Engine {
            chains: self.chains.iter().map(|c| Arc::new(c.detached())).collect(),
            tunnelled: self.tunnelled.clone(),
            resources: self.resources.clone(),
        }
    }
}
