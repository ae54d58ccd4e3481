//! What goes on the wire to the provider, checked byte for byte against raw-socket
//! upstreams in every routing mode: origin-form request lines, the exact header lines,
//! framing (Content-Length beside chunked), the Host rules, dot segments, HTTP/2 without
//! a `host` field.

use crate::support::*;
use http::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The three ways an application reaches an upstream, each as the raw request head a
/// client writes (path `/v1/items?x=1&y=%20z` on the upstream).
fn modes(up: std::net::SocketAddr) -> Vec<(&'static str, String)> {
    let extra = "X-Multi: one\r\nX-Multi: two\r\nAccept: */*\r\nConnection: keep-alive, X-Hop\r\nX-Hop: must go\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nX-Tollgate-Anything: internal\r\n";
    vec![
        (
            "header",
            format!(
                "GET /v1/items?x=1&y=%20z HTTP/1.1\r\nHost: tollgate.local\r\nX-Tollgate-Host: {up}\r\nX-Tollgate-Scheme: http\r\n{extra}\r\n"
            ),
        ),
        (
            "forward proxy",
            format!("GET http://{up}/v1/items?x=1&y=%20z HTTP/1.1\r\nHost: {up}\r\n{extra}\r\n"),
        ),
        (
            "route",
            format!("GET /svc/items?x=1&y=%20z HTTP/1.1\r\nHost: tollgate.local\r\n{extra}\r\n"),
        ),
    ]
}

/// Sends a raw request head on a fresh connection and returns the response head.
async fn raw_head(proxy: std::net::SocketAddr, head: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 8192];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before a response head: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn every_mode_sends_origin_form_and_exactly_the_end_to_end_headers() {
    let (up, heads) = recording_upstream().await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /svc\n    upstream: http://{}/v1\n",
        up.addr
    ))
    .await;
    for (mode, request) in modes(up.addr) {
        heads.lock().unwrap().clear();
        let answer = raw_head(gw.proxy_addr, &request).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{mode}: {answer}");
        let head = heads
            .lock()
            .unwrap()
            .pop()
            .expect("the upstream got a request");
        let lines = head_lines(&head);
        // RFC 9112 §3.2.1: origin-form to an origin server, never absolute-form.
        assert_eq!(lines[0], "GET /v1/items?x=1&y=%20z HTTP/1.1", "{mode}");
        let via = lines.last().unwrap();
        assert!(via.starts_with("via: 1.1 tollgate-"), "{mode}: {head}");
        assert_eq!(
            &lines[1..lines.len() - 1],
            [
                format!("host: {}", up.addr).as_str(),
                "x-multi: one",
                "x-multi: two",
                "accept: */*",
            ],
            "{mode}: exactly the end-to-end headers, in order:\n{head}"
        );
    }
}

#[tokio::test]
async fn content_length_beside_chunked_never_truncates_the_body() {
    // RFC 9112 §6.3: Transfer-Encoding wins; the relayed message must not keep the
    // Content-Length, or the client reads 5 bytes and believes it has the whole body.
    let up = raw_upstream(|mut s| async move {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n")
            .await;
    })
    .await;
    let gw = gateway("").await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/").body(empty()).unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body, "abcdefghijklmnopqrstuvwxyz");
    assert_ne!(got.header("content-length"), Some("5"));
}

#[tokio::test]
async fn malformed_client_requests_are_400_not_502() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let target = format!(
        "X-Tollgate-Host: {}\r\nX-Tollgate-Scheme: http\r\n",
        up.addr
    );
    // A chunked body whose chunk size is not hex: the client's fault.
    let bad_chunk = format!(
        "POST /x HTTP/1.1\r\nHost: a\r\n{target}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
    );
    let no_host = format!("GET /x HTTP/1.1\r\n{target}\r\n");
    let two_hosts = format!("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n{target}\r\n");
    for (what, req) in [
        ("malformed chunked body", bad_chunk),
        ("no Host", no_host),
        ("two Hosts", two_hosts),
    ] {
        let answer = raw_exchange(gw.proxy_addr, req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{what}: {answer}");
        assert!(
            answer.contains("x-tollgate-error: bad_request"),
            "{what}: {answer}"
        );
    }
    // HTTP/1.0 has no Host requirement.
    let answer = raw_exchange(
        gw.proxy_addr,
        format!("GET /x HTTP/1.0\r\n{target}\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
}

#[tokio::test]
async fn dot_segments_cannot_escape_a_route() {
    let (up, heads) = recording_upstream().await;
    let admin_like = echo_upstream().await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /svc\n    upstream: http://{}/base/v1\n",
        up.addr
    ))
    .await;
    let c = client();
    // Resolved before routing: `/svc/../../admin` is `/admin`, which no route serves.
    for path in [
        "/svc/../../admin",
        "/svc/%2e%2e/%2E%2E/admin",
        "/svc/./../admin",
    ] {
        let got = send(
            &c,
            Request::get(format!("http://{}{path}", gw.proxy_addr))
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(
            got.error_code().as_deref(),
            Some("missing_target"),
            "{path}"
        );
    }
    assert!(
        heads.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    // Inside the route, dot segments resolve and stay under the base path.
    let got = send(
        &c,
        Request::get(format!("http://{}/svc/a/../b/./c?q=1", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    let head = heads.lock().unwrap().pop().unwrap();
    assert_eq!(head_lines(&head)[0], "GET /base/v1/b/c?q=1 HTTP/1.1");
    // Header mode: the path the upstream gets is resolved too.
    let got = send(
        &c,
        via_header(&gw, admin_like.addr, "/public/../admin")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.json()["path"], "/admin");
}

#[tokio::test]
async fn http2_upstreams_get_authority_and_no_host_field() {
    let pki = pki();
    let up = tls_upstream(&pki, &[b"h2"], echo_json).await;
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &pki.ca_pem).unwrap();
    let gw = gateway(&format!(
        "upstream:\n  tls:\n    extra_ca_file: {}\n",
        ca.path().display()
    ))
    .await;
    let port = up.addr.port();
    for c in [client(), h2c_client()] {
        let got = send(
            &c,
            Request::get(format!("http://{}/h2", gw.proxy_addr))
                .header("x-tollgate-host", format!("localhost:{port}"))
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
        let seen = got.json();
        assert_eq!(seen["version"], "HTTP/2.0");
        assert_eq!(seen["uri"], format!("https://localhost:{port}/h2"));
        let hosts: Vec<_> = seen["headers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h[0] == "host")
            .collect();
        assert!(hosts.is_empty(), "no host field beside :authority: {seen}");
    }
}
