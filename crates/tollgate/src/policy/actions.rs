//! Remedy metrics: `tollgate_remedy_actions_total{policy, remedy, action}`. Each remedy
//! resolves its counters once, at compile time, so counting is one atomic add.

use crate::metrics::{ActionLabels, Metrics};
use prometheus_client::metrics::counter::Counter;

#[derive(Clone, Default)]
pub struct Actions {
    counters: Vec<(&'static str, Counter)>,
}

impl Actions {
    pub fn new(
        metrics: &Metrics,
        policy: &str,
        remedy: &'static str,
        actions: &[&'static str],
    ) -> Self {
        Self {
            counters: actions
                .iter()
                .map(|&action| {
                    let labels = ActionLabels {
                        policy: policy.to_owned(),
                        remedy,
                        action,
                    };
                    (
                        action,
                        metrics.remedy_actions.get_or_create(&labels).clone(),
                    )
                })
                .collect(),
        }
    }

    pub fn inc(&self, action: &'static str) {
        if let Some((_, c)) = self.counters.iter().find(|(a, _)| *a == action) {
            c.inc();
        }
    }
}

impl Actions {
    /// How many times `action` was counted (for `GET /policies`).
    pub fn get(&self, action: &str) -> u64 {
        self.counters
            .iter()
            .find(|(a, _)| *a == action)
            .map_or(0, |(_, c)| c.get())
    }
}
