//! LLM accounting that what an auditor tries first cannot escape: compressed answers
//! (every SDK sends `Accept-Encoding: gzip`), other spellings of a recognised path, `n`
//! choices, absurd counts, events past the cap, a refused reservation on Redis, a call
//! that can never fit (docs/llm.md); and a resent conversation's prompt counted by the
//! tokenizer once per string.

use super::llm::{
    chat, llm_policy, post, read_then_leave, stand_in, streamed_usage, tokens_counted,
};
use crate::support::*;
use http::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// Each coding the stand-in writes, and each provider's shape, whole and streamed: the
/// client gets the provider's compressed bytes unchanged, and the usage is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_answers_are_relayed_as_sent_and_counted() {
    let up = stand_in().await;
    let msg = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/compress/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": msg, "max_tokens": 7}),
            "gpt-4o-2025-01-01",
        ),
        (
            "/compress/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": msg, "max_tokens": 7, "stream": true,
                "stream_options": {"include_usage": true}}),
            "gpt-4o-2025-01-01",
        ),
        (
            "/compress/v1/responses",
            json!({"model": "gpt-5", "input": "hi", "stream": true, "max_output_tokens": 7}),
            "gpt-5-2025-01-01",
        ),
        (
            "/compress/v1/messages",
            json!({"model": "claude-sonnet-4-5", "messages": msg, "max_tokens": 7, "stream": true}),
            "claude-sonnet-4-5",
        ),
        (
            "/compress/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 7}}),
            "gemini-2.5-flash",
        ),
    ];
    for coding in ["gzip", "deflate", "zstd"] {
        for (path, body, model) in &cases {
            let gw = gateway(&llm_policy("")).await;
            // What the SDKs send by default (httpx: `gzip, deflate`; with zstandard
            // installed, `zstd` too): the stand-in picks the first it writes.
            let accept = match coding {
                "gzip" => "gzip, deflate",
                "deflate" => "deflate",
                _ => "zstd",
            };
            let headers = [("accept-encoding", accept)];
            let direct = post(None, &up, path, body, &headers).await;
            let through = post(Some(&gw), &up, path, body, &headers).await;
            assert_eq!(through.status, StatusCode::OK, "{coding} {path}");
            assert_eq!(through.header("content-encoding"), Some(coding), "{path}");
            assert!(
                through.body == direct.body,
                "{coding} {path}: the provider's compressed bytes, unchanged"
            );
            tokens_counted(&gw, model, "output", 7).await;
        }
    }
}

/// A compressed answer settles its call's reservation at the usage it tells, as a plain
/// one does: what the decoder still holds when the answer ends is read before the call
/// is settled (a one-piece answer is all of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_answer_settles_the_token_limit_at_its_usage() {
    clear_of_the_hour_end(30).await;
    let up = stand_in().await;
    let body = chat(false, false, 20);
    let plain = post(None, &up, "/v1/chat/completions", &body, &[]).await;
    let total = plain.json()["usage"]["total_tokens"].as_u64().unwrap();
    for coding in ["gzip", "deflate", "zstd"] {
        let gw = gateway(&llm_policy(
            "    token_limit: {limit: 100000, window: hour}\n",
        ))
        .await;
        let headers = [("accept-encoding", coding)];
        let got = post(
            Some(&gw),
            &up,
            "/compress/v1/chat/completions",
            &body,
            &headers,
        )
        .await;
        assert_eq!(got.status, StatusCode::OK, "{coding}");
        assert_eq!(got.header("content-encoding"), Some(coding));
        eventually(
            &format!("{coding}: the call settled at its usage"),
            || async {
                let s = admin_get(&gw, "/policies").await.json();
                match s["policies"][0]["state"]["token_limit"]["used_tokens"].as_u64() {
                    Some(n) if n == total => Ok(()),
                    n => Err(n),
                }
            },
        )
        .await;
    }
}

