//! MCP calls through tollgate against an in-process JSON-RPC server: tools refused with a
//! JSON-RPC error carrying the call's id (and never sent), cut from `tools/list` answers
//! (JSON and SSE), policies matched per tool, in every routing mode, and hostile messages
//! refused before the server sees them.

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// What the stand-in server saw: each message's method and tool, and the request heads'
/// `accept-encoding`.
#[derive(Default)]
struct Seen {
    calls: Vec<(String, Option<String>)>,
    encodings: Vec<Option<String>>,
}

const TOOLS: &str = r#"{"tools":[{"name":"add","inputSchema":{"type":"object"}},{"name":"delete_repository","description":"Deletes."},{"name":"echo"}],"ttlMs":0}"#;

/// A JSON-RPC server: `tools/list` answers three tools, `tools/call` echoes the tool's
/// name; as SSE when the request says `x-answer: sse`.
async fn mcp_server() -> (Server, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let server = upstream(move |req: Request<hyper::body::Incoming>| {
        let seen = s.clone();
        async move {
            let sse = req.headers().get("x-answer").is_some_and(|v| v == "sse");
            let encoding = req
                .headers()
                .get("accept-encoding")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let m: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let method = m["method"].as_str().unwrap_or("").to_owned();
            let tool = m["params"]["name"].as_str().map(str::to_owned);
            {
                let mut seen = seen.lock().unwrap();
                seen.calls.push((method.clone(), tool.clone()));
                seen.encodings.push(encoding);
            }
            // `fails` runs and fails (a tool error); `missing` is no tool (a JSON-RPC error).
            let result = match (method.as_str(), tool.as_deref()) {
                ("tools/list", _) => format!(r#""result":{TOOLS}"#),
                (_, Some("missing")) => {
                    r#""error":{"code":-32602,"message":"Unknown tool: missing"}"#.to_owned()
                }
                (_, t) => format!(
                    r#""result":{}"#,
                    json!({"content": [{"type": "text", "text": t}], "isError": t == Some("fails")})
                ),
            };
            let message = format!(r#"{{"jsonrpc":"2.0","id":{},{result}}}"#, m["id"]);
            match sse {
                true => answer(
                    200,
                    &[("content-type", "text/event-stream")],
                    &format!(
                        "event: message\nid: e1\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{}}}}\n\nevent: message\nid: e2\ndata: {message}\n\n"
                    ),
                ),
                false => answer(200, &[("content-type", "application/json")], &message),
            }
        }
    })
    .await;
    (server, seen)
}

/// A gateway routing `/mcp` to `up`, with `policies` (YAML, indented as a top-level key).
async fn mcp_gateway(up: &Server, policies: &str) -> tollgate::Gateway {
    gateway(&format!(
        "routes:\n  - prefix: /mcp\n    upstream: http://{}\n{policies}",
        up.addr
    ))
    .await
}

/// POSTs `body` to the gateway's `/mcp` route, with extra headers.
async fn post(gw: &tollgate::Gateway, body: impl Into<Bytes>, headers: &[(&str, &str)]) -> Got {
    let mut b = Request::post(format!("http://{}/mcp/", gw.proxy_addr))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    send(&client(), b.body(bytes_body(body.into())).unwrap()).await
}

fn call(id: &str, tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"token":"s3cr3t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}}}}"#
    )
}

/// `b` is the JSON-RPC error of a refused call: its id, the code, a message saying `says`.
fn assert_refused(b: &Value, id: Value, says: &str) {
    assert_eq!(b["jsonrpc"], "2.0");
    assert_eq!(b["id"], id);
    assert_eq!(b["error"]["code"], -32051);
    assert_eq!(b["error"]["data"]["code"], "mcp_tool_denied");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message}");
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

#[tokio::test]
async fn a_denied_tool_is_answered_with_the_calls_id_and_never_sent() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: gh\n    mcp: {deny: [\"delete_*\"]}\n",
    )
    .await;
    let got = post(
        &gw,
        call(r#""req-9""#, "delete_repository"),
        &[
            ("mcp-method", "tools/call"),
            ("mcp-name", "delete_repository"),
        ],
    )
    .await;
    // Sent as MCP servers send a JSON-RPC error: 200, the error in the body.
    assert_eq!(got.status, 200);
    assert_eq!(got.header("x-tollgate-error"), Some("mcp_tool_denied"));
    assert_eq!(got.header("content-type"), Some("application/json"));
    let b = got.json();
    assert_refused(&b, json!("req-9"), "delete_repository");
    // An integer id comes back as written, past what a double holds.
    let got = post(&gw, call("18446744073709551617", "delete_repository"), &[]).await;
    assert!(
        std::str::from_utf8(&got.body)
            .unwrap()
            .contains(r#""id":18446744073709551617"#)
    );
    assert!(
        seen.lock().unwrap().calls.is_empty(),
        "the server saw a denied call"
    );
    let got = post(&gw, call("3", "add"), &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["result"]["content"][0]["text"], "add");
    assert_eq!(
        seen.lock().unwrap().calls,
        vec![("tools/call".to_owned(), Some("add".to_owned()))]
    );
    let m = metrics_when(&gw, |t| {
        t.contains(r#"tollgate_mcp_calls_total{policy="gh",method="tools/call",tool="delete_repository"} 2"#)
    })
    .await;
    assert!(
        m.contains(r#"tollgate_mcp_calls_total{policy="gh",method="tools/call",tool="add"} 1"#)
    );
    assert!(
        m.contains(r#"tollgate_remedy_actions_total{policy="gh",remedy="mcp",action="denied"} 2"#)
    );
}

#[tokio::test]
async fn only_allowed_tools_go_through_and_the_list_shows_only_them() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: ro\n    mcp: {allow: [add, echo]}\n",
    )
    .await;
    assert_eq!(
        post(&gw, call("1", "echo"), &[]).await.json()["result"]["isError"],
        false
    );
    let refused = post(&gw, call("2", "delete_repository"), &[]).await;
    assert_eq!(refused.json()["error"]["code"], -32051);
    let list = post(&gw, LIST, &[]).await.json();
    let names: Vec<_> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["add", "echo"]);
    assert_eq!(seen.lock().unwrap().calls.len(), 2);
}

#[tokio::test]
async fn tools_list_answers_lose_the_denied_tools_as_json_and_as_events() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: gh\n    mcp: {deny: [delete_repository]}\n",
    )
    .await;
    let got = post(&gw, LIST, &[("accept-encoding", "gzip, br")]).await;
    assert_eq!(got.status, 200);
    let body = std::str::from_utf8(&got.body).unwrap();
    // Only the denied entry is cut: every other byte is the server's.
    assert_eq!(
        body,
        r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"add","inputSchema":{"type":"object"}},{"name":"echo"}],"ttlMs":0}}"#
    );
    // The list was asked for uncompressed, to be read.
    assert_eq!(
        seen.lock().unwrap().encodings[0].as_deref(),
        Some("identity")
    );
    let got = post(&gw, LIST, &[("x-answer", "sse")]).await;
    assert_eq!(got.header("content-type"), Some("text/event-stream"));
    let body = std::str::from_utf8(&got.body).unwrap();
    assert!(body.starts_with("event: message\nid: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\nevent: message\nid: e2\ndata: {"));
    assert!(body.contains(r#""name":"echo""#) && !body.contains("delete_repository"));
    // Calls are relayed as the client asked (their answers unread).
    post(&gw, call("4", "add"), &[("accept-encoding", "gzip")]).await;
    assert_eq!(seen.lock().unwrap().encodings[2].as_deref(), Some("gzip"));
    metrics_when(&gw, |t| {
        t.contains(
            r#"tollgate_remedy_actions_total{policy="gh",remedy="mcp",action="list_filtered"} 2"#,
        )
    })
    .await;
}

#[tokio::test]
async fn policies_apply_per_tool() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: adds\n    match: {mcp: {tools: [add]}}\n    rate_limit: {limit: 2, window: minute}\n  - name: lists\n    match: {mcp: {methods: [tools/list]}}\n    mock: {body: {jsonrpc: \"2.0\", id: 1, result: {tools: []}}}\n",
    )
    .await;
    for i in 0..2 {
        assert_eq!(
            post(&gw, call(&i.to_string(), "add"), &[]).await.status,
            200
        );
    }
    let got = post(&gw, call(r#""third""#, "add"), &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("x-tollgate-error"), Some("rate_limited"));
    assert!(got.header("retry-after").is_some());
    let b = got.json();
    assert_eq!(b["id"], "third");
    assert_eq!(b["error"]["code"], -32052);
    assert!(b["error"]["data"]["retry_after"].as_u64().unwrap() >= 1);
    // Another tool matches neither policy: sent plainly, unlimited.
    for i in 0..3 {
        assert_eq!(
            post(&gw, call(&i.to_string(), "echo"), &[]).await.status,
            200
        );
    }
    // The second policy applies to its method alone.
    assert_eq!(
        post(&gw, LIST, &[]).await.json()["result"]["tools"],
        json!([])
    );
    let calls = seen.lock().unwrap().calls.clone();
    assert_eq!(
        calls
            .iter()
            .filter(|(_, t)| t.as_deref() == Some("add"))
            .count(),
        2
    );
    assert_eq!(
        calls
            .iter()
            .filter(|(_, t)| t.as_deref() == Some("echo"))
            .count(),
        3
    );
    assert!(
        !calls.iter().any(|(m, _)| m == "tools/list"),
        "the list was mocked"
    );
    // A request that is no MCP call passes as before.
    let got = post(&gw, r#"{"model":"x"}"#, &[]).await;
    assert_eq!(got.status, 200);
}

#[tokio::test]
async fn hostile_messages_are_refused_before_the_server() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: gh\n    mcp: {deny: [delete_repository], max_body: 1MiB}\n",
    )
    .await;
    let batch = format!(
        "[{}]",
        vec![call("1", "delete_repository"); 10_000].join(",")
    );
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"add","arguments":{}{}}}}}"#,
        "[".repeat(500),
        "]".repeat(500)
    );
    let huge_id = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"tools/call","params":{{"name":"add"}}}}"#,
        "7".repeat(4096)
    );
    let twice = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","name":"delete_repository"}}"#;
    let typed =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["delete_repository"]}}"#;
    let cases: Vec<(String, &[(&str, &str)])> = vec![
        (batch, &[]),
        (deep, &[]),
        (huge_id, &[]),
        (twice.into(), &[]),
        (typed.into(), &[]),
        (call("1", "add"), &[("mcp-name", "echo")]),
        (call("1", "add"), &[("mcp-method", "tools/list")]),
    ];
    for (body, headers) in cases {
        let got = post(&gw, body.clone(), headers).await;
        assert_eq!(got.status, 400, "{}", &body[..body.len().min(80)]);
        assert_eq!(got.header("x-tollgate-error"), Some("mcp_invalid"));
        let b = got.json();
        assert_eq!(b["error"]["code"], -32600);
        assert_eq!(b["jsonrpc"], "2.0");
    }
    assert!(
        seen.lock().unwrap().calls.is_empty(),
        "{:?}",
        seen.lock().unwrap().calls
    );
}

