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
pub mod mcp_call;
pub mod path;
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
    // Every `x-tollgate-error` code at 0 from the start (tollgate's own and each
    // remedy's refusals), so the first error of a code is an increase Prometheus sees.
    let refusals: Vec<crate::error::Reject> = remedies::STAGES
        .iter()
        .flat_map(|s| s.refusals.iter().copied())
        .collect();
    for k in crate::error::catalogue(&refusals) {
        drop(m.errors.get_or_create(&crate::metrics::ErrorLabels {
            code: k.code,
            status_class: crate::metrics::status_class(k.status.as_u16()),
        }));
    }
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub matcher: Matcher,
    pub spec: remedies::PolicySpec,
}

impl Policy {
    /// Whether it counts or reads LLM calls (`llm`, `token_limit`, `budget`).
    pub fn reads_llm(&self) -> bool {
        self.spec.llm.is_some() || self.spec.token_limit.is_some() || self.spec.budget.is_some()
    }

    /// Whether a token limit or a budget reserves prompts counted with the model's
    /// tokenizer (`llm.tokenizer`, on by default).
    pub fn counts_prompts(&self) -> bool {
        (self.spec.token_limit.is_some() || self.spec.budget.is_some())
            && self.spec.llm.as_ref().is_none_or(|l| l.tokenizer)
    }
}

/// Policies in file order; the first match applies.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    pub policies: Vec<Policy>,
    /// Some policy reads LLM calls: ambiguous spellings of paths are looked for.
    pub reads_llm: bool,
}

impl PolicySet {
    pub fn new(policies: Vec<Policy>) -> Self {
        let reads_llm = policies.iter().any(Policy::reads_llm);
        // The tokenizers' tables, loaded before the first call that needs them (about
        // 0.2 s each), only where a token limit or a budget counts prompts exactly.
        if policies.iter().any(Policy::counts_prompts) {
            crate::llm::tokens::warm_up();
        }
        Self {
            policies,
            reads_llm,
        }
    }

    /// The index of the first policy matching the upstream request, its path as origin
    /// servers route it ([`path::normalized`]); an ambiguous spelling of a path that an
    /// LLM policy of the host would count is refused ([`path::loosened`]).
    #[inline]
    pub fn find(
        &self,
        host: &str,
        method: &Method,
        path: &str,
    ) -> Result<Option<usize>, crate::error::ProxyError> {
        if self.policies.is_empty() {
            return Ok(None);
        }
        let path = path::normalized(path);
        if self.reads_llm
            && let Some(i) = self.ambiguous(host, method, &path)
        {
            return Err(crate::error::ProxyError::AmbiguousPath(format!(
                "the path `{path}` is spelled so that servers route it differently (an encoded `/`, `;` parameters or another case) and, read loosely, policy `{}` would count it: write the path as the provider documents it",
                self.policies[i].name
            )));
        }
        Ok(self
            .policies
            .iter()
            .position(|p| p.matcher.matches(host, method, &path)))
    }

    /// Whether the policy at `i` (matched by the request's head) asks what MCP call the
    /// body carries before it applies (`match.mcp`).
    #[inline]
    pub fn reads_call(&self, i: usize) -> bool {
        self.policies[i].matcher.mcp.is_some()
    }

    /// The first policy from `from` on (the one the head matched) that matches the
    /// request with its MCP call (`None`: the body is not one).
    pub fn find_call(
        &self,
        from: usize,
        host: &str,
        method: &Method,
        path: &str,
        call: Option<&crate::mcp::Call>,
    ) -> Option<usize> {
        let path = path::normalized(path);
        (from..self.policies.len()).find(|&i| {
            let m = &self.policies[i].matcher;
            m.matches(host, method, &path) && m.matches_call(call)
        })
    }

    /// The LLM policy of `host` that `path`, loosened, would count (an LLM call it
    /// recognises, or its `match.path`) when `path` as written escapes it.
    fn ambiguous(&self, host: &str, method: &Method, path: &str) -> Option<usize> {
        let loose = path::loosened(path)?;
        let call = *method == Method::POST
            && crate::protocol::llm_api(path).is_none()
            && crate::protocol::llm_api(&loose).is_some();
        self.policies.iter().position(|p| {
            p.reads_llm()
                && p.matcher.host.as_ref().is_none_or(|h| h.matches(host))
                && (call
                    || (!p.matcher.matches(host, method, path)
                        && p.matcher.matches(host, method, &loose)))
        })
    }

    /// The first policy whose host pattern matches `host`, whatever the path and method
    /// (what a CONNECT tunnel to that host bypasses).
    pub fn for_host(&self, host: &str) -> Option<usize> {
        self.policies
            .iter()
            .position(|p| p.matcher.host.as_ref().is_none_or(|h| h.matches(host)))
    }

    /// What `tollgate check`, the start and each reload warn about: policies that never
    /// apply, and MCP calls that escape a server's refusals.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.shadowed();
        w.extend(self.mcp_gaps());
        w
    }

    /// A policy chosen by the MCP call (`match.mcp`) ahead of a policy whose `mcp:`
    /// refuses tools or values, on a host both may match, without those refusals: the
    /// calls it takes reach the server whatever the later policy refuses.
    fn mcp_gaps(&self) -> Vec<String> {
        let mut out = Vec::new();
        // One warning per policy, naming the first whose refusals it escapes.
        let mut told = vec![false; self.policies.len()];
        for (j, later) in self.policies.iter().enumerate() {
            let Some(rules) = later.spec.mcp.as_ref().filter(|m| m.refuses()) else {
                continue;
            };
            for (i, earlier) in self.policies[..j].iter().enumerate() {
                let hosts = match (&earlier.matcher.host, &later.matcher.host) {
                    (Some(a), Some(b)) => a.as_str() == b.as_str(),
                    _ => true,
                };
                let same = earlier
                    .spec
                    .mcp
                    .as_ref()
                    .is_some_and(|m| m.same_refusals(rules));
                // Tools named exactly, none of which the later policy refuses, escape
                // nothing.
                let escapes = earlier.matcher.mcp.as_ref().is_some_and(|m| {
                    m.tools.is_empty()
                        || m.tools
                            .iter()
                            .any(|t| t.as_str().contains('*') || rules.refuses_tool(t.as_str()))
                });
                if escapes && hosts && !same && !told[i] {
                    told[i] = true;
                    out.push(format!(
                        "policies[{i}] `{}` takes some MCP calls (match.mcp) before policies[{j}] `{}` and does not refuse what its `mcp` refuses: the calls it takes reach the server whatever `{}` denies; give it the same `mcp:` rules",
                        earlier.name, later.name, later.name
                    ));
                }
            }
        }
        out
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
