//! An LLM call's metrics (its tokens, the call and its cost by policy and model; its time
//! to first byte by policy), counted by the call's worker as the call ends: its meter
//! read in place, each count into the worker's shard of the metric (`metrics/sharded.rs`).
//! Nothing of the call crosses to the observer thread for them, and a full event queue
//! loses none.

use crate::llm::Metered;
use crate::llm::prices::{Price, Prices};
use crate::metrics::sharded::{NanoCounter, ShardedCounter};
use crate::metrics::{LatencyHistogram, LlmLabels, LlmTokenLabels, Metrics, NameLabels};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Arc, Mutex};

/// Distinct model names that are metric labels; past them, `other`.
const MAX_MODELS: usize = 100;

/// The token kinds, in the order of [`Handles::tokens`].
const TOKEN_KINDS: [&str; 5] = ["input", "output", "cached", "cache_write", "reasoning"];

/// The model names that are labels, shared by the workers: read on a worker's first call
/// of a (policy, model) only (then its handles are cached).
#[derive(Default)]
pub struct Models {
    admitted: Mutex<FxHashSet<Arc<str>>>,
}

impl Models {
    /// The label of `model`: itself while there is room, `other` past [`MAX_MODELS`].
    fn label(&self, model: &Arc<str>) -> String {
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        if admitted.contains(model) || admitted.len() < MAX_MODELS {
            admitted.insert(model.clone());
            return model.to_string();
        }
        "other".to_owned()
    }
}

/// The metric handles of one (policy, model), looked up in the families once.
#[derive(Clone)]
struct Handles {
    /// input, output, cached, cache_write, reasoning.
    tokens: [ShardedCounter; 5],
    calls: ShardedCounter,
    cost: NanoCounter,
    first_byte: LatencyHistogram,
    /// The model's price in the policy's table it was last looked up in (a reload makes
    /// a new table).
    price: Option<(Arc<Prices>, Option<Price>)>,
}

/// (policy, the model the call is labelled by).
type Key = (Arc<str>, Arc<str>);

/// A worker's LLM handles: the last (policy, model)'s (most calls repeat it), then a map.
pub struct LlmTally {
    metrics: Metrics,
    models: Arc<Models>,
    /// `-`: a call without a policy's name or a model.
    none: Arc<str>,
    last: Option<(Key, Handles)>,
    by_key: FxHashMap<Key, Handles>,
}

impl LlmTally {
    pub fn new(metrics: Metrics, models: Arc<Models>) -> Self {
        Self {
            metrics,
            models,
            none: Arc::from("-"),
            last: None,
            by_key: FxHashMap::default(),
        }
    }

    /// Counts a call whose answer was relayed: its tokens (estimated where the answer did
    /// not tell them), the call, its cost when its model has a price, its time to first
    /// byte.
    pub fn record(&mut self, policy: Option<&Arc<str>>, u: &Metered) {
        if !u.relayed {
            return;
        }
        let policy = policy.unwrap_or(&self.none);
        let model = u.model().unwrap_or(&self.none);
        let hit = matches!(&self.last, Some(((p, m), _)) if Arc::ptr_eq(p, policy) && m == model);
        if !hit {
            let key = (policy.clone(), model.clone());
            let h = match self.by_key.get(&key) {
                Some(h) => h.clone(),
                None => {
                    let named = u.model().is_some();
                    let h = handles_of(&self.metrics, &self.models, &key, named);
                    if self.by_key.len() >= crate::observe::MAX_CACHED {
                        self.by_key.clear();
                    }
                    self.by_key.insert(key.clone(), h.clone());
                    h
                }
            };
            self.last = Some((key, h));
        }
        let Some((_, h)) = &mut self.last else {
            return;
        };
        let usage = u.usage();
        let counts = [
            usage.input,
            usage.output,
            usage.cached,
            usage.cache_write,
            usage.reasoning,
        ];
        for (c, n) in h.tokens.iter().zip(counts) {
            if n > 0 {
                c.inc_by(n);
            }
        }
        h.calls.inc();
        let price = match &h.price {
            Some((table, price)) if Arc::ptr_eq(table, &u.prices) => *price,
            _ => {
                let price = u.prices.of(model);
                h.price = Some((u.prices.clone(), price));
                price
            }
        };
        // The label's price is the answer's model's, else the request's (`cost_nanos`):
        // only an answered model without a price leaves the requested one to try.
        let cost = match price {
            Some(p) => Some(crate::llm::prices::cost_nanos(&usage, &p)),
            None if u.answered.is_some() && u.requested.is_some() => u.cost_nanos(),
            None => None,
        };
        if let Some(c) = cost {
            h.cost.0.inc_by(c);
        }
        if let Some(t) = u.first_byte {
            h.first_byte.observe(t);
        }
    }
}

/// The handles of a (policy, model) (`named`: the call named a model, else `-`), looked
/// up in the families: a worker's first call of it.
fn handles_of(m: &Metrics, models: &Models, (policy, model): &Key, named: bool) -> Handles {
    let labels = LlmLabels {
        policy: policy.to_string(),
        model: match named {
            true => models.label(model),
            false => "-".to_owned(),
        },
    };
    let kind = |kind| {
        m.llm_tokens
            .get_or_create(&LlmTokenLabels {
                policy: labels.policy.clone(),
                model: labels.model.clone(),
                kind,
            })
            .clone()
    };
    Handles {
        tokens: TOKEN_KINDS.map(kind),
        calls: m.llm_calls.get_or_create(&labels).clone(),
        cost: m.llm_cost.get_or_create(&labels).clone(),
        first_byte: m
            .llm_first_byte
            .get_or_create(&NameLabels {
                name: labels.policy.clone(),
            })
            .clone(),
        price: None,
    }
}
