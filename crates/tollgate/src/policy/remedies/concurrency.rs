//! Concurrency limit: at most N requests in flight (per policy, or per group of a request
//! header's value). The slot is held until the response body ends or the client goes
//! away (it lives in the exchange, released when that is dropped), never leaked. Over the
//! limit: 429 `concurrency_limited`, or wait in the queue until a slot frees.

use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::Errors;
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::config::RawRef;
use crate::policy::kind::{Check, Phases, RemedyKind, Shared, resolve};
use crate::policy::queue::{NextFree, Queue};
use crate::policy::queue::{QUEUE_FULL, QUEUE_TIMEOUT, queue_outcome, wait_deadline};
use crate::policy::queue::{QueueSpec, RawQueue, queue};
use crate::policy::spec::Resource;
use crate::policy::store::{Key, LOCAL_LEASE, Names, Store};
use http::{HeaderMap, HeaderName};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencySpec {
    pub max: u64,
    pub group_by: Option<HeaderName>,
}

pub struct ConcurrencyResource {
    pub name: Arc<str>,
    pub what: String,
    pub spec: ConcurrencySpec,
    pub resource: Arc<str>,
    pub store: Arc<dyn Store>,
    pub queue: Option<Queue>,
    /// The resource and `inflight`: a copy per worker.
    names: Names,
}

impl ConcurrencyResource {
    pub fn new(
        name: Arc<str>,
        spec: ConcurrencySpec,
        resource: Arc<str>,
        store: Arc<dyn Store>,
        queue: Option<Queue>,
    ) -> Self {
        Self {
            what: format!("concurrency limit `{name}`"),
            name,
            spec,
            names: Names::new([resource.clone(), "inflight".into()]),
            resource,
            store,
            queue,
        }
    }

    fn key(&self, h: &HeaderMap) -> Key {
        let n = self.names.get();
        let part = match &self.spec.group_by {
            Some(n) => crate::policy::group::part(
                "inflight:",
                h.get(n).map(|v| v.as_bytes()).unwrap_or(b""),
            ),
            None => n[1].clone(),
        };
        Key::new(&n[0], &part, 0)
    }

    /// In flight now (ungrouped total), for `GET /policies`.
    pub async fn in_flight(&self) -> u64 {
        let n = self.names.get();
        let k = Key::new(&n[0], &n[1], 0);
        self.store.leased(&k).await.unwrap_or(0)
    }
}

/// A worker's handle on a concurrency resource: what a held slot keeps to release it.
/// Each worker's stage has its own ([`Remedy::for_worker`]), on lines of its own, so the
/// reference count a request bumps is its worker's alone (the resource's own `Arc` would
/// be written by every worker's requests).
#[repr(align(128))]
struct Handle(Arc<ConcurrencyResource>);

impl Handle {
    async fn take(self: &Arc<Self>, key: &Key) -> Option<Slot> {
        let r = &self.0;
        let ttl = r.store.lease_ttl();
        let ttl_ms = ttl.map_or(0, |t| t.as_millis() as u64);
        match r.store.lease(key, r.spec.max, ttl_ms).await {
            Ok(Some(lease)) => Some(Slot {
                handle: self.clone(),
                key: key.clone(),
                lease,
                renewing: ttl
                    .filter(|_| lease != LOCAL_LEASE)
                    .map(|ttl| self.renew_while_held(key, lease, ttl)),
            }),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("{e}; request let through");
                Some(Slot {
                    handle: self.clone(),
                    key: Key::new(&r.resource, &Arc::from("unreachable"), 0),
                    lease: LOCAL_LEASE,
                    renewing: None,
                })
            }
        }
    }

    /// Renews a remote lease every third of its ttl until the slot is dropped (which
    /// aborts this), so only a gateway that stopped running lets it end.
    fn renew_while_held(
        self: &Arc<Self>,
        key: &Key,
        lease: u64,
        ttl: std::time::Duration,
    ) -> tokio::task::AbortHandle {
        let (me, key) = (self.clone(), key.clone());
        let ttl_ms = ttl.as_millis() as u64;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let _ = me.0.store.renew(&key, lease, ttl_ms).await;
            }
        })
        .abort_handle()
    }
}

/// A held slot: released when the exchange ends, waking the queue's head.
struct Slot {
    handle: Arc<Handle>,
    key: Key,
    lease: u64,
    renewing: Option<tokio::task::AbortHandle>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(r) = &self.renewing {
            r.abort();
        }
        let r = &self.handle.0;
        r.store.unlease(&self.key, self.lease);
        if let Some(q) = &r.queue {
            q.wake();
        }
    }
}

pub struct Concurrency {
    pub resource: Arc<ConcurrencyResource>,
    handle: Arc<Handle>,
    pub actions: Actions<Action>,
}

crate::policy::actions::queue_actions! {
    /// What a concurrency limit did with a request.
    pub enum Action for "concurrency" {}
}

/// Too many requests in flight.
pub static CONCURRENCY_LIMITED: Refusal = Refusal::refusal(
    "concurrency_limited",
    http::StatusCode::TOO_MANY_REQUESTS,
    "too many requests in flight for a policy",
);

