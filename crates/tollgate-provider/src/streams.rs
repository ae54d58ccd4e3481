//! httpbin's generated and streamed responses: `/status`, `/bytes`, `/stream`, `/drip`, `/gzip`, `/uuid`.

use super::{echo, json, respond};
use crate::body::{Body, BoxError};
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
}

pub(crate) fn streamed(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, BoxError>(Frame::data(b)), rx))
    });
    StreamBody::new(stream).boxed_unsync()
}

/// `/status/{code}` or `/status/{a},{b},…` (one picked at random, as httpbin does).
pub fn status(codes: &str) -> Response<Body> {
    let list: Vec<u16> = codes
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let Some(&code) = list.get(fastrand::usize(..list.len().max(1))) else {
        return respond(
            StatusCode::BAD_REQUEST,
            "text/plain",
            "invalid status code\n",
        );
    };
    match StatusCode::from_u16(code) {
        Ok(s) if code >= 200 => respond(s, "text/plain", Bytes::new()),
        _ => respond(
            StatusCode::BAD_REQUEST,
            "text/plain",
            "invalid status code\n",
        ),
    }
}

/// `/bytes/{n}[?seed=S]`: n pseudo-random bytes, deterministic for a given seed,
/// streamed in 64 KiB chunks so any size passes with flat memory.
pub fn bytes(n: &str, query: Option<&str>) -> Response<Body> {
    let Ok(total) = n.parse::<u64>() else {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "bad byte count\n");
    };
    let seed = query_param(query, "seed")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut left = total;
        while left > 0 {
            let len = left.min(64 * 1024) as usize;
            let mut chunk = vec![0u8; len];
            rng.fill(&mut chunk);
            if tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            left -= len as u64;
        }
    });
    let mut r = Response::new(streamed(rx));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    r
}

/// `/stream/{n}`: n JSON lines, one per chunk.
pub fn stream(n: &str, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let n: usize = n.parse::<usize>().unwrap_or(0).min(100);
    let base = echo::base(&req, peer);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for id in 0..n {
            let mut m = base.clone();
            m.insert("id".into(), id.into());
            let mut line = serde_json::to_vec(&m).expect("json");
            line.push(b'\n');
            if tx.send(Bytes::from(line)).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(streamed(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `/drip?duration=2&numbytes=10&code=200&delay=0`: `numbytes` `*` bytes spread over
/// `duration` seconds after `delay` seconds, chunked.
/// A parameter that is given but not valid is a 400 naming it, never a default or a panic.
pub fn drip(query: Option<&str>) -> Response<Body> {
    let bad = |name: &str| {
        respond(
            StatusCode::BAD_REQUEST,
            "text/plain",
            format!(
                "bad `{name}`: durations in seconds (at most 60) or like `150ms`; numbytes a whole number; code 100-999\n"
            ),
        )
    };
    let secs = |name, default| match query_param(query, name) {
        None => Some(default),
        Some(v) => super::parse_delay(v),
    };
    let Some(duration) = secs("duration", Duration::from_secs(2)) else {
        return bad("duration");
    };
    let Some(delay) = secs("delay", Duration::ZERO) else {
        return bad("delay");
    };
    let numbytes: u64 = match query_param(query, "numbytes").map(str::parse::<u64>) {
        None => 10,
        Some(Ok(n)) => n.min(10 << 20),
        Some(Err(_)) => return bad("numbytes"),
    };
    let code = match query_param(query, "code").map(|c| c.parse().map(StatusCode::from_u16)) {
        None => StatusCode::OK,
        Some(Ok(Ok(c))) => c,
        Some(_) => return bad("code"),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let pause = if numbytes > 1 {
            duration / (numbytes as u32 - 1).max(1)
        } else {
            Duration::ZERO
        };
        for i in 0..numbytes {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            if tx.send(Bytes::from_static(b"*")).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(streamed(rx));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    r
}

/// `/gzip`: the echo JSON, gzip-encoded.
pub async fn gzip(req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let mut m = echo::base(&req, peer);
    m.insert("gzipped".into(), true.into());
    m.insert("method".into(), req.method().as_str().into());
    let plain = serde_json::to_vec_pretty(&m).expect("json");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&plain).expect("write to Vec");
    let body = enc.finish().expect("finish gzip into Vec");
    let mut r = respond(StatusCode::OK, "application/json", body);
    r.headers_mut()
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    r
}

/// `/uuid`: a random version-4 UUID.
pub fn uuid() -> Response<Body> {
    let mut b = [0u8; 16];
    fastrand::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let id = format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    );
    json(&serde_json::json!({ "uuid": id }))
}
