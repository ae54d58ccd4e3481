//! LLM provider stand-ins: OpenAI's chat completions, Responses API and embeddings,
//! Anthropic's Messages API and Gemini's `generateContent`, each answering whole or
//! streaming server-sent events shaped and paced like the provider's, with the usage the
//! provider would report. Request headers steer them: `x-stand-in-tokens` (output
//! tokens, default `max_tokens` or 5), `x-stand-in-pace` (between events, e.g. `10ms`),
//! `x-stand-in-cached` (cached prompt tokens), `x-stand-in-status` (answer with this
//! error status in the provider's error shape), `x-stand-in-fail-models` (a
//! comma-separated list of models answered 429), `x-stand-in-stall-after` (a stream sends
//! this many events, then only `: keep-alive` comments at its pace until the reader goes,
//! so what a cut stream relayed is bounded whatever the machine's speed). A path under `/pace/{d}` (`/pace/1ms/v1/
//! chat/completions`) paces the events as `x-stand-in-pace: {d}` does, for clients that
//! send no headers of their own (the gateways a benchmark compares). The prompt's tokens
//! are the request body's bytes / 4.

use crate::body::Body;
use crate::{parse_delay, respond, timer};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Chat,
    Responses,
    Embeddings,
    Anthropic,
    Gemini { stream: bool },
}

struct Ask {
    api: Api,
    model: String,
    stream: bool,
    include_usage: bool,
    prompt: u64,
    cached: u64,
    tokens: u64,
    pace: Duration,
    stall_after: Option<usize>,
}

/// Answers `path` if it is an LLM API's.
pub async fn route(req: Request<Incoming>, path: &str) -> Option<Response<Body>> {
    let api = if path.ends_with(":generateContent") {
        Api::Gemini { stream: false }
    } else if path.ends_with(":streamGenerateContent") {
        Api::Gemini { stream: true }
    } else if path.ends_with("/chat/completions") {
        Api::Chat
    } else if path.ends_with("/responses") {
        Api::Responses
    } else if path.ends_with("/embeddings") {
        Api::Embeddings
    } else if path.ends_with("/messages") {
        Api::Anthropic
    } else {
        return None;
    };
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let status = header("x-stand-in-status").and_then(|s| s.parse::<u16>().ok());
    let fail_models = header("x-stand-in-fail-models").unwrap_or_default();
    let tokens = header("x-stand-in-tokens").and_then(|s| s.parse().ok());
    let pace = header("x-stand-in-pace")
        .or_else(|| {
            let rest = path.strip_prefix("/pace/")?;
            Some(rest.split('/').next()?.to_owned())
        })
        .and_then(|s| parse_delay(&s))
        .unwrap_or_default();
    let stall_after = header("x-stand-in-stall-after").and_then(|s| s.parse().ok());
    let cached = header("x-stand-in-cached")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = req.into_body().collect().await.ok()?.to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = match api {
        Api::Gemini { .. } => path
            .rsplit('/')
            .next()
            .and_then(|s| s.split(':').next())
            .unwrap_or("")
            .to_owned(),
        _ => v["model"].as_str().unwrap_or("").to_owned(),
    };
    if let Some(code) = status {
        return Some(error(api, code, "the stand-in was asked to fail"));
    }
    if fail_models
        .split(',')
        .any(|m| !m.is_empty() && m.trim() == model)
    {
        return Some(error(api, 429, &format!("Rate limit reached for {model}")));
    }
    let max = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| v[k].as_u64())
        .or(v["generationConfig"]["maxOutputTokens"].as_u64());
    let ask = Ask {
        api,
        stream: match api {
            Api::Gemini { stream } => stream,
            _ => v["stream"].as_bool().unwrap_or(false),
        },
        include_usage: v["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false),
        prompt: (body.len() as u64).div_ceil(4),
        cached,
        tokens: tokens.or(max).unwrap_or(5),
        pace,
        stall_after,
        model,
    };
    Some(if ask.stream { stream(ask) } else { whole(&ask) })
}

