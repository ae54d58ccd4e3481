//! Wire conformance, table-driven: every routing mode (header, forward proxy, route,
//! aggregate no-op) × path (no policy; a matched policy that changes nothing, with a
//! layer, so on the engine's boxed path, or plain, so in the request's own future) × upstream
//! (HTTP/1.1, HTTP/2 over TLS, HTTP/1.1 over TLS). For each, the provider must get the
//! client's request as sent: method, path and query, the end-to-end headers in order
//! (repeated ones too), the body byte for byte, and the declared trailers. One table of
//! every mismatch, so a regression names its topology.
//!
//! Both ends here read headers into hyper's `HeaderMap`, which keeps a repeated name's
//! values together; the byte-level order on an HTTP/1.1 connection is held by
//! transparency.rs's raw-socket test.

use crate::support::*;
use bytes::Bytes;
use http::Request;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tollgate::body::Body;

/// What the upstream saw, with the trailers (`echo_json` drops them).
async fn echo_with_trailers(req: Request<hyper::body::Incoming>) -> http::Response<Body> {
    let (parts, body) = req.into_parts();
    let collected = body.collect().await.ok();
    let trailers: Vec<Value> = collected
        .as_ref()
        .and_then(|c| c.trailers())
        .map(|t| {
            t.iter()
                .map(|(n, v)| json!([n.as_str(), v.to_str().unwrap_or("")]))
                .collect()
        })
        .unwrap_or_default();
    let body = collected.map(|c| c.to_bytes()).unwrap_or_default();
    let headers: Vec<Value> = parts
        .headers
        .iter()
        .map(|(n, v)| json!([n.as_str(), v.to_str().unwrap_or("")]))
        .collect();
    let seen = json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or(""),
        "version": format!("{:?}", parts.version),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
        "trailers": trailers,
    });
    http::Response::new(tollgate::body::full(seen.to_string()))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Header,
    Forward,
    Route,
    AggregateNoOp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Up {
    H1,
    H2Tls,
    H1Tls,
}

const BODY: &str = "line one\n\u{2713} {\"n\": 1.50}\r\nend";
/// The client's end-to-end headers, in order (a repeated one, mixed case values).
/// `trailer` declares the trailer field (RFC 9110 §6.6.2): an HTTP/1.1 hop sends only
/// declared trailer fields.
const SENT: [(&str, &str); 6] = [
    ("x-wire-a", "1"),
    ("x-wire-a", "3"),
    ("x-wire-b", "Two Words"),
    ("content-type", "text/plain; charset=utf-8"),
    ("x-wire-c", "\"quoted\", list"),
    ("trailer", "x-wire-sum"),
];

fn body_with_trailers() -> Body {
    let frames = vec![
        Ok::<_, tollgate::body::BoxError>(Frame::data(Bytes::from_static(BODY.as_bytes()))),
        Ok(Frame::trailers({
            let mut t = http::HeaderMap::new();
            t.insert("x-wire-sum", "42".parse().unwrap());
            t
        })),
    ];
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
}

/// Sends the request in `mode` and returns what the upstream saw.
async fn exchange(
    gw: &tollgate::Gateway,
    mode: Mode,
    up: Up,
    authority: &str,
) -> Result<Value, String> {
    let path = "/wire/p?q=1&q=2&e=%20";
    let got = match mode {
        Mode::Header | Mode::Route | Mode::AggregateNoOp => {
            let uri = match mode {
                Mode::Header => format!("http://{}{path}", gw.proxy_addr),
                Mode::Route => format!("http://{}/r{path}", gw.proxy_addr),
                _ => format!("http://{}/agg?q=1&q=2&e=%20", gw.proxy_addr),
            };
            let mut b = Request::post(uri);
            if mode == Mode::Header {
                b = b.header("x-tollgate-host", authority);
                let scheme = if up == Up::H1 { "http" } else { "https" };
                b = b.header("x-tollgate-scheme", scheme);
            }
            for (n, v) in SENT {
                b = b.header(n, v);
            }
            // HTTP/2 from the client, so that the request can carry trailers.
            let resp = h2c_client()
                .request(b.body(body_with_trailers()).unwrap())
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
            }
            body
        }
        Mode::Forward => {
            // Absolute-form over HTTP/1.1, a chunked body with a trailer.
            let mut head =
                format!("POST http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\n");
            for (n, v) in SENT {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
            let raw = format!(
                "{head}{:x}\r\n{BODY}\r\n0\r\nx-wire-sum: 42\r\n\r\n",
                BODY.len()
            );
            let answer = raw_exchange(gw.proxy_addr, raw.as_bytes()).await;
            let (head, body) = answer.split_once("\r\n\r\n").ok_or("no answer")?;
            if !head.starts_with("HTTP/1.1 200") {
                return Err(head.to_owned());
            }
            // The answer is chunked or sized; the JSON is between the first `{` and the last `}`.
            let json =
                &body[body.find('{').ok_or("no JSON")?..=body.rfind('}').ok_or("no JSON")?];
            Bytes::from(json.to_owned())
        }
    };
    serde_json::from_slice(&got).map_err(|e| format!("{e}: {got:?}"))
}

