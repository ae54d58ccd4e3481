//! Remedy actions: each remedy declares its actions as an enum ([`actions!`]), so a
//! misspelt action does not compile, and counts them in
//! `tollgate_remedy_actions_total{policy, remedy, action}`. The counters are resolved once,
//! at compile time, and indexed by the action: counting is one atomic add, into the
//! counting worker's own shard (every matched request counts, on every core).

use crate::metrics::sharded::ShardedCounter as Counter;
use crate::metrics::{ActionLabels, Metrics};
use std::marker::PhantomData;

/// A remedy's actions.
pub trait Action: Copy + Send + Sync + 'static {
    /// The remedy's name in metrics, `/remedy-stats` and HAR (`rate_limit`).
    const REMEDY: &'static str;
    /// Every action, in declaration order (`index` is the position here).
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;
    fn index(self) -> usize;
}

/// Declares a remedy's action enum: `actions! { pub enum Action for "retry" { Retried =
/// "retried", … } }`.
macro_rules! actions {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident for $remedy:literal {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $crate::policy::actions::Action for $name {
            const REMEDY: &'static str = $remedy;
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
            fn index(self) -> usize {
                self as usize
            }
        }
    };
}
pub(crate) use actions;

/// [`actions!`] for a limit that can queue: the six queue actions (`allowed`,
/// `rejected`, `queued`, `dequeued`, `timed_out`, `queue_full`) written once, with
/// [`QueueAction`], then the limit's own.
macro_rules! queue_actions {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident for $remedy:literal {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),* $(,)?
        }
    ) => {
        $crate::policy::actions::actions! {
            $(#[$meta])*
            $vis enum $name for $remedy {
                Allowed = "allowed",
                Rejected = "rejected",
                Queued = "queued",
                Dequeued = "dequeued",
                TimedOut = "timed_out",
                QueueFull = "queue_full",
                $($(#[$vmeta])* $variant = $text),*
            }
        }

        impl $crate::policy::actions::QueueAction for $name {
            const DEQUEUED: Self = $name::Dequeued;
            const TIMED_OUT: Self = $name::TimedOut;
            const QUEUE_FULL: Self = $name::QueueFull;
        }
    };
}
pub(crate) use queue_actions;

/// A policy's counters of one remedy's actions.
pub struct Actions<A: Action> {
    counters: Box<[Counter]>,
    kind: PhantomData<A>,
}

impl<A: Action> Clone for Actions<A> {
    fn clone(&self) -> Self {
        Self {
            counters: self.counters.clone(),
            kind: PhantomData,
        }
    }
}

/// Counters registered nowhere (unit tests).
impl<A: Action> Default for Actions<A> {
    fn default() -> Self {
        Self {
            counters: A::ALL.iter().map(|_| Counter::default()).collect(),
            kind: PhantomData,
        }
    }
}

impl<A: Action> Actions<A> {
    pub fn new(metrics: &Metrics, policy: &str) -> Self {
        Self {
            counters: A::ALL
                .iter()
                .map(|a| {
                    let labels = ActionLabels {
                        policy: policy.to_owned(),
                        remedy: A::REMEDY,
                        action: a.as_str(),
                    };
                    metrics.remedy_actions.get_or_create(&labels).clone()
                })
                .collect(),
            kind: PhantomData,
        }
    }

    /// Counts an action that belongs to no one request (a breaker closing, an entry stored).
    pub fn inc(&self, action: A) {
        self.counters[action.index()].inc();
    }

    /// Counts an action taken on this request, and notes it in the request's diagnosis
    /// (HAR entry, remedy statistics, span events).
    pub fn record(&self, x: &mut crate::policy::chain::Exchange, action: A) {
        self.note(&mut x.diag, action);
    }

    /// [`Actions::record`] where the exchange is borrowed in parts.
    pub fn note(&self, diag: &mut Option<Box<crate::diagnosis::RequestDiag>>, action: A) {
        self.inc(action);
        if let Some(d) = diag {
            d.acted.push(crate::diagnosis::Acted {
                remedy: A::REMEDY,
                action: action.as_str(),
                // Only a span's event shows the time: the clock is read for traced
                // requests alone.
                at_unix_ns: if d.trace.is_some() {
                    crate::diagnosis::unix_ns()
                } else {
                    0
                },
            });
        }
    }

    /// How many times `action` was counted (for `GET /policies`).
    pub fn get(&self, action: A) -> u64 {
        self.counters[action.index()].get()
    }
}

/// The actions of a limit that can queue (rate limits, concurrency limits), for the
/// queue outcomes they share.
pub trait QueueAction: Action {
    const DEQUEUED: Self;
    const TIMED_OUT: Self;
    const QUEUE_FULL: Self;
}

#[cfg(test)]
mod tests {
    use super::*;

    actions! {
        enum Test for "test" {
            One = "one",
            Two = "two",
        }
    }

    #[test]
    fn each_action_has_its_own_labelled_counter() {
        let m = Metrics::default();
        let a = Actions::<Test>::new(&m, "p");
        a.inc(Test::Two);
        a.inc(Test::Two);
        a.inc(Test::One);
        assert_eq!((a.get(Test::One), a.get(Test::Two)), (1, 2));
        let labels = |action| ActionLabels {
            policy: "p".into(),
            remedy: "test",
            action,
        };
        assert_eq!(m.remedy_actions.get_or_create(&labels("two")).get(), 2);
        assert_eq!(
            Test::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            ["one", "two"]
        );
    }
}
