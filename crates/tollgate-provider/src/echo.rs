//! httpbin's echo endpoints: `/anything`, `/get`, `/post`, `/headers`, `/delay`, `/json`.

use super::json;
use crate::body::Body;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};
use std::net::SocketAddr;

/// Echo bodies are buffered; larger ones are refused (use `/bytes` for big data).
const MAX_ECHO_BODY: usize = 16 << 20;

/// Header map as httpbin shows it: Title-Case names, repeated values joined by `,`.
pub fn header_object(h: &HeaderMap) -> Value {
    let mut m = Map::new();
    for name in h.keys() {
        let title: String = name
            .as_str()
            .split('-')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("-");
        let joined = h
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>()
            .join(",");
        m.insert(title, Value::String(joined));
    }
    Value::Object(m)
}

fn args(query: Option<&str>) -> Value {
    let mut m = Map::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = Value::String(v.to_owned());
        match m.get_mut(k) {
            Some(Value::Array(a)) => a.push(v),
            Some(prev) => *prev = Value::Array(vec![prev.take(), v]),
            None => {
                m.insert(k.to_owned(), v);
            }
        }
    }
    Value::Object(m)
}

pub fn url(req: &Request<Incoming>) -> String {
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("localhost");
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    format!("http://{host}{pq}")
}

pub fn base(req: &Request<Incoming>, peer: SocketAddr) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("args".into(), args(req.uri().query()));
    m.insert("headers".into(), header_object(req.headers()));
    m.insert("origin".into(), Value::String(peer.ip().to_string()));
    m.insert("url".into(), Value::String(url(req)));
    m
}

pub async fn echo(req: Request<Incoming>, peer: SocketAddr, with_body: bool) -> Response<Body> {
    let mut m = base(&req, peer);
    m.insert("method".into(), Value::String(req.method().to_string()));
    if with_body {
        let body = match Limited::new(req.into_body(), MAX_ECHO_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return super::respond(
                    http::StatusCode::PAYLOAD_TOO_LARGE,
                    "text/plain",
                    "echo body over 16 MiB\n",
                );
            }
        };
        let data = String::from_utf8_lossy(&body).into_owned();
        let parsed = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
        m.insert("data".into(), Value::String(data));
        m.insert("json".into(), parsed);
        m.insert("form".into(), json!({}));
        m.insert("files".into(), json!({}));
    }
    json(&Value::Object(m))
}

pub fn headers(req: &Request<Incoming>) -> Response<Body> {
    json(&json!({ "headers": header_object(req.headers()) }))
}

pub fn sample_json() -> Response<Body> {
    json(&json!({
        "slideshow": {
            "author": "Yours Truly",
            "date": "date of publication",
            "slides": [
                { "title": "Wake up to WonderWidgets!", "type": "all" },
                { "items": ["Why <em>WonderWidgets</em> are great", "Who <em>buys</em> WonderWidgets"],
                  "title": "Overview", "type": "all" }
            ],
            "title": "Sample Slide Show"
        }
    }))
}
