//! MCP calls governed per tool: reads the JSON-RPC message a request carries
//! (crate::mcp), refuses a `tools/call` of a tool the policy denies (or does not allow)
//! with a JSON-RPC error carrying the call's id — the server never sees it — and cuts
//! those tools from `tools/list` answers, so the model is never offered them. Counts
//! calls per method and tool in `tollgate_mcp_calls_total`. Other remedies of the policy
//! apply per tool through `match.mcp` (docs/mcp.md).

use crate::body::Body;
use crate::error::{ProxyError, Refusal, Rejection};
use crate::fields::units::Size;
use crate::mcp::rewrite::{self, Rewrite, Rewritten};
use crate::mcp::{Call, Kind as MessageKind, NameGlob, names};
use crate::policy::actions::Actions;
use crate::policy::chain::{Built, Exchange, Flow, Phase, Remedy};
use crate::policy::compile::Build;
use crate::policy::kind::{Check, Phases, RemedyKind};
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tally::{Metrics, Tally};

mod answer;
mod arguments;
mod legacy;
mod tally;

/// A `tools/call` of a tool the policy refuses.
pub static DENIED: Refusal = Refusal::refusal(
    "mcp_tool_denied",
    StatusCode::FORBIDDEN,
    "an MCP `tools/call` of a tool a policy's `mcp` denies, or does not allow (a JSON-RPC error with the call's id; the server never sees it)",
);
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
    /// Values a tool may not be called with: each rule names the tools (exact or globs), an argument (`amount`, or a path: `options.force`), and strings it refuses (`deny`, globs) or the numbers it allows (`max`, `min`). Such a call is answered as a denied tool is. Only a call of a tool a rule names has its arguments read.
    pub arguments: Vec<arguments::RawArgumentRule>,
    /// The largest request body read to judge a call; a larger one is refused (400 `mcp_invalid`), as it cannot be judged.
    pub max_body: Size<1024, { 64 << 20 }>,
}

impl Default for RawMcp {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            filter_lists: true,
            arguments: Vec::new(),
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
    pub arguments: Vec<arguments::ArgumentRule>,
    pub max_body: usize,
}

impl McpSpec {
    /// Whether it refuses anything (tools, or values of their arguments).
    pub fn refuses(&self) -> bool {
        !(self.allow.is_empty() && self.deny.is_empty() && self.arguments.is_empty())
    }

    /// Whether it refuses calls of `tool`, or some values of its arguments.
    pub fn refuses_tool(&self, tool: &str) -> bool {
        !self.permits(tool) || arguments::applies(&self.arguments, tool)
    }

    /// Whether it refuses what `other` refuses, the same way.
    pub fn same_refusals(&self, other: &McpSpec) -> bool {
        self.allow == other.allow && self.deny == other.deny && self.arguments == other.arguments
    }

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

/// `mcp:` in a policy.
pub struct Kind;

impl RemedyKind for Kind {
    const NAME: &'static str = "mcp";
    const PHASES: Phases = Phases {
        request: "reads the MCP call (JSON-RPC method, tool); refuses a denied tool with a JSON-RPC error carrying its id",
        attempt: "",
        response: "cuts denied tools from a `tools/list` answer",
    };
    const EXAMPLE: &'static str = "{deny: [delete_repository, 'admin_*'], arguments: [{tool: create_refund, argument: amount, min: 1, max: 100}]}";
    const REFUSALS: &'static [&'static Refusal] = &[&DENIED, &crate::mcp::INVALID];
    type Raw = RawMcp;
    type Spec = McpSpec;
    type Action = Action;
    type Metrics = Metrics;

    fn register(f: &mut crate::metrics::Families<'_>) -> Metrics {
        Metrics::register(f)
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
        let allow = globs("allow", &raw.allow);
        let deny = globs("deny", &raw.deny);
        let at = cx.at("arguments");
        Some(McpSpec {
            allow,
            deny,
            filter_lists: raw.filter_lists,
            arguments: arguments::validate(cx.errors, &at, &raw.arguments),
            max_body: raw.max_body.get(),
        })
    }

    fn build(spec: &McpSpec, b: &mut Build<'_>) -> Built {
        Built::from(Arc::new(Mcp {
            spec: Arc::new(spec.clone()),
            actions: b.actions(),
            tally: Arc::new(Tally::new(b.policy, b.metrics_of::<Kind>())),
            // One registry for every policy: a stream may pass through one and its
            // messages through another (a per-tool policy).
            sessions: b.reuse("mcp:legacy-sessions".into(), |_| {
                legacy::Sessions::default()
            }),
        }))
    }
}

pub struct Mcp {
    spec: Arc<McpSpec>,
    actions: Actions<Action>,
    tally: Arc<Tally>,
    /// The older HTTP+SSE transport's open streams (legacy.rs).
    sessions: Arc<legacy::Sessions>,
}

/// A `tools/list` answer to filter (set by the request phase).
struct FilterList;

