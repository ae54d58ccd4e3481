//! LLM calls through tollgate against the provider stand-ins (tollgate-provider's `llm`
//! module, streaming like OpenAI, Anthropic and Gemini): usage counted exactly from
//! complete answers and streams, streams relayed byte for byte, the `include_usage`
//! chunk tollgate asks for removed, token limits and budgets refusing at the right
//! request, a client gone mid-stream charged what was streamed.

use crate::support::*;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_provider::Provider;

pub(crate) async fn stand_in() -> Provider {
    Provider::start(local0()).await.unwrap()
}

/// A POST of `body` to `path` on the stand-in `up`, through `gw` (or directly).
pub(crate) async fn post(
    gw: Option<&tollgate::Gateway>,
    up: &Provider,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Got {
    let uri = match gw {
        Some(gw) => format!("http://{}{path}", gw.proxy_addr),
        None => format!("http://{}{path}", up.addr),
    };
    let mut req = Request::post(uri)
        .header("content-type", "application/json")
        .header("x-tollgate-host", up.addr.to_string())
        .header("x-tollgate-scheme", "http");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(&client(), req.body(bytes_body(body.to_string())).unwrap()).await
}

pub(crate) fn chat(stream: bool, include_usage: bool, max_tokens: u64) -> Value {
    let mut b = json!({"model": "gpt-4o-mini", "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say hello to the gateway, please."}]});
    if stream {
        b["stream"] = json!(true);
    }
    if include_usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// The usage the stand-in reported in a stream's events (OpenAI's final chunk).
pub(crate) fn streamed_usage(body: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v.get("usage").filter(|u| u.is_object()).cloned())
}

/// Sends `req` and reads its streamed answer until `needle` has come `n` times, then
/// leaves (the connection dropped mid-stream, as a client that goes).
pub(crate) async fn read_then_leave(req: Request<tollgate::body::Body>, needle: &str, n: usize) {
    use http_body_util::BodyExt;
    let mut body = client().request(req).await.unwrap().into_body();
    let mut seen = String::new();
    while seen.matches(needle).count() < n {
        let f = body.frame().await.unwrap().unwrap();
        if let Some(d) = f.data_ref() {
            seen.push_str(&String::from_utf8_lossy(d));
        }
    }
}

/// `endpoint`'s row in `gw`'s `/discover`, once it has one.
pub(crate) async fn discovered(gw: &tollgate::Gateway, endpoint: &str) -> Option<Value> {
    let d = admin_get(gw, "/discover").await.json();
    d["endpoints"]
        .as_array()?
        .iter()
        .find(|e| e["endpoint"] == endpoint)
        .cloned()
}

pub(crate) fn llm_policy(extra: &str) -> String {
    format!("policies:\n  - name: ai\n    llm: {{}}\n{extra}")
}