#[tokio::test]
async fn every_topology_relays_the_request_as_sent() {
    let pki = pki();
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &pki.ca_pem).unwrap();
    let h1 = upstream(echo_with_trailers).await;
    let h2_tls = tls_upstream(&pki, &[b"h2"], echo_with_trailers).await;
    let h1_tls = tls_upstream(&pki, &[b"http/1.1"], echo_with_trailers).await;
    let mut mismatches = Vec::new();
    let mut ran = 0;
    for up in [Up::H1, Up::H2Tls, Up::H1Tls] {
        let (scheme, authority, version) = match up {
            Up::H1 => ("http", format!("127.0.0.1:{}", h1.addr.port()), "HTTP/1.1"),
            Up::H2Tls => (
                "https",
                format!("localhost:{}", h2_tls.addr.port()),
                "HTTP/2.0",
            ),
            Up::H1Tls => (
                "https",
                format!("localhost:{}", h1_tls.addr.port()),
                "HTTP/1.1",
            ),
        };
        // Matched, and changing nothing: a chain with a layer (an attempt stack) runs on
        // the engine's boxed future, a plain one (a limit never reached) in the request's.
        for (path, policies) in [
            ("no policy", ""),
            (
                "layered policy",
                "policies:\n  - name: noop\n    timeouts: {response: 30s}\n",
            ),
            (
                "plain policy",
                "policies:\n  - name: noop\n    rate_limit: {limit: 1000000, window: second}\n",
            ),
        ] {
            let gw = gateway(&format!(
                "upstream:\n  tls:\n    extra_ca_file: {ca}\nroutes:\n  - prefix: /r\n    upstream: {scheme}://{authority}\nendpoints:\n  - path: /agg\n    method: POST\n    encoding: no-op\n    headers: ['*']\n    query: ['*']\n    backends:\n      - url: {scheme}://{authority}/wire/p\n        method: POST\n{policies}",
                ca = ca.path().display()
            ))
            .await;
            for mode in [
                Mode::Header,
                Mode::Forward,
                Mode::Route,
                Mode::AggregateNoOp,
            ] {
                if mode == Mode::Forward && up != Up::H1 {
                    // A client reaches an https provider through a proxy with CONNECT (a
                    // tunnel: the bytes are the client's own), not in absolute form.
                    continue;
                }
                ran += 1;
                let at = format!("{mode:?} × {path} × {up:?}");
                let seen = match exchange(&gw, mode, up, &authority).await {
                    Ok(s) => s,
                    Err(e) => {
                        mismatches.push(format!("{at}: {e}"));
                        continue;
                    }
                };
                let mut check = |what: &str, got: Value, want: Value| {
                    if got != want {
                        mismatches.push(format!("{at}: {what}: got {got}, want {want}"));
                    }
                };
                check("method", seen["method"].clone(), json!("POST"));
                check("path", seen["path"].clone(), json!("/wire/p?q=1&q=2&e=%20"));
                check("version", seen["version"].clone(), json!(version));
                let mut wire: Vec<Value> = seen["headers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|h| {
                        let n = h[0].as_str().unwrap();
                        n.starts_with("x-wire-") || n == "content-type" || n == "trailer"
                    })
                    .cloned()
                    .collect();
                let mut sent: Vec<Value> = SENT.iter().map(|(n, v)| json!([n, v])).collect();
                if mode == Mode::AggregateNoOp {
                    // The relay makes its own request from the declared headers (`*`):
                    // the same fields and values, in its own order.
                    let key = |v: &Value| v.to_string();
                    wire.sort_by_key(key);
                    sent.sort_by_key(key);
                }
                check("headers", json!(wire), json!(sent));
                check("body", seen["body"].clone(), json!(BODY));
                check(
                    "trailers",
                    seen["trailers"].clone(),
                    json!([["x-wire-sum", "42"]]),
                );
            }
        }
    }
    assert_eq!(ran, 30, "the matrix's size");
    assert!(
        mismatches.is_empty(),
        "{} of {ran} topologies differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