/// The provider's error shape for `code`.
fn error(api: Api, code: u16, message: &str) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match api {
        Api::Anthropic => {
            json!({"type": "error", "error": {"type": if code == 429 {"rate_limit_error"} else {"api_error"}, "message": message}})
        }
        Api::Gemini { .. } => {
            json!({"error": {"code": code, "message": message, "status": "RESOURCE_EXHAUSTED"}})
        }
        _ => {
            json!({"error": {"message": message, "type": if code == 429 {"rate_limit_error"} else {"server_error"}, "param": null, "code": if code == 429 {"rate_limit_exceeded"} else if code == 400 {"context_length_exceeded"} else {"server_error"}}})
        }
    };
    let mut r = respond(status, "application/json", body.to_string());
    if code == 429 {
        r.headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    r
}

fn text(n: u64) -> String {
    (0..n).map(|i| format!("t{i} ")).collect()
}

/// The usage object as the provider writes it.
fn usage(a: &Ask) -> Value {
    let (p, o, c) = (a.prompt, a.tokens, a.cached);
    match a.api {
        Api::Chat => json!({"prompt_tokens": p, "completion_tokens": o, "total_tokens": p + o,
            "prompt_tokens_details": {"cached_tokens": c, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}),
        Api::Embeddings => json!({"prompt_tokens": p, "total_tokens": p}),
        Api::Responses => json!({"input_tokens": p, "input_tokens_details": {"cached_tokens": c},
            "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": p + o}),
        Api::Anthropic => json!({"input_tokens": p - c.min(p), "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": c.min(p), "output_tokens": o}),
        Api::Gemini { .. } => json!({"promptTokenCount": p, "candidatesTokenCount": o,
            "totalTokenCount": p + o, "cachedContentTokenCount": c}),
    }
}

/// The model as the answer names it: a dated snapshot of the one asked for.
fn snapshot(m: &str) -> String {
    format!("{m}-2025-01-01")
}

fn whole(a: &Ask) -> Response<Body> {
    let content = text(a.tokens);
    let body = match a.api {
        Api::Chat => {
            json!({"id": "chatcmpl-standin", "object": "chat.completion", "created": 1_700_000_000,
            "model": snapshot(&a.model), "choices": [{"index": 0, "message": {"role": "assistant",
            "content": content, "refusal": null}, "logprobs": null, "finish_reason": "stop"}],
            "usage": usage(a), "system_fingerprint": "fp_standin"})
        }
        Api::Embeddings => json!({"object": "list", "data": [{"object": "embedding", "index": 0,
            "embedding": [0.0023, -0.0094, 0.0153]}], "model": a.model, "usage": usage(a)}),
        Api::Responses => {
            json!({"id": "resp_standin", "object": "response", "created_at": 1_700_000_000,
            "status": "completed", "model": snapshot(&a.model), "output": [{"type": "message",
            "id": "msg_standin", "status": "completed", "role": "assistant", "content": [{"type":
            "output_text", "text": content, "annotations": []}]}], "usage": usage(a)})
        }
        Api::Anthropic => json!({"id": "msg_standin", "type": "message", "role": "assistant",
            "model": a.model, "content": [{"type": "text", "text": content}], "stop_reason": "end_turn",
            "stop_sequence": null, "usage": usage(a)}),
        Api::Gemini { .. } => json!({"candidates": [{"content": {"parts": [{"text": content}],
            "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": usage(a),
            "modelVersion": a.model}),
    };
    respond(StatusCode::OK, "application/json", body.to_string())
}

/// The events of a stream, as `(event name, data)`.
fn events(a: &Ask) -> Vec<(Option<&'static str>, String)> {
    let mut out = Vec::new();
    let n = a.tokens;
    match a.api {
        Api::Chat | Api::Embeddings => {
            let chunk = |delta: Value, finish: Value| {
                let mut c = json!({"id": "chatcmpl-standin", "object": "chat.completion.chunk",
                    "created": 1_700_000_000, "model": snapshot(&a.model), "system_fingerprint": "fp_standin",
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
                if a.include_usage {
                    c["usage"] = Value::Null;
                }
                (None, c.to_string())
            };
            out.push(chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            ));
            for i in 0..n {
                out.push(chunk(json!({"content": format!("t{i} ")}), Value::Null));
            }
            out.push(chunk(json!({}), json!("stop")));
            if a.include_usage {
                let c = json!({"id": "chatcmpl-standin", "object": "chat.completion.chunk",
                    "created": 1_700_000_000, "model": snapshot(&a.model), "system_fingerprint": "fp_standin",
                    "choices": [], "usage": usage(a)});
                out.push((None, c.to_string()));
            }
            out.push((None, "[DONE]".to_owned()));
        }
        Api::Responses => {
            let r = json!({"id": "resp_standin", "object": "response", "created_at": 1_700_000_000,
                "status": "in_progress", "model": snapshot(&a.model), "output": [], "usage": null});
            out.push((
                Some("response.created"),
                json!({"type": "response.created", "sequence_number": 0, "response": r})
                    .to_string(),
            ));
            for i in 0..n {
                out.push((Some("response.output_text.delta"), json!({"type": "response.output_text.delta",
                    "sequence_number": i + 1, "item_id": "msg_standin", "output_index": 0, "content_index": 0,
                    "delta": format!("t{i} ")}).to_string()));
            }
            let mut done = r.clone();
            done["status"] = json!("completed");
            done["usage"] = usage(a);
            out.push((
                Some("response.completed"),
                json!({"type": "response.completed", "sequence_number": n + 1, "response": done})
                    .to_string(),
            ));
        }
        Api::Anthropic => {
            let mut start_usage = usage(a);
            start_usage["output_tokens"] = json!(1);
            out.push((Some("message_start"), json!({"type": "message_start", "message": {"id": "msg_standin",
                "type": "message", "role": "assistant", "model": a.model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": start_usage}}).to_string()));
            out.push((
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})
                .to_string(),
            ));
            out.push((Some("ping"), json!({"type": "ping"}).to_string()));
            for i in 0..n {
                out.push((
                    Some("content_block_delta"),
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": format!("t{i} ")}})
                    .to_string(),
                ));
            }
            out.push((
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}).to_string(),
            ));
            out.push((
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                "stop_sequence": null}, "usage": {"output_tokens": n}})
                .to_string(),
            ));
            out.push((
                Some("message_stop"),
                json!({"type": "message_stop"}).to_string(),
            ));
        }
        Api::Gemini { .. } => {
            for i in 0..n {
                let mut u = usage(a);
                u["candidatesTokenCount"] = json!(i + 1);
                u["totalTokenCount"] = json!(a.prompt + i + 1);
                out.push((
                    None,
                    json!({"candidates": [{"content": {"parts": [{"text": format!("t{i} ")}],
                    "role": "model"}, "index": 0}], "usageMetadata": u, "modelVersion": a.model})
                    .to_string(),
                ));
            }
        }
    }
    out
}

fn stream(a: Ask) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let evs = events(&a);
    let (pace, stall_after) = (a.pace, a.stall_after);
    tokio::spawn(async move {
        let start = Instant::now();
        for (i, (name, data)) in evs.into_iter().enumerate() {
            if stall_after == Some(i) {
                // A comment line (WHATWG HTML, server-sent events: a line starting with
                // `:` is ignored) keeps writing, so a reader that went is noticed.
                let beat = if pace.is_zero() {
                    Duration::from_millis(5)
                } else {
                    pace
                };
                loop {
                    timer::sleep_until(Instant::now() + beat).await;
                    if tx
                        .send(Bytes::from_static(b": keep-alive\n\n"))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            if i > 0 && !pace.is_zero() {
                timer::sleep_until(start + pace * i as u32).await;
            }
            let mut e = String::new();
            if let Some(n) = name {
                e.push_str("event: ");
                e.push_str(n);
                e.push('\n');
            }
            e.push_str("data: ");
            e.push_str(&data);
            e.push_str("\n\n");
            if tx.send(Bytes::from(e)).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(crate::streams::streamed(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