/// A stream whose usage tollgate asks for itself is asked uncompressed (the usage chunk
/// is removed from it), and the client still gets the stream it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_tollgate_asks_usage_of_is_asked_uncompressed() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("")).await;
    let body = chat(true, false, 4);
    let got = post(
        Some(&gw),
        &up,
        "/compress/v1/chat/completions",
        &body,
        &[("accept-encoding", "gzip, deflate")],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("content-encoding"), None);
    assert!(
        streamed_usage(&got.body).is_none(),
        "the added chunk is removed"
    );
    tokens_counted(&gw, "gpt-4o-mini-2025-01-01", "output", 4).await;
}

/// `%63` is `c` to the servers that route it: recognised and counted. What servers
/// disagree on is refused on a host with an LLM policy, never passed uncounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_spellings_of_a_path_are_counted_or_refused() {
    let up = stand_in().await;
    let gw = gateway(
        "policies:\n  - name: ai\n    match: {path: /v1/*}\n    llm: {tokenizer: false}\n    token_limit: {limit: 100000, window: hour}\n",
    )
    .await;
    let body = chat(false, false, 3);
    let got = post(Some(&gw), &up, "/v1/chat/%63ompletions", &body, &[]).await;
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    tokens_counted(&gw, "gpt-4o-mini-2025-01-01", "output", 3).await;
    for path in [
        "/v1/chat%2Fcompletions",
        "/v1/chat%2fcompletions",
        "/v1/chat/completions;a=b",
        "/v1/chat/Completions",
        "/V1/chat/completions",
        "/v1/chat/COMPLETIONS",
    ] {
        let got = post(Some(&gw), &up, path, &body, &[]).await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(
            got.error_code().as_deref(),
            Some("ambiguous_path"),
            "{path}"
        );
    }
    // What already counted still does.
    let got = post(Some(&gw), &up, "/v1/chat/completions?x=1", &body, &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    tokens_counted(&gw, "gpt-4o-mini-2025-01-01", "output", 6).await;
    // A path no policy of the host would count is not touched.
    let got = post(Some(&gw), &up, "/v1/Models;x", &body, &[]).await;
    assert_ne!(got.error_code().as_deref(), Some("ambiguous_path"));
}

/// `n: 50` with `max_tokens: 20` reserves 1 000 output tokens: past a 600-token limit,
/// and never able to fit, so the SDK is told not to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_choice_is_reserved_and_a_call_that_can_never_fit_says_so() {
    clear_of_the_hour_end(30).await;
    let up = stand_in().await;
    let gw = gateway(
        "policies:\n  - name: ai\n    llm: {tokenizer: false}\n    token_limit: {limit: 600, window: hour}\n",
    )
    .await;
    let mut body = chat(false, false, 20);
    body["n"] = json!(50);
    let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", got.body);
    assert_eq!(got.error_code().as_deref(), Some("token_limited"));
    assert_eq!(got.header("x-should-retry"), Some("false"));
    assert_eq!(got.header("retry-after"), None);
    // One choice fits, and a refusal for want of room now is worth retrying.
    let got = post(
        Some(&gw),
        &up,
        "/v1/chat/completions",
        &chat(false, false, 20),
        &[],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-should-retry"), None);
}

/// A raw provider answering `body` as JSON, whatever was asked.
async fn answering(body: &'static str) -> Server {
    raw_upstream(move |mut s| async move {
        let _ = read_request(&mut s).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(body.as_bytes()).await;
    })
    .await
}

/// A provider reporting 2^63 prompt and 2^63 output tokens uses the whole limit, not 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_counts_saturate() {
    clear_of_the_hour_end(30).await;
    let up = answering(
        r#"{"model":"m","choices":[],"usage":{"prompt_tokens":9223372036854775808,"completion_tokens":9223372036854775808}}"#,
    )
    .await;
    let gw = gateway(
        "policies:\n  - name: ai\n    llm: {tokenizer: false}\n    token_limit: {limit: 1000, window: hour}\n",
    )
    .await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/v1/chat/completions")
            .method("POST")
            .body(bytes_body(r#"{"model":"m","max_tokens":5}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    let used = eventually("the call settled", || async {
        let s = admin_get(&gw, "/policies").await.json();
        match s["policies"][0]["state"]["token_limit"]["used_tokens"].as_u64() {
            Some(n) if n > 1000 => Ok(n),
            n => Err(n),
        }
    })
    .await;
    assert!(used > 1 << 62, "{used}");
}

