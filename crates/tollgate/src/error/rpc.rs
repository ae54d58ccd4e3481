//! tollgate's own errors on an MCP call, in the shape MCP clients read (JSON-RPC 2.0 §5.1):
//! a JSON-RPC error carrying the call's `id`, its `code` from the table below
//! (docs/mcp.md), and tollgate's code, status and retry hint in `data`. It is sent as an
//! MCP server sends a JSON-RPC error (MCP 2026-07-28's status table: 400 for a malformed
//! message, 200 otherwise), with `x-tollgate-error` as on every error tollgate makes.

use http::StatusCode;
use serde_json::value::RawValue;

/// JSON-RPC's "Invalid Request": the message is malformed, or refused as the client's
/// mistake.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's "Internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP's request timeout (the server did not answer in time).
pub const REQUEST_TIMEOUT: i64 = -32001;
/// A policy refuses the call (a denied tool, a domain, an address): sending it again
/// cannot succeed.
pub const REFUSED: i64 = -32051;
/// A limit refused the call for now (a rate limit, a quota, concurrency, a breaker, the
/// server's own throttling): `data.retry_after` says when to try again, when known.
pub const LIMITED: i64 = -32052;
/// tollgate could not reach the server, or the exchange failed.
pub const UNREACHABLE: i64 = -32053;

/// The JSON-RPC code of an error of tollgate's with `status`.
pub fn code(status: StatusCode) -> i64 {
    match status.as_u16() {
        400 | 413 | 421 | 431 | 508 => INVALID_REQUEST,
        403 => REFUSED,
        429 | 503 => LIMITED,
        504 => REQUEST_TIMEOUT,
        502 => UNREACHABLE,
        _ => INTERNAL_ERROR,
    }
}

/// The HTTP status of a JSON-RPC error for an error of tollgate's with `status`.
pub fn http_status(status: StatusCode) -> StatusCode {
    match code(status) {
        INVALID_REQUEST => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// The error's body: `id` as the call wrote it (`null` when it had none or was unread).
pub fn body(
    id: Option<&str>,
    status: StatusCode,
    tollgate_code: &str,
    message: &str,
    retry_after: Option<u64>,
) -> String {
    let id = id
        .and_then(|i| RawValue::from_string(i.to_owned()).ok())
        .unwrap_or_else(|| RawValue::from_string("null".into()).expect("null is JSON"));
    let mut data = serde_json::json!({
        "type": "tollgate_error",
        "code": tollgate_code,
        "status": status.as_u16(),
    });
    if let Some(s) = retry_after {
        data["retry_after"] = s.into();
    }
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code(status), "message": message, "data": data },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_calls_id_as_written() {
        let b: serde_json::Value = serde_json::from_str(&body(
            Some(r#""req-7""#),
            StatusCode::FORBIDDEN,
            "mcp_tool_denied",
            "no",
            None,
        ))
        .unwrap();
        assert_eq!(b["id"], "req-7");
        assert_eq!(b["error"]["code"], REFUSED);
        assert_eq!(b["error"]["data"]["code"], "mcp_tool_denied");
        let b: serde_json::Value = serde_json::from_str(&body(
            Some("18446744073709551617"),
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "slow down",
            Some(3),
        ))
        .unwrap();
        assert_eq!(b["id"].to_string(), "18446744073709551617");
        assert_eq!(b["error"]["data"]["retry_after"], 3);
        let b: serde_json::Value = serde_json::from_str(&body(
            None,
            StatusCode::BAD_REQUEST,
            "mcp_invalid",
            "x",
            None,
        ))
        .unwrap();
        assert!(b["id"].is_null());
    }
}
