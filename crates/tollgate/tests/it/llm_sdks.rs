//! The `openai` and `anthropic` Python SDKs (pinned, installed by the test from PyPI)
//! calling the provider stand-ins through tollgate, by base URL and through
//! `HTTPS_PROXY` with interception: what each SDK parses from a stream or a complete
//! answer is the same as from a direct call (the `include_usage` tollgate adds is
//! invisible to it), and tollgate counted exactly the usage the stand-in reported.

use crate::intercept::Setup;
use crate::support::*;
use serde_json::Value;
use std::process::Command;
use tollgate_provider::Provider;

fn sdks() -> std::path::PathBuf {
    pip_once("python-llm-sdks", &["openai==1.109.1", "anthropic==0.69.0"])
}

/// Every call the script makes, as the SDKs parsed it (a JSON object).
const CALLS: &str = r#"
import os, json, openai, anthropic
base = os.environ["BASE"]
msgs = [{"role": "user", "content": "Say hello to the gateway."}]
out = {"_codings": []}
# What each answer came in (the SDKs' own clients and default headers, only watched).
hooks = {"response": [lambda r: out["_codings"].append(r.headers.get("content-encoding"))]}
oc = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0,
    http_client=openai.DefaultHttpxClient(event_hooks=hooks))
out["openai_stream"] = [c.model_dump() for c in oc.chat.completions.create(
    model="gpt-4o-mini", messages=msgs, stream=True, max_tokens=5)]
out["openai_stream_usage"] = [c.model_dump() for c in oc.chat.completions.create(
    model="gpt-4o-mini", messages=msgs, stream=True, max_tokens=6,
    stream_options={"include_usage": True})]
out["openai_whole"] = oc.chat.completions.create(model="gpt-4o", messages=msgs, max_tokens=3).model_dump()
out["openai_responses"] = [e.model_dump() for e in oc.responses.create(
    model="gpt-4.1", input="hi", stream=True, max_output_tokens=4)]
ac = anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0,
    http_client=anthropic.DefaultHttpxClient(event_hooks=hooks))
with ac.messages.stream(model="claude-sonnet-4-5", max_tokens=7, messages=msgs) as s:
    out["anthropic_text"] = list(s.text_stream)
    out["anthropic_final"] = s.get_final_message().model_dump()
out["anthropic_whole"] = ac.messages.create(model="claude-haiku-4-5", max_tokens=2, messages=msgs).model_dump()
print(json.dumps(out))
"#;

async fn run(base: &str, env: &[(&str, String)]) -> Value {
    let path = tokio::task::spawn_blocking(sdks).await.unwrap();
    python(&path, CALLS, base, env).await
}

/// What `script` printed (one JSON value), run with the packages at `path` and the
/// base URL `base` in `BASE`, the proxy variables as `env` sets them.
async fn python(path: &std::path::Path, script: &str, base: &str, env: &[(&str, String)]) -> Value {
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", path)
        .env("BASE", base)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .args(["-c", script]);
    for (k, v) in env {
        c.env(k, v);
    }
    serde_json::from_str(stdout_of(c).await.trim()).unwrap()
}

/// The usage tollgate counted for policy `ai`: tokens by (model, kind).
async fn counted(gw: &tollgate::Gateway, model: &str, kind: &str, n: u64) {
    let line = format!(
        "tollgate_llm_tokens_total{{policy=\"ai\",model=\"{model}\",kind=\"{kind}\"}} {n}\n"
    );
    metrics_when(gw, |t| t.contains(&line)).await;
}

