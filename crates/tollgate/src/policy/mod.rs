//! Policies and the engine that applies their remedies. A policy matches requests
//! ([`matcher`]) and names remedies; each remedy is one module under [`remedies`] with
//! one line in the registry ([`remedies`]), whose order is the chain's ([`kind`]). At config load each
//! policy is compiled into its chain ([`compile`]); a matched request runs its chain on a
//! boxed path ([`engine`]). Unmatched requests never leave the plain forwarding path.
//! Remedy state lives behind [`store::Store`].

pub mod actions;
pub mod chain;
pub mod clock;
pub mod compile;
pub mod config;
pub mod engine;
pub mod failure;
pub mod group;
pub mod kind;
pub mod limit;
pub mod matcher;
pub mod provider_hints;
pub mod queue;
pub mod remedies;
pub mod reserve;
pub mod spec;
pub mod state;
pub mod store;
pub mod tunnelled;
pub mod window;

pub use compile::Engine;
use http::Method;
pub use matcher::{Matcher, PathTemplate};

/// Registers every remedy's metric families, so that `/metrics` lists them from the
/// start, before any policy uses one.
pub fn register_metrics(m: &crate::metrics::Metrics) {
    for s in remedies::STAGES {
        (s.register)(m);
    }
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub matcher: Matcher,
    pub spec: remedies::PolicySpec,
}

/// Policies in file order; the first match applies.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    pub policies: Vec<Policy>,
}

impl PolicySet {
    /// The index of the first policy matching the upstream request.
    #[inline]
    pub fn find(&self, host: &str, method: &Method, path: &str) -> Option<usize> {
        if self.policies.is_empty() {
            return None;
        }
        self.policies
            .iter()
            .position(|p| p.matcher.matches(host, method, path))
    }

    /// The first policy whose host pattern matches `host`, whatever the path and method
    /// (what a CONNECT tunnel to that host bypasses).
    pub fn for_host(&self, host: &str) -> Option<usize> {
        self.policies
            .iter()
            .position(|p| p.matcher.host.as_ref().is_none_or(|h| h.matches(host)))
    }

    /// Policies an earlier one matches entirely (they never apply), as warnings.
    pub fn shadowed(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (j, later) in self.policies.iter().enumerate() {
            if let Some((i, earlier)) = self.policies[..j]
                .iter()
                .enumerate()
                .find(|(_, e)| e.matcher.covers(&later.matcher))
            {
                out.push(format!(
                    "policies[{j}] `{}` never applies: policies[{i}] `{}` comes first and matches every request it matches (the first matching policy applies; move the narrower one up)",
                    later.name, earlier.name
                ));
            }
        }
        out
    }
}
