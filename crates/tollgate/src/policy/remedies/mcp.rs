//! MCP calls governed per tool: reads the JSON-RPC message a request carries
//! (crate::mcp), refuses a `tools/call` of a tool the policy denies (or does not allow)
//! with a JSON-RPC error carrying the call's id — the server never sees it — and cuts
//! those tools from `tools/list` answers, so the model is never offered them. Counts
//! calls per method and tool in `tollgate_mcp_calls_total`. Other remedies of the policy
//! apply per tool through `match.mcp` (docs/mcp.md).

use crate::body::Body;
use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::units::Size;
use crate::mcp::tools_list::{Filtered, Keep};
use crate::mcp::{Call, Kind as MessageKind, NameGlob, names};
use crate::policy::actions::Actions;
use crate::policy::chain::{BoxFuture, Built, Exchange, Flow, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustc_hash::FxHashMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, RwLock};

/// A `tools/call` of a tool the policy refuses.
pub static DENIED: Refusal = Refusal::refusal(
    "mcp_tool_denied",
    StatusCode::FORBIDDEN,
    "an MCP `tools/call` of a tool a policy's `mcp` denies, or does not allow (a JSON-RPC error with the call's id; the server never sees it)",
);
/// Distinct tools counted per policy; calls of others are counted as `other`.
pub const MAX_TOOLS: usize = 64;

/// `mcp:` in a policy.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMcp {
    /// Tools that may be called (exact names or globs: `get_*`). Empty: every tool not denied.
    pub allow: Vec<String>,
    /// Tools that may never be called (exact names or globs: `delete_*`): such a call is answered with a JSON-RPC error carrying its id (`mcp_tool_denied`) and never reaches the server. Wins over `allow`.
    pub deny: Vec<String>,
    /// Cut the tools a call would be refused for from `tools/list` answers, so the model is never offered them.
    pub filter_lists: bool,
    /// The largest request body read to judge a call; a larger one is refused (400 `mcp_invalid`), as it cannot be judged.
    pub max_body: Size<1024, { 64 << 20 }>,
}

impl Default for RawMcp {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            filter_lists: true,
            max_body: Size::bytes(crate::mcp::MAX_BODY as u64),
        }
    }
}

/// `mcp:`, validated.
#[derive(Debug, Clone)]
pub struct McpSpec {
    pub allow: Vec<NameGlob>,
    pub deny: Vec<NameGlob>,
    pub filter_lists: bool,
    pub max_body: usize,
}

impl McpSpec {
    /// Whether a call of `tool` may go to the server.
    pub fn permits(&self, tool: &str) -> bool {
        !names::any(&self.deny, tool) && (self.allow.is_empty() || names::any(&self.allow, tool))
    }
}

crate::policy::actions::actions! {
    /// What the `mcp` stage did with a call.
    pub enum Action for "mcp" {
        Allowed = "allowed",
        Denied = "denied",
        ListFiltered = "list_filtered",
    }
}

/// `tollgate_mcp_calls_total{policy, method, tool}`.
#[derive(Default)]
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
}

#[derive(
    Clone, Debug, Default, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet,
)]
pub struct CallLabels {
    pub policy: String,
    pub method: &'static str,
    pub tool: String,
}

/// `mcp:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "mcp";
    const PHASES: Phases = Phases {
        request: "reads the MCP call (JSON-RPC method, tool); refuses a denied tool with a JSON-RPC error carrying its id",
        attempt: "",
        response: "cuts denied tools from a `tools/list` answer",
    };
    const EXAMPLE: &'static str = "{deny: [delete_repository, 'admin_*']}";
    const REFUSALS: &'static [&'static Refusal] = &[&DENIED, &crate::mcp::INVALID];
    type Raw = RawMcp;
    type Spec = McpSpec;
    type Action = Action;
    type Metrics = Metrics;

    fn register(f: &mut crate::metrics::Families<'_>) -> Metrics {
        Metrics {
            calls: f.add(
                "mcp_calls",
                "MCP calls a policy's `mcp` read, by policy, JSON-RPC method (known methods; others `other`) and tool (`tools/call`; the first 64 names per policy, others `other`; empty for other methods)",
            ),
        }
    }

    fn validate(raw: &RawMcp, cx: &mut Check<'_>) -> Option<McpSpec> {
        let mut globs = |key: &str, list: &[String]| -> Vec<NameGlob> {
            list.iter()
                .enumerate()
                .filter_map(|(i, n)| {
                    cx.errors
                        .check(&cx.at(&format!("{key}[{i}]")), NameGlob::new(n))
                })
                .collect()
        };
        Some(McpSpec {
            allow: globs("allow", &raw.allow),
            deny: globs("deny", &raw.deny),
            filter_lists: raw.filter_lists,
            max_body: raw.max_body.get(),
        })
    }

    fn build(spec: &McpSpec, b: &mut Build<'_>) -> Built {
        Built::from(Arc::new(Mcp {
            spec: Arc::new(spec.clone()),
            actions: b.actions(),
            policy: b.policy.to_owned(),
            metrics: b.metrics_of::<Kind>(),
            counters: RwLock::default(),
        }))
    }
}

