//! The `mcp` remedy's metric families and their labels, bounded: the method one of MCP's
//! (else `other`), the tool one of the first [`MAX_TOOLS`] a policy saw (else `other`).
//! Each series' counter is resolved once and kept by label, so counting a call is a
//! read lock and two lookups.

use crate::mcp::Call;
use crate::mcp::outcome::Outcome;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustc_hash::FxHashMap;
use std::sync::{Arc, RwLock};

/// Distinct tools counted per policy; calls of others are counted as `other`.
pub const MAX_TOOLS: usize = 64;

/// `tollgate_mcp_calls_total` and `tollgate_mcp_errors_total`.
#[derive(Default)]
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
}

impl Metrics {
    pub fn register(f: &mut crate::metrics::Families<'_>) -> Self {
        Metrics {
            calls: f.add(
                "mcp_calls",
                "MCP calls a policy's `mcp` read, by policy, JSON-RPC method (known methods; others `other`) and tool (`tools/call`; the first 64 names per policy, others `other`; empty for other methods)",
            ),
            errors: f.add(
                "mcp_errors",
                "MCP calls the server answered with an error, by policy, method, tool (as in tollgate_mcp_calls_total) and kind: tool_error (a result with isError: true), rpc_error (a JSON-RPC error)",
            ),
        }
    }
}

#[derive(
    Clone, Debug, Default, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet,
)]
pub struct CallLabels {
    pub policy: String,
    pub method: &'static str,
    pub tool: String,
}

#[derive(
    Clone, Debug, Default, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet,
)]
pub struct ErrorLabels {
    pub policy: String,
    pub method: &'static str,
    pub tool: String,
    pub kind: &'static str,
}

/// Counters by (method, tool), and by (method, kind, tool) for errors.
type ByTool = FxHashMap<Box<str>, Counter>;

/// One policy's counting.
pub struct Tally {
    policy: String,
    metrics: Arc<Metrics>,
    calls: RwLock<FxHashMap<&'static str, ByTool>>,
    errors: RwLock<FxHashMap<(&'static str, &'static str), ByTool>>,
}

impl Tally {
    pub fn new(policy: &str, metrics: Arc<Metrics>) -> Self {
        Self {
            policy: policy.to_owned(),
            metrics,
            calls: RwLock::default(),
            errors: RwLock::default(),
        }
    }

    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Counts `call` under its method and tool.
    pub fn call(&self, call: &Call) {
        let method = method_label(&call.method);
        let tool = call.tool().unwrap_or("");
        let found = self.calls.read().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = found.get(method).and_then(|m| m.get(tool)) {
            c.inc();
            return;
        }
        drop(found);
        let mut calls = self.calls.write().unwrap_or_else(|e| e.into_inner());
        let label = admitted(&calls, tool);
        calls
            .entry(method)
            .or_default()
            .entry(label.into())
            .or_insert_with(|| {
                self.metrics
                    .calls
                    .get_or_create(&CallLabels {
                        policy: self.policy.clone(),
                        method,
                        tool: label.to_owned(),
                    })
                    .clone()
            })
            .inc();
    }

    /// Counts the error the server answered `call` with.
    pub fn error(&self, call: &Call, outcome: Outcome) {
        let kind = match outcome {
            Outcome::ToolError | Outcome::RpcError => outcome.as_str(),
            Outcome::Ok | Outcome::Unknown => return,
        };
        let method = method_label(&call.method);
        let tool = call.tool().unwrap_or("");
        let found = self.errors.read().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = found.get(&(method, kind)).and_then(|m| m.get(tool)) {
            c.inc();
            return;
        }
        drop(found);
        // The tool's label is the one its calls are counted under.
        let label = admitted(&self.calls.read().unwrap_or_else(|e| e.into_inner()), tool);
        let mut errors = self.errors.write().unwrap_or_else(|e| e.into_inner());
        errors
            .entry((method, kind))
            .or_default()
            .entry(label.into())
            .or_insert_with(|| {
                self.metrics
                    .errors
                    .get_or_create(&ErrorLabels {
                        policy: self.policy.clone(),
                        method,
                        tool: label.to_owned(),
                        kind,
                    })
                    .clone()
            })
            .inc();
    }
}

/// The label `tool` is counted under: itself while fewer than [`MAX_TOOLS`] are, or when
/// it already is; `other` past that.
fn admitted<'a>(calls: &FxHashMap<&'static str, ByTool>, tool: &'a str) -> &'a str {
    if tool.is_empty() || calls.values().any(|m| m.contains_key(tool)) {
        return tool;
    }
    let tools: usize = calls
        .values()
        .map(|m| {
            m.keys()
                .filter(|t| !t.is_empty() && &***t != "other")
                .count()
        })
        .sum();
    if tools < MAX_TOOLS { tool } else { "other" }
}

/// The MCP methods counted by name (2025-11-25 and 2026-07-28); any other is `other`, so a
/// client cannot grow the label set.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
];

pub fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_a_bounded_set() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x/anything"), "other");
    }

    #[test]
    fn tools_past_the_cap_are_other() {
        let t = Tally::new("p", Arc::new(Metrics::default()));
        let call = |name: &str| Call {
            kind: crate::mcp::Kind::Request,
            id: Some("1".into()),
            method: "tools/call".into(),
            name: Some(name.into()),
            version: None,
            outcome: Default::default(),
        };
        for i in 0..MAX_TOOLS + 10 {
            t.call(&call(&format!("tool_{i}")));
        }
        t.call(&call("tool_0"));
        t.error(&call("tool_70"), Outcome::ToolError);
        let calls = t.calls.read().unwrap();
        let by_tool = &calls["tools/call"];
        assert_eq!(by_tool.len(), MAX_TOOLS + 1);
        assert_eq!(by_tool["tool_0"].get(), 2);
        assert_eq!(by_tool["other"].get(), 10);
        let errors = t.errors.read().unwrap();
        assert_eq!(errors[&("tools/call", "tool_error")]["other"].get(), 1);
    }
}