impl Remedy for Mcp {
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a> {
        Phase::wait(async move {
            if crate::policy::mcp_call::call(x, self.spec.max_body)
                .await?
                .is_none()
            {
                return Ok(Flow::Continue);
            }
            let Some(call) = crate::policy::mcp_call::shared_call(x) else {
                return Ok(Flow::Continue);
            };
            // A message POSTed to an older HTTP+SSE session: a refusal goes on its stream.
            let legacy = self.sessions.reply(
                x.target.authority.as_str(),
                x.parts.uri.path_and_query().map_or("/", |p| p.as_str()),
            );
            if call.kind != MessageKind::Request {
                return Ok(Flow::Continue);
            }
            self.tally.call(&call);
            let refused = call.tool().and_then(|tool| {
                let why = match self.spec.permits(tool) {
                    false => format!("does not allow the MCP tool `{tool}`"),
                    true => self.broken(x, tool)?,
                };
                Some(denied(self.tally.policy(), &why).on_call(call.id.clone()))
            });
            if let Some(reply) = legacy {
                x.locals.insert(reply);
            }
            if let Some(e) = refused {
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
        let lists = x.locals.take::<FilterList>().is_some();
        let Some(call) = crate::policy::mcp_call::shared_call(x) else {
            return self.stream(x, resp);
        };
        if call.kind != MessageKind::Request || !resp.status().is_success() {
            return resp;
        }
        let Some(sse) = answer::event_stream(&resp) else {
            return resp;
        };
        let resp = self.rewritten(x, resp, sse, lists, &call);
        answer::watch(resp, sse, call, self.tally.clone())
    }
}

impl Mcp {
    /// What in the call of `tool` breaks an argument rule, when a rule names the tool.
    fn broken(&self, x: &Exchange, tool: &str) -> Option<String> {
        let rules = &self.spec.arguments;
        if !arguments::applies(rules, tool) {
            return None;
        }
        let why = arguments::broken(rules, tool, x.buffered.as_deref()?)?;
        Some(format!("refuses this call: {why}"))
    }

    /// A `GET`'s event stream (the older HTTP+SSE transport's session, or a 2025-11-25
    /// server's own stream): its `tools/list` answers filtered, and, for the former,
    /// refusals of the messages POSTed to it sent on it (legacy.rs).
    fn stream(&self, x: &Exchange, resp: Response<Body>) -> Response<Body> {
        if x.method != http::Method::GET
            || !resp.status().is_success()
            || answer::event_stream(&resp) != Some(true)
            || resp.headers().contains_key(header::CONTENT_ENCODING)
        {
            return resp;
        }
        let spec = self.spec.clone();
        let filters = spec.filter_lists && !(spec.deny.is_empty() && spec.allow.is_empty());
        let rewrite: Option<Rewrite> = filters.then(|| {
            Arc::new(move |m: &str| crate::mcp::tools_list::filter(m, &|t| spec.permits(t)))
                as Rewrite
        });
        let authority = x.target.authority.as_str().to_owned();
        let sessions = self.sessions.clone();
        resp.map(|b| legacy::Stream::new(b, &authority, sessions, rewrite).boxed_unsync())
    }

    /// The answer with its messages rewritten where they must be: a `tools/list`
    /// without the refused tools; an answer from the cache (`x-tollgate-cache`), stored
    /// with the `id` of the call that fetched it, with this call's `id`. A coded answer
    /// (although identity was asked for) is relayed as it is: a call of a refused tool is
    /// still refused.
    fn rewritten(
        &self,
        x: &mut Exchange,
        resp: Response<Body>,
        sse: bool,
        lists: bool,
        call: &Call,
    ) -> Response<Body> {
        // `hit` and `shared-hit`: the stored answer, not this call's own.
        let cached = resp
            .headers()
            .get(crate::headers::X_TOLLGATE_CACHE)
            .is_some_and(|v| v.as_bytes().ends_with(b"hit"));
        let id = cached.then(|| call.id.clone()).flatten();
        if (!lists && id.is_none()) || resp.headers().contains_key(header::CONTENT_ENCODING) {
            return resp;
        }
        if lists {
            self.actions.record(x, Action::ListFiltered);
        }
        let spec = self.spec.clone();
        let rewrite: Rewrite = Arc::new(move |m: &str| {
            let cut = lists
                .then(|| crate::mcp::tools_list::filter(m, &|t| spec.permits(t)))
                .flatten();
            let m = cut.as_deref().unwrap_or(m);
            match &id {
                Some(id) => rewrite::with_id(m, id).or(cut),
                None => cut,
            }
        });
        let (mut parts, body) = resp.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, Rewritten::new(body, sse, rewrite).boxed_unsync())
    }
}

/// A refused call: `why` says what the policy refuses (`does not allow the MCP tool …`).
fn denied(policy: &str, why: &str) -> ProxyError {
    ProxyError::Rejected(Rejection {
        kind: &DENIED,
        message: format!("policy `{policy}` {why}"),
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
            arguments: vec![],
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
}
