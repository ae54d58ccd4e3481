//! Remedy metrics: `tollgate_remedy_actions_total{policy, remedy, action}`. Each remedy
//! resolves its counters once, at compile time, so counting is one atomic add.

use crate::metrics::{ActionLabels, Metrics};
use prometheus_client::metrics::counter::Counter;

#[derive(Clone, Default)]
pub struct Actions {
    remedy: &'static str,
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
            remedy,
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

    /// Counts an action that belongs to no one request (a breaker closing, an entry stored).
    pub fn inc(&self, action: &'static str) {
        if let Some((_, c)) = self.counters.iter().find(|(a, _)| *a == action) {
            c.inc();
        }
    }

    /// Counts an action taken on this request, and notes it in the request's diagnosis
    /// (HAR entry, remedy statistics, span events).
    pub fn record(&self, x: &mut crate::policy::chain::Exchange, action: &'static str) {
        self.note(&mut x.diag, action);
    }

    /// [`Actions::record`] where the exchange is borrowed in parts.
    pub fn note(
        &self,
        diag: &mut Option<Box<crate::diagnosis::RequestDiag>>,
        action: &'static str,
    ) {
        self.inc(action);
        if let Some(d) = diag {
            d.acted.push(crate::diagnosis::Acted {
                remedy: self.remedy,
                action,
                at_unix_ns: crate::diagnosis::unix_ns(),
            });
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