/// A tool's SSE answer, fed by the test one event at a time.
fn events(rx: tokio::sync::mpsc::Receiver<Bytes>) -> tollgate::body::Body {
    let s = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| {
            (
                Ok::<_, tollgate::body::BoxError>(http_body::Frame::data(b)),
                rx,
            )
        })
    });
    http_body_util::StreamBody::new(s).boxed_unsync()
}

/// A server answering one request with an event stream the test feeds, event by event.
async fn streaming_server() -> (Server, tokio::sync::mpsc::Sender<Bytes>) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let feed = Arc::new(Mutex::new(Some(rx)));
    let up = upstream(move |_req| {
        let rx = feed.lock().unwrap().take().expect("one stream");
        async move {
            let mut r = http::Response::new(events(rx));
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            r
        }
    })
    .await;
    (up, tx)
}

#[tokio::test]
async fn a_streamed_result_passes_event_by_event_and_a_stalled_one_is_cut() {
    let (up, tx) = streaming_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: gh\n    match: {mcp: {tools: [long_job]}}\n    timeouts: {idle: 300ms}\n    mcp: {deny: [delete_repository]}\n",
    )
    .await;
    let req = Request::post(format!("http://{}/mcp/", gw.proxy_addr))
        .header("content-type", "application/json")
        .body(bytes_body(call("5", "long_job")))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    // Each event reaches the client before the server has written the next.
    for i in 0..3 {
        let event = Bytes::from(format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progress\":{i}}}}}\n\n"
        ));
        tx.send(event.clone()).await.unwrap();
        let got = body.frame().await.unwrap().unwrap();
        assert_eq!(got.into_data().unwrap(), event);
    }
    // Then the server stalls: the stream is cut at `timeouts.idle`, not held open.
    let end = body.frame().await;
    assert!(
        !matches!(end, Some(Ok(_))),
        "a stalled stream must end, not send more"
    );
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_per_tool_limit_is_exact_across_three_gateways_on_redis() {
    let redis = crate::support::redis_procs::RedisServer::start();
    let (up, seen) = mcp_server().await;
    let yaml = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 500ms\nroutes:\n  - prefix: /mcp\n    upstream: http://{}\npolicies:\n  - name: adds\n    match: {{mcp: {{tools: [add]}}}}\n    rate_limit: {{limit: 5, window: hour}}\n",
        redis.url(),
        up.addr
    );
    clear_of_the_hour_end(60).await;
    let gws = Arc::new([
        gateway(&yaml).await,
        gateway(&yaml).await,
        gateway(&yaml).await,
    ]);
    let mut tasks = Vec::new();
    for i in 0..15 {
        let gws = gws.clone();
        tasks.push(tokio::spawn(async move {
            post(&gws[i % 3], call(&i.to_string(), "add"), &[])
                .await
                .json()
        }));
    }
    let mut answered = 0;
    for t in tasks {
        let b = t.await.unwrap();
        match b["error"]["code"].as_i64() {
            None => answered += 1,
            Some(code) => assert_eq!(code, -32052, "{b}"),
        }
    }
    assert_eq!(answered, 5, "the limit is one for the three gateways");
    // Other tools are not counted against it.
    let echo = post(&gws[0], call("99", "echo"), &[]).await.json();
    assert_eq!(echo["result"]["content"][0]["text"], "echo");
    let adds = seen
        .lock()
        .unwrap()
        .calls
        .iter()
        .filter(|(_, t)| t.as_deref() == Some("add"))
        .count();
    assert_eq!(adds, 5);
}