/// A stream whose usage tollgate added, with an event far past the cap: it passes as it
/// comes (the client reads megabytes of it before it ends), nothing holds it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_past_the_cap_passes_as_it_comes() {
    let (go_on, wait) = tokio::sync::watch::channel(false);
    let up = raw_upstream(move |mut s| {
        let mut wait = wait.clone();
        async move {
            let _ = read_request(&mut s).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                .await;
            let _ = s
                .write_all(b"data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"")
                .await;
            let x = vec![b'x'; 64 << 10];
            for _ in 0..48 {
                if s.write_all(&x).await.is_err() {
                    return;
                }
            }
            // The rest of the event only once the client has read most of it.
            let _ = wait.wait_for(|go| *go).await;
            let _ = s.write_all(b"\"}}]}\n\n").await;
            let _ = s
                .write_all(b"data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":22}}\n\ndata: [DONE]\n\n")
                .await;
        }
    })
    .await;
    let gw = gateway(&llm_policy("")).await;
    let req = via_header(&gw, up.addr, "/v1/chat/completions")
        .method("POST")
        .body(bytes_body(r#"{"model":"m","stream":true}"#))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let mut body = resp.into_body();
    use http_body_util::BodyExt;
    let mut got = Vec::new();
    // Before the fix the gateway held the whole event: this never came, and the wait failed.
    let read = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while got.len() < 2 << 20 {
            match body.frame().await {
                Some(Ok(f)) => got.extend_from_slice(f.data_ref().map_or(&[][..], |d| d)),
                _ => panic!("the stream ended early"),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "only {} bytes of the long event came",
        got.len()
    );
    go_on.send(true).unwrap();
    while let Some(Ok(f)) = body.frame().await {
        got.extend_from_slice(f.data_ref().map_or(&[][..], |d| d));
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert!(
        !text.contains("prompt_tokens"),
        "the added usage chunk is removed"
    );
    tokens_counted(&gw, "m", "output", 22).await;
}

/// A Responses stream whose `response.completed` echoes a long `instructions` (over the
/// 1 MiB an event is kept whole) still tells its usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_completed_event_still_tells_its_usage() {
    let up = stand_in().await;
    let gw = gateway(&llm_policy("")).await;
    let body = json!({"model": "gpt-5", "stream": true, "max_output_tokens": 9,
        "instructions": "be brief. ".repeat(120_000), "input": "hi"});
    let got = post(Some(&gw), &up, "/v1/responses", &body, &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    let prompt = (body.to_string().len() as u64).div_ceil(4);
    tokens_counted(&gw, "gpt-5-2025-01-01", "input", prompt).await;
    tokens_counted(&gw, "gpt-5-2025-01-01", "output", 9).await;
}

/// On Redis a reservation that does not fit is never added: `MONITOR` shows no `INCRBY`
/// of it, and the shared count never passes the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reservation_never_touches_the_shared_count() {
    clear_of_the_hour_end(30).await;
    let redis = crate::support::redis_procs::RedisServer::start();
    let up = stand_in().await;
    let yaml = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 500ms\npolicies:\n  - name: ai\n    llm: {{tokenizer: false}}\n    token_limit: {{limit: 100, window: hour}}\n",
        redis.url()
    );
    let gw = gateway(&yaml).await;
    // Reserves 12 + 40 = 52 and uses 29 + 40 = 69: the second does not fit.
    let body = chat(false, false, 40);
    let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    eventually("the first call settled", || async {
        let s = admin_get(&gw, "/policies").await.json();
        match s["policies"][0]["state"]["token_limit"]["used_tokens"].as_u64() {
            Some(69) => Ok(()),
            n => Err(n),
        }
    })
    .await;
    let mut monitor = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "monitor"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = monitor.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let lines = seen.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let mut s = lines.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    });
    wait_until("MONITOR started", || seen.lock().unwrap().contains("OK")).await;
    let got = post(Some(&gw), &up, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(got.error_code().as_deref(), Some("token_limited"));
    // The refusal's own commands have reached MONITOR once a later one has.
    redis.cli(&["PING"]);
    wait_until("the PING after it reached MONITOR", || {
        seen.lock().unwrap().contains("\"PING\"")
    })
    .await;
    let _ = monitor.kill();
    let _ = monitor.wait();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains("EVALSHA") || seen.contains("EVAL"), "{seen}");
    assert!(
        !seen.contains("\"INCRBY\""),
        "added before it was checked: {seen}"
    );
    let s = admin_get(&gw, "/policies").await.json();
    assert_eq!(s["policies"][0]["state"]["token_limit"]["used_tokens"], 69);
}

