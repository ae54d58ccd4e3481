//! `POST /mcp`: an MCP server's stand-in (Streamable HTTP, JSON answers): `tools/list`
//! lists three tools, `tools/call` answers a small text result, `initialize` and other
//! requests an empty result, a notification 202. For the MCP benchmark and tests: every
//! answer carries the request's id, as a server's does.

use crate::body::{Body, full};
use crate::respond;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// The tools `tools/list` answers.
pub const TOOLS: &str = r#"{"tools":[{"name":"add","description":"Adds two numbers.","inputSchema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}},{"name":"search_issues","description":"Searches issues.","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}},{"name":"delete_repository","description":"Deletes a repository.","inputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}]}"#;

pub async fn answer(req: Request<Incoming>) -> Response<Body> {
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "unreadable body");
    };
    let Ok(m) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return error("null", -32700, "Parse error");
    };
    let id = match m.get("id") {
        Some(id) => id.to_string(),
        None => {
            let mut r = Response::new(full(bytes::Bytes::new()));
            *r.status_mut() = StatusCode::ACCEPTED;
            return r;
        }
    };
    let result = match m["method"].as_str() {
        Some("tools/list") => TOOLS.to_owned(),
        Some("tools/call") => {
            let tool = m["params"]["name"].as_str().unwrap_or_default();
            serde_json::json!({"content": [{"type": "text", "text": format!("{tool}: ok")}], "isError": false})
                .to_string()
        }
        Some(_) => "{}".to_owned(),
        None => return error(&id, -32600, "Invalid Request"),
    };
    respond(
        StatusCode::OK,
        "application/json",
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
    )
}

fn error(id: &str, code: i64, message: &str) -> Response<Body> {
    respond(
        StatusCode::OK,
        "application/json",
        format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"{message}"}}}}"#),
    )
}
