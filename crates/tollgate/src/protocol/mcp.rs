//! MCP over Streamable HTTP (both revisions in use) and the older HTTP+SSE transport:
//! read by `crate::mcp` when a policy asks for it (docs/mcp.md).

use super::{Kind, Unit};

pub const UNIT: Unit = Unit {
    name: "mcp",
    title: "MCP (Model Context Protocol) tool, resource and prompt calls",
    recognised_by: "`POST` of `application/json` holding a JSON-RPC 2.0 message, read when a policy asks (`match.mcp`, `mcp:`)",
    answer: "a result, `isError: true` or a JSON-RPC error; `tools/list` filtered",
    policies: "`match.mcp` by method, tool and name; `mcp` (allow, deny, arguments); every remedy per tool",
    kind: Kind::Mcp,
};
