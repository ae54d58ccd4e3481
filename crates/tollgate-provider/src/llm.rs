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
//! send no headers of their own (the gateways a benchmark compares). A path under
//! `/compress/` (`/compress/v1/chat/completions`, `/compress/pace/1ms/v1/…`), or the
//! header `x-stand-in-compress: 1`, compresses the answer as a provider behind a CDN does:
//! with the first of `gzip`, `deflate`, `zstd` that the request's `Accept-Encoding`
//! lists, a stream flushed event by event. The prompt's tokens are the request body's
//! bytes / 4.

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
    coding: Option<Coding>,
    /// The Responses API's `instructions`, echoed in its response objects as OpenAI does.
    instructions: Value,
}

/// A content coding the stand-in compresses with.
#[derive(Clone, Copy, PartialEq)]
enum Coding {
    Gzip,
    Deflate,
    Zstd,
}

impl Coding {
    /// The first the client accepts, of those the stand-in writes.
    fn accepted(accept_encoding: &str) -> Option<Coding> {
        let listed = |name: &str| {
            accept_encoding.split(',').any(|c| {
                c.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case(name)
            })
        };
        [
            ("gzip", Coding::Gzip),
            ("deflate", Coding::Deflate),
            ("zstd", Coding::Zstd),
        ]
        .into_iter()
        .find_map(|(name, c)| listed(name).then_some(c))
    }

    fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Zstd => "zstd",
        }
    }
}

/// Compresses a stream's pieces as they go: each piece is flushed (gzip, deflate) or its
/// own frame (zstd), so the reader gets every event when it is sent.
enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Deflate(flate2::write::ZlibEncoder<Vec<u8>>),
    Zstd,
}

impl Encoder {
    fn new(c: Coding) -> Self {
        let level = flate2::Compression::fast();
        match c {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(Vec::new(), level)),
            Coding::Deflate => Encoder::Deflate(flate2::write::ZlibEncoder::new(Vec::new(), level)),
            Coding::Zstd => Encoder::Zstd,
        }
    }

    /// `data` compressed, flushed so that it can be decoded at once.
    fn piece(&mut self, data: &[u8]) -> Bytes {
        use std::io::Write;
        let out = match self {
            Encoder::Gzip(e) => {
                let _ = e.write_all(data).and_then(|_| e.flush());
                std::mem::take(e.get_mut())
            }
            Encoder::Deflate(e) => {
                let _ = e.write_all(data).and_then(|_| e.flush());
                std::mem::take(e.get_mut())
            }
            Encoder::Zstd => {
                ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
            }
        };
        Bytes::from(out)
    }

    /// What ends the stream (gzip's trailer).
    fn finish(self) -> Bytes {
        Bytes::from(match self {
            Encoder::Gzip(e) => e.finish().unwrap_or_default(),
            Encoder::Deflate(e) => e.finish().unwrap_or_default(),
            Encoder::Zstd => Vec::new(),
        })
    }
}

/// `b` as the stream sends it: compressed when it is.
fn encode(encoder: &mut Option<Encoder>, b: Bytes) -> Bytes {
    match encoder {
        Some(e) => e.piece(&b),
        None => b,
    }
}

/// `path` with its percent-escapes decoded, as an origin server routes it.
pub fn decoded_path(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(c)) => {
                out.push(c);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
    let compress = path.starts_with("/compress/") || header("x-stand-in-compress").is_some();
    let coding = compress
        .then(|| Coding::accepted(&header("accept-encoding").unwrap_or_default()))
        .flatten();
    let path = path.strip_prefix("/compress").unwrap_or(path);
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
        coding,
        instructions: v["instructions"].clone(),
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
    let body = body.to_string();
    match a.coding {
        Some(c) => {
            let mut e = Encoder::new(c);
            let mut out = e.piece(body.as_bytes()).to_vec();
            out.extend_from_slice(&e.finish());
            let mut r = respond(StatusCode::OK, "application/json", out);
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static(c.name()));
            r
        }
        None => respond(StatusCode::OK, "application/json", body),
    }
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
                "status": "in_progress", "model": snapshot(&a.model), "instructions": a.instructions,
                "output": [], "usage": null});
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
    let mut encoder = a.coding.map(Encoder::new);
    let coding = a.coding;
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
                        .send(encode(
                            &mut encoder,
                            Bytes::from_static(b": keep-alive\n\n"),
                        ))
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
            if tx.send(encode(&mut encoder, Bytes::from(e))).await.is_err() {
                return;
            }
        }
        if let Some(e) = encoder {
            let _ = tx.send(e.finish()).await;
        }
    });
    let mut r = Response::new(crate::streams::streamed(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(c) = coding {
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static(c.name()));
    }
    r
}
