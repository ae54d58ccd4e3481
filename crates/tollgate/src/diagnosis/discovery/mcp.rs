//! An MCP server's tools as discovery shows them, under the endpoint their calls go to:
//! per tool, the calls, how many failed (tollgate's own errors, HTTP errors), how many
//! the server answered with a tool error (`isError: true`) or a JSON-RPC error, and
//! their latency. At most [`MAX_TOOLS`] tools per endpoint; calls of others are counted as
//! `other`, so a client cannot grow the table.

use super::{percentiles, record_us};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Tools kept per endpoint.
pub const MAX_TOOLS: usize = 64;
const OTHER: &str = "other";

/// One tool's calls.
pub struct ToolStats {
    pub calls: u64,
    pub errors: u64,
    pub tool_errors: u64,
    pub rpc_errors: u64,
    latency: Histogram<u32>,
}

impl ToolStats {
    fn new() -> Self {
        Self {
            calls: 0,
            errors: 0,
            tool_errors: 0,
            rpc_errors: 0,
            latency: Histogram::new(2).expect("2 significant figures is valid"),
        }
    }
}

/// The tools called on one endpoint.
#[derive(Default)]
pub struct McpStats {
    pub tools: BTreeMap<Box<str>, ToolStats>,
}

/// One MCP tool call, as discovery counts it.
pub struct ToolCall<'a> {
    pub tool: &'a str,
    /// tollgate's own error, or an HTTP error.
    pub failed: bool,
    /// What the server answered.
    pub outcome: crate::mcp::outcome::Outcome,
    pub total_us: u64,
}

impl McpStats {
    fn entry(&mut self, tool: &str) -> &mut ToolStats {
        let key = if self.tools.contains_key(tool) || self.tools.len() < MAX_TOOLS {
            tool
        } else {
            OTHER
        };
        if !self.tools.contains_key(key) {
            self.tools.insert(key.into(), ToolStats::new());
        }
        self.tools.get_mut(key).expect("just inserted")
    }

    pub fn add(&mut self, c: &ToolCall<'_>) {
        let t = self.entry(c.tool);
        t.calls += 1;
        t.errors += u64::from(c.failed);
        t.tool_errors += u64::from(c.outcome == crate::mcp::outcome::Outcome::ToolError);
        t.rpc_errors += u64::from(c.outcome == crate::mcp::outcome::Outcome::RpcError);
        record_us(&mut t.latency, c.total_us);
    }

    pub fn merge(&mut self, o: McpStats) {
        for (name, s) in o.tools {
            let t = self.entry(&name);
            t.calls += s.calls;
            t.errors += s.errors;
            t.tool_errors += s.tool_errors;
            t.rpc_errors += s.rpc_errors;
            let _ = t.latency.add(&s.latency);
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "tools": self.tools.iter().map(|(name, t)| (name.to_string(), json!({
                "calls": t.calls,
                "errors": t.errors,
                "tool_errors": t.tool_errors,
                "rpc_errors": t.rpc_errors,
                "latency_ms": percentiles(&t.latency),
            }))).collect::<serde_json::Map<_, _>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_counted_and_capped() {
        let mut m = McpStats::default();
        for i in 0..100 {
            m.add(&ToolCall {
                tool: &format!("tool_{i}"),
                failed: i % 10 == 0,
                outcome: crate::mcp::outcome::Outcome::Ok,
                total_us: 1000,
            });
        }
        m.add(&ToolCall {
            tool: "tool_1",
            failed: false,
            outcome: crate::mcp::outcome::Outcome::ToolError,
            total_us: 3000,
        });
        assert_eq!(m.tools.len(), MAX_TOOLS + 1);
        assert_eq!(m.tools["tool_1"].calls, 2);
        assert_eq!(m.tools[OTHER].calls, 100 - MAX_TOOLS as u64);
        let j = m.to_json();
        assert_eq!(j["tools"]["tool_0"]["errors"], 1);
        assert_eq!(j["tools"]["tool_1"]["tool_errors"], 1);
    }
}