#[tokio::test]
async fn har_and_discovery_show_each_call_by_tool_with_its_arguments_redacted() {
    let (up, _seen) = mcp_server().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&format!(
        "routes:\n  - prefix: /mcp\n    upstream: http://{}\npolicies:\n  - name: gh\n    mcp: {{deny: [delete_repository]}}\ndiagnosis:\n  discovery: {{enabled: true}}\n  har:\n    enabled: true\n    redact: [token]\n    file: {{dir: {}}}\n",
        up.addr,
        dir.path().display()
    ))
    .await;
    post(&gw, call("1", "add"), &[]).await;
    post(&gw, call("2", "add"), &[]).await;
    post(&gw, call(r#""d-1""#, "delete_repository"), &[]).await;
    post(&gw, LIST, &[]).await;
    // What the server answered is read as it passes: as JSON, and as events.
    post(&gw, call("3", "fails"), &[]).await;
    post(&gw, call("4", "missing"), &[("x-answer", "sse")]).await;
    let entries = har_entries_in(dir.path(), 6).await;
    let text = serde_json::to_string(&entries).unwrap();
    assert!(
        !text.contains("s3cr3t"),
        "an argument named as a secret is redacted"
    );
    let mcp: Vec<&Value> = entries.iter().map(|e| &e["_tollgateMcp"]).collect();
    for want in [
        json!({"id": 1, "method": "tools/call", "name": "add", "outcome": "ok"}),
        json!({"id": "d-1", "method": "tools/call", "name": "delete_repository"}),
        json!({"id": 1, "method": "tools/list", "outcome": "ok"}),
        json!({"id": 3, "method": "tools/call", "name": "fails", "outcome": "tool_error"}),
        json!({"id": 4, "method": "tools/call", "name": "missing", "outcome": "rpc_error"}),
    ] {
        assert!(mcp.contains(&&want), "{want} not in {mcp:?}");
    }
    let denied = entries
        .iter()
        .find(|e| e["_tollgateMcp"]["id"] == "d-1")
        .unwrap();
    assert_eq!(denied["_tollgateError"], "mcp_tool_denied");
    // Every call counted: the observer thread counts them off the request path, after
    // the HAR thread may already have written them.
    let d = eventually("discovery counts the tools", || {
        let gw = &gw;
        async move {
            let d = admin_get(gw, "/discover").await.json();
            let tools = d["endpoints"]
                .as_array()
                .and_then(|e| e.iter().find_map(|r| r.get("mcp")))
                .map(|m| m["tools"].clone());
            let calls = |t: &Value, tool: &str| t[tool]["calls"].as_u64();
            match tools {
                Some(t)
                    if [
                        ("add", 2),
                        ("delete_repository", 1),
                        ("fails", 1),
                        ("missing", 1),
                    ]
                    .iter()
                    .all(|&(tool, n)| calls(&t, tool) == Some(n)) =>
                {
                    Ok(t)
                }
                other => Err(other),
            }
        }
    })
    .await;
    assert_eq!(d["add"]["errors"], 0);
    assert_eq!(
        d["delete_repository"]["errors"], 1,
        "a refused call is a failed one"
    );
    assert!(d["add"]["latency_ms"]["p50"].as_f64().is_some());
    assert_eq!(d["fails"]["tool_errors"], 1);
    assert_eq!(d["missing"]["rpc_errors"], 1);
    assert_eq!(d["add"]["tool_errors"], 0);
    let m = metrics_when(&gw, |t| t.contains("kind=\"rpc_error\"")).await;
    for line in [
        r#"tollgate_mcp_errors_total{policy="gh",method="tools/call",tool="fails",kind="tool_error"} 1"#,
        r#"tollgate_mcp_errors_total{policy="gh",method="tools/call",tool="missing",kind="rpc_error"} 1"#,
    ] {
        assert!(m.contains(line), "{line}\n{m}");
    }
    assert!(!m.contains(r#"tool="add",kind="#), "a result is no error");
}

#[tokio::test]
async fn a_cached_tools_list_answers_each_call_with_its_own_id_and_stays_filtered() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: lists\n    match: {mcp: {methods: [tools/list]}}\n    mcp: {deny: [delete_repository]}\n    cache: {ttl: 1m, methods: [POST], key_body: true, key_ignore: [id]}\n",
    )
    .await;
    let list = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
    let first = post(&gw, list("1"), &[]).await;
    assert_eq!(first.header("x-tollgate-cache"), Some("miss"));
    let second = post(&gw, list(r#""second""#), &[]).await;
    assert_eq!(second.header("x-tollgate-cache"), Some("hit"));
    let b = second.json();
    assert_eq!(
        b["id"], "second",
        "the stored answer carries this call's id"
    );
    let names: Vec<&str> = b["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["add", "echo"], "filtered as it is served");
    assert_eq!(
        seen.lock().unwrap().calls.len(),
        1,
        "one call to the server"
    );
    // Another caller's list is its own entry (the key holds the caller's credential).
    let other = post(&gw, list("3"), &[("authorization", "Bearer other-agent")]).await;
    assert_eq!(other.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(other.json()["id"], 3);
    assert_eq!(seen.lock().unwrap().calls.len(), 2);
}

#[tokio::test]
async fn a_client_that_leaves_a_stream_closes_the_server_side() {
    let (up, tx) = streaming_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: gh\n    mcp: {deny: [delete_repository]}\n",
    )
    .await;
    // A 2025-11-25 GET stream, through a policy that watches it.
    let req = Request::get(format!("http://{}/mcp/", gw.proxy_addr))
        .header("accept", "text/event-stream")
        .body(empty())
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let mut body = resp.into_body();
    tx.send(Bytes::from_static(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"))
        .await
        .unwrap();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    drop(body);
    // The server's side of the stream is closed: its body is dropped.
    tokio::time::timeout(std::time::Duration::from_secs(10), tx.closed())
        .await
        .expect("the server's stream ends when the client leaves");
}

#[tokio::test]
async fn a_value_a_tool_may_not_be_called_with_is_refused() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: pay\n    mcp:\n      arguments:\n        - {tool: add, argument: token, deny: [\"s3cr*\"]}\n        - {tool: echo, argument: amount, max: 100}\n",
    )
    .await;
    // `call` sends `{"token": "s3cr3t"}`: refused by the first rule.
    let got = post(&gw, call(r#""r-1""#, "add"), &[]).await;
    assert_refused(&got.json(), json!("r-1"), "the argument `token` of `add`");
    let refund = |amount: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"amount":{amount}}}}}}}"#
        )
    };
    let over = post(&gw, refund("250"), &[]).await.json();
    assert!(
        over["error"]["message"]
            .as_str()
            .unwrap()
            .contains("above 100"),
        "{over}"
    );
    let fine = post(&gw, refund("99.5"), &[]).await.json();
    assert_eq!(fine["result"]["content"][0]["text"], "echo");
    assert_eq!(
        seen.lock().unwrap().calls,
        vec![("tools/call".to_owned(), Some("echo".to_owned()))],
        "only the call within the rules reached the server"
    );
}

