//! The official `mcp` Python SDK (pinned, installed by the test from PyPI): its client
//! against a server of the test's own (the SDK's `MCPServer`, Streamable HTTP), in both
//! revisions in use — 2026-07-28 (stateless) and 2025-11-25 (`initialize`, sessions) —
//! through a route and through `HTTPS_PROXY` with interception (an HTTPS server, the SDK
//! unchanged): tools listed and called, a denied tool absent from `tools/list` and
//! refused on call with the SDK raising the JSON-RPC error, and calls counted per tool.
//! The `@modelcontextprotocol/sdk` TypeScript client (v1, 2025-11-25 with sessions)
//! against the reference `server-everything` through a route, and against the Python
//! server through `HTTPS_PROXY` with interception; its v2 client
//! (`@modelcontextprotocol/client`, pinned to 2026-07-28) against the Python server
//! through a route and through `HTTPS_PROXY` with interception.

use crate::intercept::Setup;
use crate::support::*;
use serde_json::Value;
use std::process::{Child, Command, Stdio};

fn sdk() -> std::path::PathBuf {
    pip_once("python-mcp-sdk", &["mcp==2.3.0"])
}

/// The server: three tools, on Streamable HTTP at `/mcp`, over TLS when given a
/// certificate and key.
const SERVER: &str = r#"
import sys, uvicorn
from mcp.server.mcpserver import MCPServer
app = MCPServer("fixture")

@app.tool()
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b

@app.tool()
def delete_repository(name: str) -> str:
    """Deletes a repository."""
    return "deleted " + name

@app.tool()
def echo(text: str) -> str:
    """Echoes."""
    return text

port = int(sys.argv[1])
tls = dict(ssl_certfile=sys.argv[2], ssl_keyfile=sys.argv[3]) if len(sys.argv) > 3 else {}
uvicorn.run(app.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning", **tls)
"#;

/// The client: what it listed, what `add` returned, and the error `delete_repository`
/// raised, as JSON.
const CLIENT: &str = r#"
import asyncio, json, os, sys
from mcp import Client
async def main():
    out = {}
    async with Client(os.environ["URL"], mode=os.environ["MODE"]) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        r = await c.call_tool("add", {"a": 2, "b": 3})
        out["add"] = r.structured_content
        out["add_error"] = r.is_error
        try:
            await c.call_tool("delete_repository", {"name": "prod"})
            out["denied"] = None
        except Exception as e:
            err = getattr(e, "error", None)
            out["denied"] = {"type": type(e).__name__, "code": getattr(err, "code", None),
                             "message": getattr(err, "message", str(e)),
                             "data": getattr(err, "data", None)}
        for i in range(3):
            await c.call_tool("echo", {"text": f"hi {i}"})
    print(json.dumps(out))
asyncio.run(main())
"#;

/// A running server process, killed when dropped.
struct McpServer {
    child: Child,
    port: u16,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on the loopback address, for a server the test starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `cmd` (a server listening on `port`) until dropped, once it accepts connections.
async fn serving(mut cmd: Command, port: u16) -> McpServer {
    let server = McpServer {
        child: cmd.spawn().expect("the server's runtime runs"),
        port,
    };
    eventually("the MCP server accepts connections", || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map(|_| ())
    })
    .await;
    server
}

/// Starts the server (TLS with `tls`: certificate and key files) and waits until it
/// accepts connections.
async fn start_server(tls: Option<(&std::path::Path, &std::path::Path)>) -> McpServer {
    let path = tokio::task::spawn_blocking(sdk).await.unwrap();
    let port = free_port();
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", &path)
        .args(["-c", SERVER, &port.to_string()])
        .stdout(Stdio::null());
    if let Some((cert, key)) = tls {
        c.arg(cert).arg(key);
    }
    serving(c, port).await
}

/// What the client printed, run with `mode` towards `url` and `env`.
async fn client(url: &str, mode: &str, env: &[(&str, String)]) -> Value {
    let path = tokio::task::spawn_blocking(sdk).await.unwrap();
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", &path)
        .env("URL", url)
        .env("MODE", mode)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .args(["-c", CLIENT]);
    for (k, v) in env {
        c.env(k, v);
    }
    serde_json::from_str(stdout_of(c).await.trim()).unwrap()
}

/// What every run must show: the denied tool is not offered and raises the JSON-RPC error.
fn assert_governed(out: &Value, mode: &str) {
    assert_eq!(
        out["tools"],
        serde_json::json!(["add", "echo"]),
        "{mode}: {out}"
    );
    assert_eq!(out["add"]["result"], 5, "{mode}: {out}");
    assert_eq!(out["add_error"], false);
    let denied = &out["denied"];
    assert_eq!(denied["code"], -32051, "{mode}: {out}");
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .contains("delete_repository"),
        "{mode}: {out}"
    );
    assert_eq!(denied["data"]["code"], "mcp_tool_denied");
}