/// What the SDKs saw through tollgate equals what they saw directly, and every call's
/// usage was counted as the stand-in reported it.
async fn assert_same_and_counted(gw: &tollgate::Gateway, direct: &Value, through: &Value) {
    for k in direct.as_object().unwrap().keys() {
        if k.starts_with('_') {
            continue;
        }
        assert_eq!(direct[k], through[k], "{k}: the SDK parsed something else");
    }
    let stream = direct["openai_stream_usage"].as_array().unwrap();
    let u = &stream.last().unwrap()["usage"];
    counted(gw, "gpt-4o-mini-2025-01-01", "output", 5 + 6).await;
    assert_eq!(u["completion_tokens"], 6);
    let whole = &direct["openai_whole"]["usage"];
    counted(
        gw,
        "gpt-4o-2025-01-01",
        "input",
        whole["prompt_tokens"].as_u64().unwrap(),
    )
    .await;
    counted(gw, "gpt-4o-2025-01-01", "output", 3).await;
    counted(gw, "gpt-4.1-2025-01-01", "output", 4).await;
    let a = &direct["anthropic_final"]["usage"];
    counted(
        gw,
        "claude-sonnet-4-5",
        "input",
        a["input_tokens"].as_u64().unwrap(),
    )
    .await;
    counted(gw, "claude-sonnet-4-5", "output", 7).await;
    counted(gw, "claude-haiku-4-5", "output", 2).await;
    assert_eq!(direct["anthropic_text"].as_array().unwrap().len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_see_the_same_streams_by_base_url_and_tollgate_counts_them() {
    let up = Provider::start(local0()).await.unwrap();
    let gw = gateway(&format!(
        "routes:\n  - prefix: /llm\n    upstream: http://{}\npolicies:\n  - name: ai\n    llm: {{}}\n    token_limit: {{limit: 1000000, window: minute}}\n",
        up.addr
    ))
    .await;
    let direct = run(&format!("http://{}", up.addr), &[]).await;
    let through = run(&format!("http://{}/llm", gw.proxy_addr), &[]).await;
    assert_same_and_counted(&gw, &direct, &through).await;
}

/// An HTTPS stand-in on `localhost`, and a gateway intercepting it with `policies`
/// (trusting the stand-in's CA as `upstream-ca.pem`).
async fn intercepting(policies: &str) -> (Setup, Provider, tollgate::Gateway) {
    let s = Setup::new();
    let tls = tollgate_provider::tls::server_config(s.dir.path()).unwrap();
    std::fs::copy(
        s.dir.path().join(tollgate_provider::tls::CA_FILE),
        s.dir.path().join("upstream-ca.pem"),
    )
    .unwrap();
    let up = Provider::start_with(local0(), Some(tls)).await.unwrap();
    let gw = gateway(&s.config("[localhost]", policies)).await;
    (s, up, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_see_the_same_streams_through_https_proxy_and_tollgate_counts_them() {
    let (s, up, gw) = intercepting(
        "policies:\n  - name: ai\n    match: {host: localhost}\n    llm: {}\n    budget: {limit: \"$100\", per: day}\n",
    )
    .await;
    let base = format!("https://localhost:{}", up.addr.port());
    let provider_ca = s.dir.path().join("upstream-ca.pem");
    let direct = run(
        &base,
        &[("SSL_CERT_FILE", provider_ca.display().to_string())],
    )
    .await;
    let proxy = format!("http://{}", gw.proxy_addr);
    let ca = s.dir.path().join("tollgate-ca.pem").display().to_string();
    let through = run(
        &base,
        &[
            ("HTTPS_PROXY", proxy.clone()),
            ("https_proxy", proxy),
            ("SSL_CERT_FILE", ca),
        ],
    )
    .await;
    assert_same_and_counted(&gw, &direct, &through).await;
    let state = admin_get(&gw, "/policies").await.json();
    let spent = state["policies"][0]["state"]["budget"]["spent_usd"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(spent, "$0", "the calls were priced and counted");
}

/// The `openai` npm package, installed once under target/ (needs node and npm).
fn openai_npm() -> std::path::PathBuf {
    npm_once("node-openai", "openai@4.104.0")
}

/// What the npm SDK parsed of a stream with and without `include_usage`, and of a
/// complete answer.
const NODE_CALLS: &str = r#"
const OpenAI = require('openai');
const c = new OpenAI({ baseURL: process.env.BASE + '/v1', apiKey: 'sk-test', maxRetries: 0 });
const messages = [{ role: 'user', content: 'Say hello to the gateway.' }];
(async () => {
  const out = {};
  const collect = async (s) => { const all = []; for await (const ch of s) all.push(ch); return all; };
  out.stream = await collect(await c.chat.completions.create({ model: 'gpt-4o-mini', messages, stream: true, max_tokens: 5 }));
  out.stream_usage = await collect(await c.chat.completions.create({ model: 'gpt-4o-mini', messages, stream: true, max_tokens: 6, stream_options: { include_usage: true } }));
  out.whole = await c.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 3 });
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"#;

async fn run_node(base: &str) -> Value {
    let dir = tokio::task::spawn_blocking(openai_npm).await.unwrap();
    let mut c = Command::new("node");
    c.env("NODE_PATH", dir.join("node_modules"))
        .env("BASE", base)
        .args(["-e", NODE_CALLS]);
    serde_json::from_str(stdout_of(c).await.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_npm_package_sees_the_same_streams_and_tollgate_counts_them() {
    let up = Provider::start(local0()).await.unwrap();
    let gw = gateway(&format!(
        "routes:\n  - prefix: /llm\n    upstream: http://{}\npolicies:\n  - name: ai\n    llm: {{}}\n",
        up.addr
    ))
    .await;
    let direct = run_node(&format!("http://{}", up.addr)).await;
    let through = run_node(&format!("http://{}/llm", gw.proxy_addr)).await;
    for k in ["stream", "stream_usage", "whole"] {
        assert_eq!(direct[k], through[k], "{k}: the SDK parsed something else");
    }
    assert_eq!(
        direct["stream"].as_array().unwrap().len(),
        7,
        "role, 5 chunks, finish, no usage"
    );
    counted(&gw, "gpt-4o-mini-2025-01-01", "output", 5 + 6).await;
    let whole = &direct["whole"]["usage"];
    counted(
        &gw,
        "gpt-4o-2025-01-01",
        "input",
        whole["prompt_tokens"].as_u64().unwrap(),
    )
    .await;
}

/// The SDKs with their default headers (`Accept-Encoding: gzip, deflate`) against a
/// provider that compresses (`/compress/`, as a CDN in front of one does): they parse
/// the same answers, and tollgate counts every call's usage from the compressed bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_default_headers_get_compressed_answers_and_tollgate_counts_them() {
    let up = Provider::start(local0()).await.unwrap();
    let gw = gateway(&format!(
        "routes:\n  - prefix: /llm\n    upstream: http://{}\npolicies:\n  - name: ai\n    llm: {{}}\n    token_limit: {{limit: 1000000, window: minute}}\n",
        up.addr
    ))
    .await;
    let direct = run(&format!("http://{}/compress", up.addr), &[]).await;
    let through = run(&format!("http://{}/llm/compress", gw.proxy_addr), &[]).await;
    // Compressed as the provider sent them, but for the one stream tollgate asked usage
    // of itself (asked uncompressed: its added chunk is removed).
    let codings = |v: &Value| v["_codings"].as_array().unwrap().clone();
    assert_eq!(codings(&direct), vec![Value::from("gzip"); 6]);
    assert_eq!(codings(&through).iter().filter(|c| *c == "gzip").count(), 5);
    assert_same_and_counted(&gw, &direct, &through).await;
}

/// `n: 50` under a 600-token limit can never fit: the OpenAI SDK, retrying twice by
/// default, sends it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_can_never_fit_is_sent_once_by_the_sdk() {
    let up = Provider::start(local0()).await.unwrap();
    let gw = gateway(&format!(
        "routes:\n  - prefix: /llm\n    upstream: http://{}\npolicies:\n  - name: ai\n    llm: {{tokenizer: false}}\n    token_limit: {{limit: 600, window: hour}}\n",
        up.addr
    ))
    .await;
    let script = r#"
import os, json, httpx, openai
sent = []
http = httpx.Client(event_hooks={"request": [lambda r: sent.append(1)]})
oc = openai.OpenAI(base_url=os.environ["BASE"] + "/v1", api_key="sk-test", http_client=http)
try:
    oc.chat.completions.create(model="gpt-4o-mini", n=50, max_tokens=20,
        messages=[{"role": "user", "content": "hi"}])
    out = "admitted"
except openai.RateLimitError as e:
    out = e.response.headers.get("x-tollgate-error")
print(json.dumps({"sent": len(sent), "out": out}))
"#;
    let path = tokio::task::spawn_blocking(sdks).await.unwrap();
    let got = python(&path, script, &format!("http://{}/llm", gw.proxy_addr), &[]).await;
    assert_eq!(got["out"], "token_limited", "{got}");
    assert_eq!(
        got["sent"], 1,
        "the SDK retried a call that can never fit: {got}"
    );
}

/// Google's `google-genai` SDK (its default client and headers: `Accept-Encoding: gzip`)
/// against a compressing Gemini stand-in, whole and streamed: it parses the same answers
/// through tollgate, and tollgate counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_genai_sdk_gets_compressed_answers_and_tollgate_counts_them() {
    let up = Provider::start(local0()).await.unwrap();
    let gw = gateway(&format!(
        "routes:\n  - prefix: /llm\n    upstream: http://{}\npolicies:\n  - name: ai\n    llm: {{}}\n",
        up.addr
    ))
    .await;
    let script = r#"
import os, json
from google import genai
from google.genai import types
c = genai.Client(api_key="g-test", http_options=types.HttpOptions(base_url=os.environ["BASE"]))
out = {}
r = c.models.generate_content(model="gemini-2.5-flash", contents="hi",
    config=types.GenerateContentConfig(max_output_tokens=5))
out["whole"] = [r.text, r.usage_metadata.candidates_token_count]
out["stream"] = [ch.text for ch in c.models.generate_content_stream(
    model="gemini-2.5-flash", contents="hi", config=types.GenerateContentConfig(max_output_tokens=6))]
print(json.dumps(out))
"#;
    let path = tokio::task::spawn_blocking(|| pip_once("python-genai", &["google-genai==3.6.1"]))
        .await
        .unwrap();
    let direct = python(&path, script, &format!("http://{}/compress", up.addr), &[]).await;
    let through = python(
        &path,
        script,
        &format!("http://{}/llm/compress", gw.proxy_addr),
        &[],
    )
    .await;
    assert_eq!(direct, through, "the SDK parsed something else");
    assert_eq!(direct["whole"][1], 5);
    counted(&gw, "gemini-2.5-flash", "output", 5 + 6).await;
}

/// The same streamed call twice at temperature 0, and what `x-tollgate-cache` said.
const TWICE: &str = r#"
import os, json, openai
seen = []
hooks = {"response": [lambda r: seen.append(r.headers.get("x-tollgate-cache"))]}
oc = openai.OpenAI(base_url=os.environ["BASE"] + "/v1", api_key="sk-test", max_retries=0,
    http_client=openai.DefaultHttpxClient(event_hooks=hooks))
msgs = [{"role": "user", "content": "Say hello to the gateway."}]
def call():
    return [c.model_dump() for c in oc.chat.completions.create(
        model="gpt-4o-mini", messages=msgs, stream=True, max_tokens=5, temperature=0)]
print(json.dumps({"first": call(), "second": call(), "cache": seen}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_through_https_proxy_gets_a_cached_stream_charged_once() {
    let (s, up, gw) = intercepting(
        "policies:\n  - name: ai\n    match: {host: localhost}\n    llm: {}\n    cache: {methods: [POST], key_body: true, ignore_cache_control: true}\n    token_limit: {limit: 1000000, window: minute}\n",
    )
    .await;
    let path = tokio::task::spawn_blocking(sdks).await.unwrap();
    let proxy = format!("http://{}", gw.proxy_addr);
    let ca = s.dir.path().join("tollgate-ca.pem").display().to_string();
    let got = python(
        &path,
        TWICE,
        &format!("https://localhost:{}", up.addr.port()),
        &[
            ("HTTPS_PROXY", proxy.clone()),
            ("https_proxy", proxy),
            ("SSL_CERT_FILE", ca),
        ],
    )
    .await;
    assert_eq!(got["cache"], serde_json::json!(["miss", "hit"]));
    // The SDK parsed the replayed stream as the first: the same chunks.
    assert!(!got["first"].as_array().unwrap().is_empty());
    assert_eq!(got["first"], got["second"]);
    // Charged once: the provider's 5 output tokens counted for the first call only, and
    // saved by the second.
    counted(&gw, "gpt-4o-mini-2025-01-01", "output", 5).await;
    let saved = "tollgate_cache_saved_tokens_total{policy=\"ai\",model=\"gpt-4o-mini-2025-01-01\",kind=\"output\"} 5\n";
    let m = metrics_when(&gw, |t| t.contains(saved)).await;
    assert!(!m.contains("kind=\"output\"} 10"), "{m}");
    let used = admin_get(&gw, "/policies").await.json()["policies"][0]["state"]["token_limit"]
        ["used_tokens"]
        .as_u64()
        .unwrap();
    let input = m
        .lines()
        .find(|l| {
            l.starts_with("tollgate_llm_tokens_total{policy=\"ai\",model=\"gpt-4o-mini-2025-01-01\",kind=\"input\"}")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap();
    assert_eq!(used, input + 5, "one call's tokens");
}