pub struct Mcp {
    spec: Arc<McpSpec>,
    actions: Actions<Action>,
    policy: String,
    metrics: Arc<Metrics>,
    /// Each method's counters by tool, resolved once; at most [`MAX_TOOLS`] tools.
    counters: RwLock<FxHashMap<&'static str, FxHashMap<Box<str>, Counter>>>,
}

/// A `tools/list` answer to filter (set by the request phase).
struct FilterList;

impl Remedy for Mcp {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let Some(call) = crate::policy::mcp_call::call(x, self.spec.max_body).await? else {
                return Ok(Flow::Continue);
            };
            if call.kind != MessageKind::Request {
                return Ok(Flow::Continue);
            }
            self.count(call);
            if let Some(tool) = call.tool()
                && !self.spec.permits(tool)
            {
                let e = denied(&self.policy, tool).on_call(call.id.clone());
                self.actions.record(x, Action::Denied);
                return Err(e);
            }
            let lists = &*call.method == "tools/list"
                && self.spec.filter_lists
                && !(self.spec.deny.is_empty() && self.spec.allow.is_empty());
            self.actions.record(x, Action::Allowed);
            if lists {
                // The answer is read to be filtered: uncompressed (RFC 9110 §12.5.3:
                // identity is always acceptable).
                x.parts.headers.insert(
                    header::ACCEPT_ENCODING,
                    HeaderValue::from_static("identity"),
                );
                x.locals.insert(FilterList);
            }
            Ok(Flow::Continue)
        })
    }

    fn response(&self, x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        if x.locals.take::<FilterList>().is_none() || !resp.status().is_success() {
            return resp;
        }
        let kind = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.as_bytes().trim_ascii_start().to_ascii_lowercase());
        let sse = match kind {
            Some(k) if k.starts_with(b"text/event-stream") => true,
            Some(k) if k.starts_with(b"application/json") => false,
            _ => return resp,
        };
        if resp.headers().contains_key(header::CONTENT_ENCODING) {
            // Coded although identity was asked for: relayed as it is (a call of a
            // refused tool is still refused).
            return resp;
        }
        self.actions.record(x, Action::ListFiltered);
        let spec = self.spec.clone();
        let keep: Keep = Arc::new(move |tool| spec.permits(tool));
        let (mut parts, body) = resp.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, Filtered::new(body, sse, keep).boxed_unsync())
    }
}

impl Mcp {
    /// Counts `call` under its method and tool.
    fn count(&self, call: &Call) {
        let method = method_label(&call.method);
        let tool = call.tool().unwrap_or("");
        let found = self.counters.read().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = found.get(method).and_then(|m| m.get(tool)) {
            c.inc();
            return;
        }
        drop(found);
        let mut counters = self.counters.write().unwrap_or_else(|e| e.into_inner());
        let tools: usize = counters
            .values()
            .map(|m| m.keys().filter(|t| !t.is_empty()).count())
            .sum();
        let by_tool = counters.entry(method).or_default();
        let label = match tool {
            "" => "",
            t if tools < MAX_TOOLS || by_tool.contains_key(t) => t,
            _ => "other",
        };
        by_tool
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

fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

fn denied(policy: &str, tool: &str) -> ProxyError {
    ProxyError::Rejected(Rejection {
        kind: &DENIED,
        message: format!("policy `{policy}` does not allow the MCP tool `{tool}`"),
        retry_after: None,
        rate: None,
        permanent: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_over_allow() {
        let g = |l: &[&str]| l.iter().map(|n| NameGlob::new(n).unwrap()).collect();
        let s = McpSpec {
            allow: g(&["get_*", "get_secret"]),
            deny: g(&["get_secret"]),
            filter_lists: true,
            max_body: 1024,
        };
        assert!(s.permits("get_issue"));
        assert!(!s.permits("get_secret"));
        assert!(!s.permits("create_issue"));
        let open = McpSpec {
            allow: vec![],
            deny: g(&["delete_*"]),
            ..s
        };
        assert!(open.permits("create_issue"));
        assert!(!open.permits("delete_repository"));
    }

    #[test]
    fn methods_are_a_bounded_set() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x/anything"), "other");
    }
}