const POLICIES: &str = "policies:\n  - name: echo-limit\n    match: {mcp: {tools: [echo]}}\n    rate_limit: {limit: 1000, window: minute}\n    mcp: {deny: [delete_repository]}\n  - name: fixture\n    mcp: {deny: [delete_repository]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_through_a_route_in_both_revisions() {
    let server = start_server(None).await;
    let gw = routed("/fixture", server.port, POLICIES).await;
    let url = format!("http://{}/fixture/mcp", gw.proxy_addr);
    for mode in ["2026-07-28", "legacy"] {
        let out = client(&url, mode, &[]).await;
        assert_governed(&out, mode);
    }
    // Two runs: each called add once and echo three times (the per-tool policy), and
    // had delete_repository refused.
    let m = metrics_when(&gw, |t| {
        t.contains(
            r#"tollgate_mcp_calls_total{policy="echo-limit",method="tools/call",tool="echo"} 6"#,
        )
    })
    .await;
    for line in [
        r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="add"} 2"#,
        r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="delete_repository"} 2"#,
        r#"tollgate_mcp_calls_total{policy="fixture",method="tools/list",tool=""} 2"#,
        r#"tollgate_mcp_calls_total{policy="fixture",method="initialize",tool=""} 1"#,
    ] {
        assert!(m.contains(line), "{line}\n{m}");
    }
}