/// `tollgate_llm_tokens_total` of `kind` for policy `ai` and `model`, once it shows `n`.
pub(crate) async fn tokens_counted(gw: &tollgate::Gateway, model: &str, kind: &str, n: u64) {
    let line = format!(
        "tollgate_llm_tokens_total{{policy=\"ai\",model=\"{model}\",kind=\"{kind}\"}} {n}\n"
    );
    metrics_when(gw, |t| t.contains(&line)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_asks_its_usage_is_relayed_byte_for_byte_and_counted_exactly() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("")).await;
    let body = chat(true, true, 7);
    let direct = post(None, &up, "/v1/chat/completions", &body, &[]).await;
    let through = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(through.status, StatusCode::OK);
    assert_eq!(
        String::from_utf8_lossy(&through.body),
        String::from_utf8_lossy(&direct.body),
        "the same bytes as a direct call"
    );
    let usage = streamed_usage(&through.body).expect("the stand-in's usage chunk");
    let model = "gpt-4o-mini-2025-01-01";
    tokens_counted(
        &gw,
        model,
        "input",
        usage["prompt_tokens"].as_u64().unwrap(),
    )
    .await;
    tokens_counted(&gw, model, "output", 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_does_not_ask_is_counted_and_gets_no_usage_chunk() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("")).await;
    let body = chat(true, false, 4);
    let through = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    let text = String::from_utf8_lossy(&through.body).into_owned();
    // tollgate asked for the usage, and the client gets what it asked for: the same
    // bytes as a direct call without the option.
    let direct = post(None, &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(text, String::from_utf8_lossy(&direct.body));
    assert!(streamed_usage(&through.body).is_none(), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    // Every content chunk is there, in order.
    let contents: Vec<String> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(contents, ["", "t0 ", "t1 ", "t2 ", "t3 "]);
    // The stand-in reports what tollgate asked for, and tollgate counted it.
    let asked = post(None, &up, "/v1/chat/completions", &chat(true, true, 4), &[]).await;
    let usage = streamed_usage(&asked.body).unwrap();
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    // tollgate's request was longer by the option it added: its prompt counted as sent.
    let added = r#""stream_options":{"include_usage":true},"#.len() as u64;
    let sent_prompt = (body.to_string().len() as u64 + added).div_ceil(4);
    assert!(sent_prompt >= prompt);
    tokens_counted(&gw, "gpt-4o-mini-2025-01-01", "input", sent_prompt).await;
    tokens_counted(&gw, "gpt-4o-mini-2025-01-01", "output", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_answers_and_every_providers_stream_are_counted() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("")).await;
    let msg = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": msg, "max_tokens": 3}),
            "gpt-4o-2025-01-01",
            "completion_tokens",
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-4.1", "input": "hi", "max_output_tokens": 5}),
            "gpt-4.1-2025-01-01",
            "output_tokens",
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-5", "input": "hi", "stream": true, "max_output_tokens": 6}),
            "gpt-5-2025-01-01",
            "",
        ),
        (
            "/v1/embeddings",
            json!({"model": "text-embedding-3-small", "input": "hi"}),
            "text-embedding-3-small",
            "",
        ),
        (
            "/v1/messages",
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": msg}),
            "claude-sonnet-4-5",
            "output_tokens",
        ),
        (
            "/v1/messages",
            json!({"model": "claude-haiku-4-5", "max_tokens": 9, "stream": true, "messages": msg}),
            "claude-haiku-4-5",
            "",
        ),
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 10}}),
            "gemini-2.5-flash",
            "",
        ),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
            json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 11}}),
            "gemini-2.5-pro",
            "",
        ),
    ];
    for (path, body, model, _) in &cases {
        let got = post(Some(&gw), &up, path, body, &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{path}: {:?}", got.body);
        let prompt = (body.to_string().len() as u64).div_ceil(4);
        tokens_counted(&gw, model, "input", prompt).await;
        let out = ["max_tokens", "max_output_tokens"]
            .iter()
            .find_map(|k| body[k].as_u64())
            .or(body["generationConfig"]["maxOutputTokens"].as_u64());
        if let Some(o) = out {
            tokens_counted(&gw, model, "output", o).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_limit_refuses_at_the_request_that_does_not_fit() {
    clear_of_the_hour_end(30).await;
    let up = stand_in().await;
    // Estimates a quarter of the text's bytes: "Say hello…" (33 bytes) is 9 tokens, 3
    // more for the message: 12, and 20 reserved for the output: 32 a request. The
    // stand-in reports the body's bytes / 4 (29) and 20 output: 49 a call.
    let gw = gateway(
        "policies:\n  - name: ai\n    llm: {tokenizer: false}\n    token_limit: {limit: 120, window: hour}\n",
    )
    .await;
    let body = chat(false, false, 20);
    let used = |gw: &tollgate::Gateway| {
        let gw_admin = gw.admin_addr;
        async move {
            let s = send(
                &client(),
                Request::get(format!("http://{gw_admin}/policies"))
                    .body(empty())
                    .unwrap(),
            )
            .await
            .json();
            s["policies"][0]["state"]["token_limit"]["used_tokens"]
                .as_u64()
                .unwrap()
        }
    };
    let mut total = 0;
    for i in 0..2 {
        let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
        assert_eq!(got.status, StatusCode::OK, "call {i}");
        total += got.json()["usage"]["total_tokens"].as_u64().unwrap();
        // Settled to the answer's usage once the call ended.
        eventually("the reservation settled", || async {
            match used(&gw).await {
                n if n == total => Ok(()),
                n => Err(n),
            }
        })
        .await;
    }
    assert_eq!(total, 98);
    // 98 used, 22 left, the next needs 32: refused until the next hour.
    let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(
        got.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{:?} {}",
        got.body,
        used(&gw).await
    );
    assert_eq!(got.error_code().as_deref(), Some("token_limited"));
    let retry: u64 = got.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    assert_eq!(used(&gw).await, 98, "a refusal takes nothing");
    // What the alerting rules read: the share used (98 of 120, read again at the
    // refusal) until the window's end.
    let m = String::from_utf8_lossy(&admin_get(&gw, "/metrics").await.body).into_owned();
    let value = |family: &str| -> f64 {
        let line = m
            .lines()
            .find(|l| l.starts_with(&format!("{family}{{name=\"policy ai\"}}")))
            .unwrap_or_else(|| panic!("no {family} in\n{m}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("tollgate_token_limit_used_ratio"), 98.0 / 120.0);
    let end = value("tollgate_token_limit_window_end_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(end > now && end <= now + 3600.0, "{end} vs {now}");
    // A smaller request still fits.
    let got = post(
        Some(&gw),
        &up,
        "/v1/chat/completions",
        &chat(false, false, 0),
        &[("x-stand-in-tokens", "0")],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_refuses_once_spent_and_a_model_without_a_price() {
    let up = stand_in().await;
    // gpt-4o costs $2.50 / $10 per million: a call of 34 + 1000 tokens is about $0.0101.
    let gw = gateway(
        "policies:\n  - name: ai\n    llm: {tokenizer: false, prices: {house-model: {input: 1.0, output: 1.0}}}\n    budget: {limit: \"$0.025\", per: day}\n",
    )
    .await;
    let mut body = chat(false, false, 1000);
    body["model"] = json!("gpt-4o");
    let mut spent = 0;
    loop {
        let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
        if got.status != StatusCode::OK {
            assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(got.error_code().as_deref(), Some("budget_exceeded"));
            assert!(got.header("retry-after").is_some());
            break;
        }
        spent += 1;
        assert!(spent <= 2, "the budget never refused");
    }
    assert_eq!(
        spent, 2,
        "two calls of $0.0101 fit in $0.025, a third does not"
    );
    let state = admin_get(&gw, "/policies").await.json();
    let b = &state["policies"][0]["state"]["budget"];
    assert_eq!(b["limit_usd"], "$0.025");
    // The share the alerting rules read: two calls' cost of the $0.025, read at the
    // refusal.
    let m = String::from_utf8_lossy(&admin_get(&gw, "/metrics").await.body).into_owned();
    let share: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_budget_used_ratio{name=\"policy ai\"} "))
        .unwrap_or_else(|| panic!("{m}"))
        .parse()
        .unwrap();
    assert!((0.8..0.82).contains(&share), "{share}");
    body["model"] = json!("mystery-model");
    let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(got.error_code().as_deref(), Some("model_unpriced"));
    assert!(
        got.error_message().contains("llm.prices"),
        "{}",
        got.error_message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_is_charged_what_was_streamed() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("")).await;
    let mut body = chat(true, false, 1000);
    body["model"] = json!("gpt-4o");
    let req = Request::post(format!("http://{}/v1/chat/completions", gw.proxy_addr))
        .header("content-type", "application/json")
        .header("x-tollgate-host", up.addr.to_string())
        .header("x-tollgate-scheme", "http")
        .header("x-stand-in-pace", "5ms")
        // Twenty chunks (each counted as about a token), then only keep-alive
        // comments: what the gateway can relay before it sees the client gone is bounded
        // by the stand-in, not by how fast this machine is.
        .header("x-stand-in-stall-after", "20")
        .body(bytes_body(body.to_string()))
        .unwrap();
    read_then_leave(req, "\"content\":\"t", 10).await;
    // Charged for what went through: at least the 10 chunks the client read, at most the
    // stand-in's content chunks before it stalled, far from the 1000 the stream would have
    // had. The count appears only once the gateway has seen the client gone.
    let text = metrics_when(&gw, |t| {
        t.contains(
            "tollgate_llm_tokens_total{policy=\"ai\",model=\"gpt-4o-2025-01-01\",kind=\"output\"}",
        )
    })
    .await;
    let line = text
        .lines()
        .find(|l| l.starts_with("tollgate_llm_tokens_total{policy=\"ai\",model=\"gpt-4o-2025-01-01\",kind=\"output\"}"))
        .unwrap();
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((10..=20).contains(&n), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_redis_keep_a_token_limit_and_count_it_exactly() {
    clear_of_the_hour_end(30).await;
    let redis = crate::support::redis_procs::RedisServer::start();
    let up = stand_in().await;
    // Each call reserves 12 + 100 = 112 tokens and uses 29 + 10 = 39: the reservations
    // cover the usage, so the count never passes the limit however many are in flight.
    let yaml = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 500ms\npolicies:\n  - name: ai\n    llm: {{tokenizer: false}}\n    token_limit: {{limit: 1000, window: hour}}\n",
        redis.url()
    );
    let gws = vec![
        gateway(&yaml).await,
        gateway(&yaml).await,
        gateway(&yaml).await,
    ];
    let body = chat(false, false, 100);
    let mut tasks = Vec::new();
    for i in 0..60 {
        let (proxy, up_addr, body) = (gws[i % 3].proxy_addr, up.addr, body.to_string());
        tasks.push(tokio::spawn(async move {
            let req = Request::post(format!("http://{proxy}/v1/chat/completions"))
                .header("content-type", "application/json")
                .header("x-tollgate-host", up_addr.to_string())
                .header("x-tollgate-scheme", "http")
                .header("x-stand-in-tokens", "10")
                .body(bytes_body(body))
                .unwrap();
            send(&client(), req).await
        }));
    }
    let mut ok = 0u64;
    for t in tasks {
        let got = t.await.unwrap();
        match got.status {
            StatusCode::OK => {
                assert_eq!(got.json()["usage"]["total_tokens"], 39);
                ok += 1;
            }
            _ => assert_eq!(got.error_code().as_deref(), Some("token_limited")),
        }
    }
    assert!((8..60).contains(&ok), "{ok} calls admitted");
    // Every replica sees the one count, settled to the answers' usage.
    for gw in &gws {
        eventually("the shared count settled to the usage", || async {
            let s = admin_get(gw, "/policies").await.json();
            match s["policies"][0]["state"]["token_limit"]["used_tokens"].as_u64() {
                Some(n) if n == ok * 39 => Ok(()),
                n => Err(n),
            }
        })
        .await;
    }
    assert!(ok * 39 <= 1000);
}

/// A gateway whose policy falls back from `gpt-4o` to `gpt-4o-mini`, then to `extra`.
async fn falling_back(extra: &str) -> tollgate::Gateway {
    gateway(&format!(
        "policies:\n  - name: ai\n    llm:\n      fallback:\n        - model: gpt-4o-mini\n{extra}"
    ))
    .await
}

/// A `gpt-4o` call through `gw` while the stand-in answers 429 for `failing` models:
/// its answer, asserted a success.
async fn gpt_4o_failing(gw: &tollgate::Gateway, up: &Provider, stream: bool, failing: &str) -> Got {
    let mut body = chat(stream, false, 4);
    body["model"] = json!("gpt-4o");
    let got = post(
        Some(gw),
        up,
        "/v1/chat/completions",
        &body,
        &[("x-stand-in-fail-models", failing)],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_one_model_is_answered_by_the_next_and_the_answer_says_so() {
    let up = stand_in().await;
    let gw = falling_back("").await;
    for stream in [false, true] {
        let got = gpt_4o_failing(&gw, &up, stream, "gpt-4o").await;
        assert_eq!(got.header("x-tollgate-fallback"), Some("1"));
        assert_eq!(got.header("x-tollgate-model"), Some("gpt-4o-mini"));
        assert!(String::from_utf8_lossy(&got.body).contains("gpt-4o-mini-2025-01-01"));
    }
    // Counted as the model that answered.
    tokens_counted(&gw, "gpt-4o-mini-2025-01-01", "output", 8).await;
    // A call that succeeds at once says so too.
    let got = post(
        Some(&gw),
        &up,
        "/v1/chat/completions",
        &chat(false, false, 1),
        &[],
    )
    .await;
    assert_eq!(got.header("x-tollgate-fallback"), Some("0"));
    assert_eq!(got.header("x-tollgate-model"), Some("gpt-4o-mini"));
    // Every entry failing: the last answer is relayed, its body whole.
    let got = post(
        Some(&gw),
        &up,
        "/v1/chat/completions",
        &chat(false, false, 1),
        &[("x-stand-in-status", "400")],
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        got.header("x-tollgate-fallback"),
        Some("1"),
        "context_length_exceeded moved it on"
    );
    assert_eq!(got.json()["error"]["code"], "context_length_exceeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_to_another_provider_sends_the_same_request_there() {
    let up = stand_in().await;
    let other = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let auth = req.headers().get("authorization").map(|v| v.to_str().unwrap().to_owned());
        let path = req.uri().path().to_owned();
        let body: Value = serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
        let answer_body = json!({"id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("{path} {auth:?}")}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
        answer(200, &[("content-type", "application/json")], &answer_body.to_string())
    })
    .await;
    let gw = falling_back(&format!(
        "        - upstream: http://{}/api\n          model: meta-llama/llama-3.1-8b\n          account: {{bearer: sk-other}}\n",
        other.addr
    ))
    .await;
    let got = gpt_4o_failing(&gw, &up, false, "gpt-4o,gpt-4o-mini").await;
    assert_eq!(got.header("x-tollgate-fallback"), Some("2"));
    assert_eq!(
        got.header("x-tollgate-model"),
        Some("meta-llama/llama-3.1-8b")
    );
    let v = got.json();
    assert_eq!(v["model"], "meta-llama/llama-3.1-8b");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "/api/v1/chat/completions Some(\"Bearer sk-other\")"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_after_its_first_byte_is_never_sent_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let up = upstream(move |_req| {
        seen.fetch_add(1, Ordering::SeqCst);
        async {
            // One event, a pause (the head and the event go out), then the provider fails.
            let events = futures_util::stream::unfold(0, |i| async move {
                match i {
                    0 => Some((
                        Ok(http_body::Frame::data(bytes::Bytes::from_static(
                            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
                        ))),
                        1,
                    )),
                    1 => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        Some((
                            Err::<http_body::Frame<bytes::Bytes>, tollgate::body::BoxError>(
                                "provider gone".into(),
                            ),
                            2,
                        ))
                    }
                    _ => None,
                }
            });
            let mut r = http::Response::new(http_body_util::BodyExt::boxed_unsync(
                http_body_util::StreamBody::new(events),
            ));
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            r
        }
    })
    .await;
    let gw = falling_back("").await;
    let req = Request::post(format!("http://{}/v1/chat/completions", gw.proxy_addr))
        .header("content-type", "application/json")
        .header("x-tollgate-host", up.addr.to_string())
        .header("x-tollgate-scheme", "http")
        .body(bytes_body(chat(true, true, 4).to_string()))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(
        resp.headers()
            .get("x-tollgate-fallback")
            .map(|v| v.to_str().unwrap()),
        Some("0"),
        "{:?} {:?}",
        resp.status(),
        resp.headers()
    );
    use http_body_util::BodyExt;
    let _ = resp.into_body().collect().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_shows_each_endpoints_tokens_cost_and_time_to_first_byte() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("diagnosis:\n  discovery: {enabled: true}\n")).await;
    let mut body = chat(true, true, 10);
    body["model"] = json!("gpt-4o");
    let mut used = (0, 0);
    for _ in 0..2 {
        let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
        let u = streamed_usage(&got.body).unwrap();
        used.0 += u["prompt_tokens"].as_u64().unwrap();
        used.1 += u["completion_tokens"].as_u64().unwrap();
    }
    let row = eventually("discovery counted both calls", || async {
        match discovered(&gw, "/v1/chat/completions").await {
            Some(r) if r["llm"]["calls"] == 2 => Ok(r),
            other => Err(other),
        }
    })
    .await;
    let l = &row["llm"];
    assert_eq!(
        (l["input_tokens"].as_u64(), l["output_tokens"].as_u64()),
        (Some(used.0), Some(used.1))
    );
    // gpt-4o: $2.50 in, $10 out per million.
    let cost = (used.0 as f64 * 2.5 + used.1 as f64 * 10.0) / 1e6;
    assert!((l["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-8, "{l}");
    assert!(l["time_to_first_byte_ms"]["p50"].as_f64().is_some(), "{l}");
    let text =
        tollgate::diagnosis::discovery::table::table(&admin_get(&gw, "/discover").await.json());
    assert!(text.contains("LLM calls"), "{text}");
    assert!(
        text.contains(&format!("{:>12} {:>12}", used.0, used.1)),
        "{text}"
    );
}