/// A client leaving an Anthropic stream after a few deltas: its output is estimated, and
/// the call says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_marked_estimated() {
    let up = stand_in().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&format!(
        "diagnosis:\n  har: {{enabled: true, file: {{dir: '{}'}}}}\n{}",
        dir.path().display(),
        llm_policy("")
    ))
    .await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let req = via_header(&gw, up.addr, "/v1/messages")
        .method("POST")
        .header("x-stand-in-pace", "5ms")
        .header("x-stand-in-stall-after", "8")
        .body(bytes_body(body.to_string()))
        .unwrap();
    read_then_leave(req, "event: content_block_delta", 3).await;
    let entries = har_entries_in(dir.path(), 1).await;
    let usage = &entries[0]["_tollgateUsage"];
    assert_eq!(usage["estimated"], true, "{usage}");
    let output = usage["output_tokens"].as_u64().unwrap();
    // A token per content delta the stand-in sent before it stalled, not its role or
    // framing events.
    assert!((3..=8).contains(&output), "{usage}");
}

/// A budget of a billion dollars is the bound the message states: it is taken.
#[tokio::test]
async fn a_billion_dollar_budget_is_taken() {
    let yaml = "policies:\n  - name: ai\n    llm: {}\n    budget: {limit: \"$1000000000\", per: day, unpriced: allow}\n";
    let gw = gateway(yaml).await;
    let s = admin_get(&gw, "/policies").await.json();
    assert_eq!(
        s["policies"][0]["state"]["budget"]["limit_usd"],
        "$1000000000"
    );
}

/// A conversation resent turn after turn, as an agent sends it, is counted by the
/// tokenizer once per string: the worker remembers each string's count, and
/// `tollgate_llm_prompt_strings_total` says which strings it counted and which it found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_conversation_is_counted_by_the_tokenizer_once_per_string() {
    clear_of_the_hour_end(30).await;
    let up = stand_in().await;
    // One worker: every turn meets the same memory.
    let gw = gateway_with_workers(
        "policies:\n  - name: ai\n    token_limit: {limit: 1000000, window: hour}\n",
        1,
    )
    .await;
    let turn = |n: usize| {
        let mut messages = vec![json!({"role": "system", "content": "You plan trips."})];
        for i in 0..n {
            messages.push(json!({"role": "user", "content": format!("Step {i}: where next?")}));
        }
        json!({"model": "gpt-4o-mini", "max_tokens": 5, "messages": messages})
    };
    for n in 1..=3 {
        let got = post(Some(&gw), &up, "/v1/chat/completions", &turn(n), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "turn {n}");
    }
    // Turn 1 counts its 2 strings; turn 2 finds those and counts 1; turn 3 finds 3 and
    // counts 1.
    let counted = "tollgate_llm_prompt_strings_total{kind=\"counted\"} 4\n";
    let remembered = "tollgate_llm_prompt_strings_total{kind=\"remembered\"} 5\n";
    metrics_when(&gw, |t| t.contains(counted) && t.contains(remembered)).await;
}