/// The certificate and key of `pki`'s `localhost` leaf, as PEM files in `dir`.
fn pem_files(pki: &TestPki, dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use base64::Engine as _;
    let pem = |label: &str, der: &[u8]| {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    };
    let (cert, key) = (dir.join("server.pem"), dir.join("server-key.pem"));
    std::fs::write(&cert, pem("CERTIFICATE", &pki.leaf_der)).unwrap();
    std::fs::write(&key, pem("PRIVATE KEY", pki.key_der.secret_der())).unwrap();
    (cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_through_https_proxy_with_interception_in_both_revisions() {
    let s = Setup::new();
    let (cert, key) = pem_files(&s.pki, s.dir.path());
    let server = start_server(Some((&cert, &key))).await;
    let gw = gateway(&s.config("[localhost]", POLICIES)).await;
    let proxy = format!("http://{}", gw.proxy_addr);
    let ca = s.dir.path().join("tollgate-ca.pem").display().to_string();
    let url = format!("https://localhost:{}/mcp", server.port);
    for mode in ["2026-07-28", "legacy"] {
        let out = client(
            &url,
            mode,
            &[
                ("HTTPS_PROXY", proxy.clone()),
                ("https_proxy", proxy.clone()),
                ("SSL_CERT_FILE", ca.clone()),
            ],
        )
        .await;
        assert_governed(&out, mode);
    }
    metrics_when(&gw, |t| {
        t.contains(r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="delete_repository"} 2"#)
    })
    .await;
}

/// The `@modelcontextprotocol/sdk` client (Streamable HTTP, 2025-11-25 with sessions)
/// and the reference `@modelcontextprotocol/server-everything`, pinned, installed once.
fn node_sdk() -> (std::path::PathBuf, std::path::PathBuf) {
    (
        npm_once("node-mcp-sdk", "@modelcontextprotocol/sdk@1.32.2"),
        npm_once(
            "node-mcp-everything",
            "@modelcontextprotocol/server-everything@2026.8.31",
        ),
    )
}

/// What the TypeScript client listed, what `echo` returned, and what `get-env` raised.
const NODE_CLIENT: &str = r#"
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
(async () => {
  const c = new Client({ name: 'tollgate-test', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(process.env.URL)));
  const out = {};
  out.tools = (await c.listTools()).tools.map((t) => t.name).sort();
  out.echo = (await c.callTool({ name: 'echo', arguments: { message: 'hi' } })).content;
  try {
    await c.callTool({ name: 'get-env', arguments: {} });
    out.denied = null;
  } catch (e) {
    out.denied = { name: e.constructor.name, code: e.code, message: e.message, data: e.data };
  }
  await c.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_against_server_everything_through_a_route() {
    let (sdk, everything) = tokio::task::spawn_blocking(node_sdk).await.unwrap();
    let port = free_port();
    let mut c = Command::new("node");
    c.arg(everything.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let server = serving(c, port).await;
    // get-env would hand the model the server's environment: denied.
    let gw = routed(
        "/everything",
        server.port,
        "policies:\n  - name: everything\n    mcp: {deny: [get-env]}\n",
    )
    .await;
    let c = node(
        &sdk.join("node_modules").display().to_string(),
        &format!("http://{}/everything/mcp", gw.proxy_addr),
        NODE_CLIENT,
    );
    let out: Value = serde_json::from_str(stdout_of(c).await.trim()).unwrap();
    let tools = out["tools"].as_array().unwrap();
    assert!(tools.contains(&"echo".into()), "{out}");
    assert!(
        !tools.contains(&"get-env".into()),
        "offered a denied tool: {out}"
    );
    assert_eq!(out["echo"][0]["text"], "Echo: hi");
    let denied = &out["denied"];
    assert_eq!(denied["name"], "McpError", "{out}");
    assert_eq!(denied["code"], -32051, "{out}");
    assert_eq!(denied["data"]["code"], "mcp_tool_denied", "{out}");
    metrics_when(&gw, |t| {
        t.contains(
            r#"tollgate_mcp_calls_total{policy="everything",method="tools/call",tool="get-env"} 1"#,
        ) && t.contains(
            r#"tollgate_mcp_calls_total{policy="everything",method="tools/call",tool="echo"} 1"#,
        )
    })
    .await;
}

/// `node` running `script` (a client of the SDK installed in `sdk`) towards the HTTPS
/// server on `port` through `gw` as `HTTPS_PROXY`, trusting its CA. Node's fetch reads no
/// proxy variable before Node 24: the application's one line of bootstrap, the SDK
/// unchanged (docs/interception.md).
async fn node_through_proxy(
    s: &Setup,
    gw: &tollgate::Gateway,
    sdk: &std::path::Path,
    port: u16,
    script: &str,
) -> Command {
    let undici = tokio::task::spawn_blocking(|| npm_once("node-undici", "undici@6.21.3"))
        .await
        .unwrap();
    let script = format!(
        "require('undici').setGlobalDispatcher(new (require('undici').EnvHttpProxyAgent)());\n{script}"
    );
    let proxy = format!("http://{}", gw.proxy_addr);
    let modules = format!(
        "{}:{}",
        sdk.join("node_modules").display(),
        undici.join("node_modules").display()
    );
    let mut c = node(&modules, &format!("https://localhost:{port}/mcp"), &script);
    c.env("HTTPS_PROXY", &proxy)
        .env("https_proxy", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("NODE_EXTRA_CA_CERTS", s.dir.path().join("tollgate-ca.pem"));
    c
}

/// A gateway routing `prefix` to the MCP server on `port`, with `policies`.
async fn routed(prefix: &str, port: u16, policies: &str) -> tollgate::Gateway {
    gateway(&format!(
        "routes:\n  - prefix: {prefix}\n    upstream: http://127.0.0.1:{port}\n{policies}"
    ))
    .await
}

/// `node` running `script` towards the MCP endpoint `url`, with `modules` (a `NODE_PATH`).
fn node(modules: &str, url: &str, script: &str) -> Command {
    let mut c = Command::new("node");
    c.env("NODE_PATH", modules)
        .env("URL", url)
        .args(["-e", script]);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_through_https_proxy_with_interception() {
    let s = Setup::new();
    let (cert, key) = pem_files(&s.pki, s.dir.path());
    let server = start_server(Some((&cert, &key))).await;
    let gw = gateway(&s.config("[localhost]", POLICIES)).await;
    let (sdk, _) = tokio::task::spawn_blocking(node_sdk).await.unwrap();
    let client = NODE_CLIENT
        .replace("'get-env'", "'delete_repository'")
        .replace(
            "{ name: 'echo', arguments: { message: 'hi' } }",
            "{ name: 'echo', arguments: { text: 'hi' } }",
        );
    let c = node_through_proxy(&s, &gw, &sdk, server.port, &client).await;
    let out: Value = serde_json::from_str(stdout_of(c).await.trim()).unwrap();
    assert_eq!(out["tools"], serde_json::json!(["add", "echo"]), "{out}");
    assert_eq!(out["echo"][0]["text"], "hi");
    assert_eq!(out["denied"]["name"], "McpError", "{out}");
    assert_eq!(out["denied"]["code"], -32051, "{out}");
    metrics_when(&gw, |t| {
        t.contains(r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="delete_repository"} 1"#)
    })
    .await;
}

/// The TypeScript SDK's v2 client (`@modelcontextprotocol/client`, 2026-07-28), pinned,
/// installed once.
fn node_client_v2() -> std::path::PathBuf {
    npm_once("node-mcp-client-v2", "@modelcontextprotocol/client@2.4.0")
}

/// The v2 client pinned to 2026-07-28 (no fallback to 2025-11-25): the revision it
/// negotiated, what it listed, what `echo` returned, and what `delete_repository` raised.
const NODE_CLIENT_V2: &str = r#"
const { Client, StreamableHTTPClientTransport } = require('@modelcontextprotocol/client');
(async () => {
  const c = new Client({ name: 'tollgate-test', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await c.connect(new StreamableHTTPClientTransport(new URL(process.env.URL)));
  const out = { version: c.getNegotiatedProtocolVersion() };
  out.tools = (await c.listTools()).tools.map((t) => t.name).sort();
  out.echo = (await c.callTool({ name: 'echo', arguments: { text: 'hi' } })).content;
  try {
    await c.callTool({ name: 'delete_repository', arguments: { name: 'prod' } });
    out.denied = null;
  } catch (e) {
    out.denied = { name: e.constructor.name, code: e.code, message: e.message, data: e.data };
  }
  await c.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// What the v2 client must show: 2026-07-28 spoken, the denied tool not offered and
/// raised as the JSON-RPC error.
fn assert_governed_v2(out: &Value) {
    assert_eq!(out["version"], "2026-07-28", "{out}");
    assert_eq!(out["tools"], serde_json::json!(["add", "echo"]), "{out}");
    assert_eq!(out["echo"][0]["text"], "hi", "{out}");
    let denied = &out["denied"];
    assert_eq!(denied["name"], "ProtocolError", "{out}");
    assert_eq!(denied["code"], -32051, "{out}");
    assert_eq!(denied["data"]["code"], "mcp_tool_denied", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_v2_at_2026_07_28_through_a_route_and_https_proxy() {
    let client = tokio::task::spawn_blocking(node_client_v2).await.unwrap();
    // Through a route, to the plain server.
    let server = start_server(None).await;
    let gw = routed("/srv", server.port, POLICIES).await;
    let c = node(
        &client.join("node_modules").display().to_string(),
        &format!("http://{}/srv/mcp", gw.proxy_addr),
        NODE_CLIENT_V2,
    );
    assert_governed_v2(&serde_json::from_str(stdout_of(c).await.trim()).unwrap());
    metrics_when(&gw, |t| {
        t.contains(r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="delete_repository"} 1"#)
            && t.contains(r#"tollgate_mcp_calls_total{policy="echo-limit",method="tools/call",tool="echo"} 1"#)
    })
    .await;
    // Through `HTTPS_PROXY` with interception, to the HTTPS server: the SDK unchanged.
    let s = Setup::new();
    let (cert, key) = pem_files(&s.pki, s.dir.path());
    let server = start_server(Some((&cert, &key))).await;
    let gw = gateway(&s.config("[localhost]", POLICIES)).await;
    let c = node_through_proxy(&s, &gw, &client, server.port, NODE_CLIENT_V2).await;
    assert_governed_v2(&serde_json::from_str(stdout_of(c).await.trim()).unwrap());
    metrics_when(&gw, |t| {
        t.contains(r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="delete_repository"} 1"#)
    })
    .await;
}

/// The older HTTP+SSE transport's client (the SDK's `sse_client`): what it listed, what
/// `add` returned, and what `delete_repository` raised.
const SSE_CLIENT: &str = r#"
import asyncio, json, os
from mcp import Client
from mcp.client.sse import sse_client
async def main():
    out = {}
    async with Client(sse_client(os.environ["URL"]), mode="legacy", read_timeout_seconds=20) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        out["add"] = (await c.call_tool("add", {"a": 2, "b": 3})).structured_content
        try:
            await c.call_tool("delete_repository", {"name": "prod"})
            out["denied"] = None
        except Exception as e:
            err = getattr(e, "error", None)
            out["denied"] = {"type": type(e).__name__, "code": getattr(err, "code", None),
                             "data": getattr(err, "data", None)}
        out["after"] = (await c.call_tool("add", {"a": 1, "b": 1})).structured_content
    print(json.dumps(out))
asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_http_sse_transport_gets_its_refusals_on_its_stream() {
    let path = tokio::task::spawn_blocking(sdk).await.unwrap();
    let port = free_port();
    // The same server on the old transport: a GET stream at /sse, messages POSTed to
    // the URL its first event names.
    let script = SERVER.replace(
        "uvicorn.run(app.streamable_http_app()",
        "uvicorn.run(app.sse_app()",
    );
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", &path)
        .args(["-c", &script, &port.to_string()])
        .stdout(Stdio::null());
    let server = serving(c, port).await;
    let gw = gateway(POLICIES).await;
    // The forward proxy: the client's URLs are the server's own.
    let proxy = format!("http://{}", gw.proxy_addr);
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", &path)
        .env("URL", format!("http://127.0.0.1:{}/sse", server.port))
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .args(["-c", SSE_CLIENT]);
    let out: Value = serde_json::from_str(stdout_of(c).await.trim()).unwrap();
    assert_eq!(
        out["tools"],
        serde_json::json!(["add", "echo"]),
        "the stream's list is filtered: {out}"
    );
    assert_eq!(out["add"]["result"], 5);
    assert_eq!(out["denied"]["code"], -32051, "{out}");
    assert_eq!(out["denied"]["data"]["code"], "mcp_tool_denied");
    assert_eq!(
        out["after"]["result"], 2,
        "the session goes on after a refusal"
    );
    metrics_when(&gw, |t| {
        t.contains(r#"tollgate_mcp_calls_total{policy="fixture",method="tools/call",tool="delete_repository"} 1"#)
    })
    .await;
}