/// `concurrency:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "concurrency";
    const PHASES: Phases = Phases {
        request: "takes a slot, refuses or queues; the slot is held until the response body ends or the client goes away",
        attempt: "",
        response: "",
    };
    const EXAMPLE: &'static str = "github";
    const REFUSALS: &'static [&'static Refusal] =
        &[&CONCURRENCY_LIMITED, &QUEUE_FULL, &QUEUE_TIMEOUT];
    type Raw = RawRef<RawConcurrency>;
    type Spec = Resource<ConcurrencyLimitSpec>;
    type Action = Action;
    type Metrics = ();

    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec> {
        resolve::<Self>(raw, cx)
    }

    fn build(r: &Self::Spec, b: &mut Build<'_>) -> Built {
        let id = b.id("concurrency", &r.name, &r.spec);
        let resource = b.reuse(id.clone(), |b| {
            ConcurrencyResource::new(
                Arc::from(r.name.as_str()),
                r.spec.limit.clone(),
                Arc::from(id.as_str()),
                b.store_for(r.spec.shared),
                b.queue(&r.name, &r.spec.queue),
            )
        });
        Built::from(Arc::new(Concurrency {
            handle: Arc::new(Handle(resource.clone())),
            resource,
            actions: b.actions(),
        }))
    }
}

impl Shared for Kind {
    type Def = RawConcurrency;
    type DefSpec = ConcurrencyLimitSpec;
    const DECLARED_EXAMPLE: &'static str = "{github: {max: 10}}";

    fn define(
        e: &mut Errors,
        path: &str,
        def: &RawConcurrency,
        _section: &BTreeMap<String, RawConcurrency>,
    ) -> ConcurrencyLimitSpec {
        concurrency(e, path, def)
    }
}

impl Remedy for Concurrency {
    fn for_worker(&self) -> Option<Arc<dyn Remedy>> {
        Some(Arc::new(Concurrency {
            resource: self.resource.clone(),
            handle: Arc::new(Handle(self.resource.clone())),
            actions: self.actions.clone(),
        }))
    }

    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        Some(Box::pin(async move {
            let c = &self.resource;
            serde_json::json!({
                "name": &*c.name,
                "max": c.spec.max,
                "in_flight": if c.spec.group_by.is_none() { Some(c.in_flight().await) } else { None },
                "queued": c.queue.as_ref().map(|q| q.len()),
            })
        }))
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            let r = &self.resource;
            let key = r.key(&x.parts.headers);
            let first = match &r.queue {
                Some(q) if !q.is_empty() => None,
                _ => self.handle.take(&key).await,
            };
            if let Some(slot) = first {
                self.actions.record(x, Action::Allowed);
                x.holds.push(Box::new(slot));
                return Ok(Flow::Continue);
            }
            let Some(q) = &r.queue else {
                self.actions.record(x, Action::Rejected);
                return Err(ProxyError::Rejected(Rejection {
                    kind: &CONCURRENCY_LIMITED,
                    message: format!(
                        "{}: {} already in flight",
                        r.what,
                        crate::error::count_of(r.spec.max, "request")
                    ),
                    retry_after: Some(1),
                    rate: None,
                    permanent: false,
                }));
            };
            self.actions.record(x, Action::Queued);
            let got = std::sync::Mutex::new(None);
            let waited = q
                .wait(
                    q.spec.priority(&x.parts.headers),
                    wait_deadline(super::timeouts::deadline(x), q),
                    x.give_up.as_deref(),
                    || {
                        let (key, got) = (&key, &got);
                        Box::pin(async move {
                            match self.handle.take(key).await {
                                Some(slot) => {
                                    if let Ok(mut g) = got.lock() {
                                        *g = Some(slot);
                                    }
                                    Ok(())
                                }
                                None => Err(NextFree::OnWake),
                            }
                        })
                    },
                )
                .await;
            queue_outcome(waited, &self.actions, &mut x.diag, q, &r.what)?;
            if let Some(slot) = got.into_inner().ok().flatten() {
                x.holds.push(Box::new(slot));
            }
            Ok(Flow::Continue)
        })
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyLimitSpec {
    pub limit: ConcurrencySpec,
    pub queue: Option<QueueSpec>,
    /// Counted on the shared store (`store.backend: redis`) rather than this process's.
    pub shared: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConcurrency {
    /// Requests in flight.
    pub max: crate::fields::units::Int<1, 1_000_000>,
    /// Count per group of this request header's value; each group gets `max`. A group's state exists only while it has requests in flight.
    pub group_by: Option<String>,
    /// Wait for a slot instead of being refused.
    pub queue: Option<RawQueue>,
    /// With `store.backend: redis`: `false` keeps this limit in each replica's own memory (a per-replica limit: each replica gets all of it); `true` counts it once for all replicas. No effect on the memory store.
    #[serde(default = "crate::fields::yes")]
    pub shared: bool,
}

pub fn concurrency(e: &mut Errors, path: &str, c: &RawConcurrency) -> ConcurrencyLimitSpec {
    ConcurrencyLimitSpec {
        limit: ConcurrencySpec {
            max: c.max.get(),
            group_by: c
                .group_by
                .as_deref()
                .and_then(|h| e.read_header(&format!("{path}.group_by"), h)),
        },
        queue: queue(e, &format!("{path}.queue"), &c.queue),
        shared: c.shared,
    }
}
