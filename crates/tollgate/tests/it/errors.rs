//! Every proxy-made error: status, `x-tollgate-error` code and JSON body.

use crate::support::*;
use http::{Request, StatusCode};

async fn expect(got: Got, status: u16, code: &str) {
    assert_eq!(got.status.as_u16(), status, "{:?}", got.body);
    assert_eq!(got.error_code().as_deref(), Some(code));
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert!(got.header("x-tollgate-request-id").is_some());
}

#[tokio::test]
async fn missing_and_bad_targets() {
    let gw = gateway("").await;
    let c = client();
    let base = || Request::get(format!("http://{}/x", gw.proxy_addr));
    expect(
        send(&c, base().body(empty()).unwrap()).await,
        400,
        "missing_target",
    )
    .await;
    for host in [
        "bad host",
        "a@b.com",
        "host:99999",
        "host:",
        "host:abc",
        "x/y",
        "",
    ] {
        let got = send(
            &c,
            base()
                .header("x-tollgate-host", host)
                .body(empty())
                .unwrap(),
        )
        .await;
        expect(got, 400, "bad_target").await;
    }
    let got = send(
        &c,
        base()
            .header("x-tollgate-host", "example.com")
            .header("x-tollgate-scheme", "ftp")
            .body(empty())
            .unwrap(),
    )
    .await;
    expect(got, 400, "bad_target").await;
    let answer = raw_exchange(
        gw.proxy_addr,
        b"GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("x-tollgate-error: bad_target"),
        "{answer}"
    );
}

#[tokio::test]
async fn dns_connect_and_reset_errors() {
    let gw = gateway("").await;
    let c = client();
    let req = |host: &str| {
        Request::get(format!("http://{}/", gw.proxy_addr))
            .header("x-tollgate-host", host)
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap()
    };
    expect(
        send(&c, req("no-such-host.invalid")).await,
        502,
        "dns_error",
    )
    .await;
    let closed = tokio::net::TcpListener::bind(local0())
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    expect(
        send(&c, req(&closed.to_string())).await,
        502,
        "connect_error",
    )
    .await;
    let reset = reset_upstream().await;
    expect(
        send(&c, req(&reset.addr.to_string())).await,
        502,
        "connect_error",
    )
    .await;
}

#[tokio::test]
async fn tls_errors() {
    let pki = pki();
    let up = tls_upstream(&pki, &[b"http/1.1"], echo_json).await;
    let gw = gateway("").await;
    // Certificate from an unknown CA: rejected (verification is on by default).
    let req = Request::get(format!("http://{}/", gw.proxy_addr))
        .header("x-tollgate-host", format!("localhost:{}", up.addr.port()))
        .body(empty())
        .unwrap();
    expect(send(&client(), req).await, 502, "tls_error").await;
}

#[tokio::test]
async fn upstream_timeouts_for_response_and_connect() {
    let stall = stall_upstream().await;
    // The response timeout also bounds connecting, so the connect timeout is the shorter
    // one: with equal limits, which fires first is a race on tokio's 1 ms timer tick.
    let gw = gateway("upstream:\n  response_timeout: 600ms\n  connect_timeout: 300ms\n").await;
    let c = client();
    let got = send(&c, via_header(&gw, stall.addr, "/").body(empty()).unwrap()).await;
    expect(got, 504, "upstream_timeout").await;
    // A TLS handshake that never completes is part of connecting.
    let req = Request::get(format!("http://{}/", gw.proxy_addr))
        .header("x-tollgate-host", stall.addr.to_string())
        .body(empty())
        .unwrap();
    let got = send(&c, req).await;
    assert!(got.error_message().contains("connect"), "{:?}", got.body);
    expect(got, 504, "upstream_timeout").await;
}

#[tokio::test]
async fn a_policys_connect_timeout_bounds_its_own_attempts_only() {
    // A TLS handshake that never completes: connecting lasts until a connect timeout.
    let stall = stall_upstream().await;
    let gw = gateway(
        "upstream:\n  connect_timeout: 2s\n  response_timeout: 5s\npolicies:\n  - name: p\n    match: { host: localhost }\n    timeouts: { connect: 150ms }\n",
    )
    .await;
    let c = client();
    let to = |host: String| {
        Request::get(format!("http://{}/", gw.proxy_addr))
            .header("x-tollgate-host", host)
            .body(empty())
            .unwrap()
    };
    let port = stall.addr.port();
    // `localhost` is the policy's; `127.0.0.1`, the same server, is not.
    for (host, limit) in [("localhost", "150ms"), ("127.0.0.1", "2s")] {
        let got = send(&c, to(format!("{host}:{port}"))).await;
        let says = format!("did not connect within {limit}");
        assert!(got.error_message().contains(&says), "{:?}", got.body);
        expect(got, 504, "upstream_timeout").await;
    }
}

#[tokio::test]
async fn domain_lists_apply_to_every_mode() {
    let up = echo_upstream().await;
    let gw = gateway(&format!(
        "domains:\n  allow: ['*.allowed.test', '127.0.0.1']\n  deny: ['bad.allowed.test']\nroutes:\n  - prefix: /r\n    upstream: http://localhost:{}\n",
        up.addr.port()
    ))
    .await;
    let c = client();
    let hdr = |h: &str| {
        Request::get(format!("http://{}/", gw.proxy_addr))
            .header("x-tollgate-host", h)
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap()
    };
    expect(
        send(&c, hdr("bad.allowed.test")).await,
        403,
        "domain_denied",
    )
    .await;
    expect(send(&c, hdr("example.com")).await, 403, "domain_denied").await;
    assert_eq!(
        send(&c, hdr(&up.addr.to_string())).await.status,
        StatusCode::OK,
        "allowed IP"
    );
    // Route to localhost: not on the allow list.
    let got = send(
        &c,
        Request::get(format!("http://{}/r/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    expect(got, 403, "domain_denied").await;
    // Forward-proxy mode.
    let answer = raw_exchange(
        gw.proxy_addr,
        b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("x-tollgate-error: domain_denied"),
        "{answer}"
    );
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let up = echo_upstream().await;
    let gw = gateway("listen:\n  max_header_bytes: 4KiB\n").await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/")
            .header("x-big", "a".repeat(5000))
            .body(empty())
            .unwrap(),
    )
    .await;
    expect(got, 431, "headers_too_large").await;
    // Just under the limit passes.
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/")
            .header("x-big", "a".repeat(3000))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
}

#[tokio::test]
async fn malformed_requests_are_refused_without_harm() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    for garbage in [
        &b"NOT HTTP AT ALL\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nbad header line\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"\x00\x01\x02\x03",
    ] {
        let answer = raw_exchange(gw.proxy_addr, garbage).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
            "{answer}"
        );
    }
    // The gateway still serves.
    assert_eq!(
        send(
            &client(),
            via_header(&gw, up.addr, "/").body(empty()).unwrap()
        )
        .await
        .status,
        StatusCode::OK
    );
}
