//! MCP (the Model Context Protocol) calls over Streamable HTTP, recognised by what is on
//! the wire whatever the host: a JSON-RPC 2.0 message POSTed as `application/json`
//! ([`envelope`]), in every revision in use — 2026-07-28 (stateless, each request naming
//! its version in `_meta` and in `Mcp-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
//! headers), 2025-11-25 (the `initialize` handshake and `Mcp-Session-Id`) and the older
//! HTTP+SSE transport's POSTed messages. A policy matches the method and the tool, prompt
//! or resource it names (`match.mcp`); the `mcp` remedy refuses tools and cuts them from `tools/list` answers
//! ([`tools_list`]); tollgate's own errors on a call are JSON-RPC errors carrying its id
//! (crate::error::rpc). The request body is read once, bounded; answers stream through unread,
//! except a `tools/list` answer a policy filters (docs/mcp.md).

pub mod envelope;
pub mod members;
pub mod names;
pub mod outcome;
pub mod rewrite;
pub mod tools_list;

pub use envelope::{Call, Invalid, Kind};
pub use names::NameGlob;

use http::HeaderName;

use crate::error::{ProxyError, Refusal};
use http::{HeaderMap, Method, StatusCode, header};

/// A message that claims to be JSON-RPC and is malformed, or too large to judge.
pub static INVALID: Refusal = Refusal::refusal(
    "mcp_invalid",
    StatusCode::BAD_REQUEST,
    "an MCP request a policy must judge that is not one valid JSON-RPC message: a batch, a wrong type, an id over 256 bytes, nesting deeper than 128, a key twice, `Mcp-Method`/`Mcp-Name` headers saying otherwise than the body, or a body over `mcp.max_body`",
);

/// The largest request body read to recognise a call when no `mcp` remedy sets its own
/// `max_body`.
pub const MAX_BODY: usize = 4 << 20;

/// The headers 2026-07-28 mirrors the body in (for servers and proxies that route on them).
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// The protocol version a request is sent with (2025-06-18 and later).
pub const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// A 2025-11-25 session (relayed untouched both ways).
pub const MCP_SESSION_ID: &str = "mcp-session-id";

/// Whether a request could carry an MCP message: a POST of `application/json` (what every
/// MCP client sends; a request without a content type is read too).
pub fn candidate(method: &Method, headers: &HeaderMap) -> bool {
    *method == Method::POST
        && headers.get(header::CONTENT_TYPE).is_none_or(|v| {
            let v = v.as_bytes();
            let essence = v.split(|b| *b == b';').next().unwrap_or(v);
            essence
                .trim_ascii()
                .eq_ignore_ascii_case(b"application/json")
        })
}

/// The message in `body`, checked against the 2026-07-28 headers that mirror it.
pub fn judge(headers: &HeaderMap, body: &[u8]) -> Result<Option<Call>, ProxyError> {
    let call = envelope::read(body).map_err(|e| invalid(None, e.to_string()))?;
    let Some(call) = call else {
        return Ok(None);
    };
    if let Some(m) = headers.get(MCP_METHOD)
        && m.as_bytes() != call.method.as_bytes()
    {
        return Err(invalid(
            call.id.clone(),
            format!(
                "the `Mcp-Method` header says `{}` and the body `{}`: send the same method in both",
                String::from_utf8_lossy(m.as_bytes()),
                call.method
            ),
        ));
    }
    if let (Some(h), Some(name)) = (headers.get(MCP_NAME), &call.name)
        && header_value(h.as_bytes()).as_deref() != Some(&**name)
    {
        return Err(invalid(
            call.id.clone(),
            "the `Mcp-Name` header names another tool, prompt or resource than the body: send the same in both".into(),
        ));
    }
    Ok(Some(call))
}

/// An `Mcp-Name` value: as written, or decoded from its `=?base64?…?=` form (what a
/// client sends for a name that is not plain printable ASCII).
fn header_value(v: &[u8]) -> Option<String> {
    use base64::Engine as _;
    let s = std::str::from_utf8(v).ok()?;
    match s
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(s.to_owned()),
    }
}

/// The refusal of a malformed MCP message (400 `mcp_invalid`).
pub fn invalid(id: Option<Box<str>>, message: String) -> ProxyError {
    let e = ProxyError::Rejected(crate::error::Rejection {
        kind: &INVALID,
        message,
        retry_after: None,
        rate: None,
        permanent: true,
    });
    crate::error::ProxyError::Rpc(Box::new(crate::error::Rpc { error: e, id }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_json_posts() {
        let h = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
            h
        };
        assert!(candidate(&Method::POST, &h("application/json")));
        assert!(candidate(
            &Method::POST,
            &h("Application/JSON; charset=utf-8")
        ));
        assert!(candidate(&Method::POST, &HeaderMap::new()));
        assert!(!candidate(&Method::POST, &h("multipart/form-data")));
        assert!(!candidate(&Method::GET, &h("application/json")));
    }

    #[test]
    fn headers_must_say_what_the_body_says() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repository"}}"#;
        let mut h = HeaderMap::new();
        h.insert(MCP_METHOD, "tools/call".parse().unwrap());
        h.insert(MCP_NAME, "delete_repository".parse().unwrap());
        assert!(judge(&h, body).unwrap().is_some());
        h.insert(
            MCP_NAME,
            "=?base64?ZGVsZXRlX3JlcG9zaXRvcnk=?=".parse().unwrap(),
        );
        assert!(judge(&h, body).unwrap().is_some());
        h.insert(MCP_NAME, "add".parse().unwrap());
        assert!(judge(&h, body).is_err());
        h.remove(MCP_NAME);
        h.insert(MCP_METHOD, "tools/list".parse().unwrap());
        assert!(judge(&h, body).is_err());
    }
}