#[tokio::test]
async fn a_call_is_judged_in_header_mode_and_through_the_forward_proxy() {
    let (up, seen) = mcp_server().await;
    let gw = mcp_gateway(
        &up,
        "policies:\n  - name: gh\n    mcp: {deny: [delete_repository]}\n",
    )
    .await;
    let header_mode = |body: String| {
        via_header(&gw, up.addr, "/rpc")
            .method("POST")
            .header("content-type", "application/json")
            .body(bytes_body(Bytes::from(body)))
            .unwrap()
    };
    // Header mode: the target named by `x-tollgate-host`.
    let got = send(&client(), header_mode(call("1", "delete_repository"))).await;
    assert_eq!(got.status, 200);
    assert_refused(&got.json(), json!(1), "delete_repository");
    let got = send(&client(), header_mode(call("2", "add"))).await;
    assert_eq!(got.json()["result"]["content"][0]["text"], "add");
    // The forward proxy (`HTTP_PROXY`): the request line names the server.
    let denied = call("3", "delete_repository");
    let forward = raw_exchange(
        gw.proxy_addr,
        format!(
            "POST http://{0}/rpc HTTP/1.1\r\nHost: {0}\r\nContent-Type: application/json\r\nContent-Length: {1}\r\nConnection: close\r\n\r\n{denied}",
            up.addr,
            denied.len()
        )
        .as_bytes(),
    )
    .await;
    assert!(forward.starts_with("HTTP/1.1 200"), "{forward}");
    assert!(
        forward.contains("x-tollgate-error: mcp_tool_denied"),
        "{forward}"
    );
    let body = &forward[forward.find("\r\n\r\n").unwrap() + 4..];
    assert_refused(
        &serde_json::from_str(body).unwrap(),
        json!(3),
        "delete_repository",
    );
    assert_eq!(
        seen.lock().unwrap().calls,
        vec![("tools/call".to_owned(), Some("add".to_owned()))],
        "only the allowed call reached the server"
    );
}
