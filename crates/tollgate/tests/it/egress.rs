//! Who tollgate may reach: never itself (loops) or its admin API, whatever the spelling;
//! address rules after DNS; CONNECT ports; the admin token.

use crate::support::*;
use http::{Request, StatusCode};

async fn forward(gw: &tollgate::Gateway, url: &str) -> Got {
    // Absolute-form through the proxy, as `curl -x` sends it.
    let mut s = tokio::net::TcpStream::connect(gw.proxy_addr).await.unwrap();
    use tokio::io::AsyncWriteExt;
    let authority = url.split('/').nth(2).unwrap();
    s.write_all(
        format!("GET {url} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    parse_response(s).await
}

async fn parse_response(mut s: tokio::net::TcpStream) -> Got {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("").split(' ').nth(1).unwrap_or("0");
    let mut headers = http::HeaderMap::new();
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            headers.append(
                http::HeaderName::from_bytes(n.trim().as_bytes()).unwrap(),
                v.trim().parse().unwrap(),
            );
        }
    }
    Got {
        status: StatusCode::from_u16(status.parse().unwrap()).unwrap(),
        headers,
        body: bytes::Bytes::from(body.to_owned()),
    }
}

#[tokio::test]
async fn tollgate_never_calls_itself_in_any_mode_or_spelling() {
    let gw = gateway("").await;
    let port = gw.proxy_addr.port();
    let c = client();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("127.1:{port}"),
        format!("2130706433:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
    ] {
        let got = forward(&gw, &format!("http://{host}/x")).await;
        assert_eq!(got.status, StatusCode::LOOP_DETECTED, "forward {host}");
        assert_eq!(got.error_code().as_deref(), Some("loop_detected"));
        let got = send(
            &c,
            Request::get(format!("http://{}/x", gw.proxy_addr))
                .header("x-tollgate-host", &host)
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, StatusCode::LOOP_DETECTED, "header {host}");
    }
    // A name that resolves to the proxy's address is caught after DNS.
    let got = forward(&gw, &format!("http://localhost:{port}/x")).await;
    assert_eq!(got.status, StatusCode::LOOP_DETECTED);
    // No connections to itself were made or pooled.
    let text = metrics_when(&gw, |t| t.contains("loop_detected")).await;
    assert!(text.contains("tollgate_upstream_connections 0"), "{text}");
}

#[tokio::test]
async fn a_request_that_comes_back_with_this_via_is_a_loop() {
    // Two gateways: A forwards to B, B routes back to A. A sees its own Via come back.
    let a = gateway("").await;
    let b = gateway(&format!(
        "routes:\n  - prefix: /\n    upstream: http://{}\n",
        a.proxy_addr
    ))
    .await;
    let got = send(
        &client(),
        via_header(&a, b.proxy_addr, "/anything")
            .body(empty())
            .unwrap(),
    )
    .await;
    // B's route targets A's own address from B's point of view: that is allowed (it is
    // not B); A then sees its own Via pseudonym and stops the loop.
    assert_eq!(got.status, StatusCode::LOOP_DETECTED, "{:?}", got.body);
    assert_eq!(got.error_code().as_deref(), Some("loop_detected"));
}

#[tokio::test]
async fn the_admin_api_is_never_reachable_through_the_proxy() {
    let gw = gateway(ANY_CONNECT_PORT).await;
    let admin = gw.admin_addr;
    let c = client();
    // Forward proxy, POST /reload.
    let mut s = tokio::net::TcpStream::connect(gw.proxy_addr).await.unwrap();
    use tokio::io::AsyncWriteExt;
    s.write_all(format!("POST http://{admin}/reload HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let got = parse_response(s).await;
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(got.error_code().as_deref(), Some("address_denied"));
    // Header mode, GET /config, with a spelling of the address.
    let got = send(
        &c,
        Request::get(format!("http://{}/config", gw.proxy_addr))
            .header("x-tollgate-host", format!("0x7f000001:{}", admin.port()))
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.error_code().as_deref(), Some("address_denied"));
    // CONNECT.
    let (_, answer) = connect_via(gw.proxy_addr, &admin.to_string()).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("address_denied"), "{answer}");
    let (_, answer) = connect_via(gw.proxy_addr, &gw.proxy_addr.to_string()).await;
    assert!(answer.starts_with("HTTP/1.1 508"), "{answer}");
}

/// `GET /x` in header mode to `host:port` over plain HTTP.
fn header_get(gw: &tollgate::Gateway, host: &str, port: u16) -> Request<tollgate::body::Body> {
    Request::get(format!("http://{}/x", gw.proxy_addr))
        .header("x-tollgate-host", format!("{host}:{port}"))
        .header("x-tollgate-scheme", "http")
        .body(empty())
        .unwrap()
}

/// Every spelling of the unspecified address, which the kernel connects to loopback.
const UNSPECIFIED: &[&str] = &[
    "0.0.0.0",
    "0",
    "0x0",
    "00",
    "0.0",
    "[::]",
    "[::ffff:0.0.0.0]",
];

#[tokio::test]
async fn the_unspecified_address_reaches_neither_the_admin_api_nor_the_proxy() {
    // Listeners on 127.0.0.1, no admin token: connecting to 0.0.0.0 reaches them, so
    // the check must judge 0.0.0.0 as the loopback address it is.
    let gw = gateway(ANY_CONNECT_PORT).await;
    let (admin, proxy) = (gw.admin_addr.port(), gw.proxy_addr.port());
    let c = client();
    for host in UNSPECIFIED {
        // Header mode, GET /config.
        let got = send(
            &c,
            Request::get(format!("http://{}/config", gw.proxy_addr))
                .header("x-tollgate-host", format!("{host}:{admin}"))
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap(),
        )
        .await;
        if host.starts_with('[') && !host.contains('.') {
            // `::` reaches ::1, where nothing of this gateway listens.
            assert_eq!(got.error_code().as_deref(), Some("connect_error"), "{host}");
            continue;
        }
        assert_eq!(
            got.status,
            StatusCode::FORBIDDEN,
            "header {host}: {:?}",
            got.body
        );
        assert_eq!(got.error_code().as_deref(), Some("address_denied"));
        // Forward proxy, POST /reload.
        let mut s = tokio::net::TcpStream::connect(gw.proxy_addr).await.unwrap();
        use tokio::io::AsyncWriteExt;
        s.write_all(format!("POST http://{host}:{admin}/reload HTTP/1.1\r\nHost: {host}:{admin}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let got = parse_response(s).await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "forward {host}");
        assert_eq!(got.error_code().as_deref(), Some("address_denied"));
        // CONNECT to the admin API and to the proxy itself.
        let (_, answer) = connect_via(gw.proxy_addr, &format!("{host}:{admin}")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
        assert!(answer.contains("address_denied"), "{answer}");
        let (_, answer) = connect_via(gw.proxy_addr, &format!("{host}:{proxy}")).await;
        assert!(answer.starts_with("HTTP/1.1 508"), "{host}: {answer}");
    }
    let text = metrics_when(&gw, |t| t.contains("address_denied")).await;
    assert!(text.contains("tollgate_upstream_connections 0"), "{text}");
}

#[tokio::test]
async fn deny_rules_cover_the_unspecified_address() {
    let up = echo_upstream().await;
    let port = up.addr.port();
    let c = client();
    let get = |gw: &tollgate::Gateway, host: &str| header_get(gw, host, port);
    let listed = gateway("domains:\n  deny: ['127.0.0.1']\n").await;
    let cidr = gateway("egress:\n  deny: [127.0.0.0/8]\n").await;
    let open = gateway("").await;
    for host in ["0.0.0.0", "0", "[::ffff:0.0.0.0]"] {
        for gw in [&listed, &cidr] {
            let got = send(&c, get(gw, host)).await;
            assert_eq!(got.status, StatusCode::FORBIDDEN, "{host}");
            assert_eq!(got.error_code().as_deref(), Some("address_denied"));
        }
        // Without a rule, the same target is a local upstream like any other.
        assert_eq!(
            send(&c, get(&open, host)).await.status,
            StatusCode::OK,
            "{host}"
        );
    }
}

#[tokio::test]
async fn ip_literal_deny_entries_match_every_spelling_and_every_name() {
    let up = echo_upstream().await;
    let port = up.addr.port();
    let gw = gateway(&format!(
        "domains:\n  deny: ['127.0.0.1']\n{ANY_CONNECT_PORT}"
    ))
    .await;
    let c = client();
    for host in [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
    ] {
        let got = send(
            &c,
            Request::get(format!("http://{}/x", gw.proxy_addr))
                .header("x-tollgate-host", format!("{host}:{port}"))
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.error_code().as_deref(), Some("domain_denied"), "{host}");
    }
    // `localhost` passes the host list but resolves to 127.0.0.1: denied after DNS.
    let got = forward(&gw, &format!("http://localhost:{port}/x")).await;
    assert_eq!(got.error_code().as_deref(), Some("address_denied"));
    let (_, answer) = connect_via(gw.proxy_addr, &format!("localhost:{port}")).await;
    assert!(answer.contains("address_denied"), "{answer}");
}

#[tokio::test]
async fn address_rules_apply_after_resolution() {
    let up = echo_upstream().await;
    let port = up.addr.port();
    let c = client();
    let get = |gw: &tollgate::Gateway, host: &str| header_get(gw, host, port);
    // The production switch denies loopback by any name.
    let strict = gateway("egress:\n  deny_private: true\n").await;
    for host in ["localhost", "127.0.0.1", "127.9.9.9"] {
        let got = send(&c, get(&strict, host)).await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "{host}");
        assert_eq!(got.error_code().as_deref(), Some("address_denied"));
    }
    // An allow range wins over the deny.
    let allowed = gateway("egress:\n  deny_private: true\n  allow: [127.0.0.1/32]\n").await;
    assert_eq!(
        send(&c, get(&allowed, "localhost")).await.status,
        StatusCode::OK
    );
    // CIDR deny.
    let cidr = gateway("egress:\n  deny: [127.0.0.0/8]\n").await;
    assert_eq!(
        send(&c, get(&cidr, "localhost"))
            .await
            .error_code()
            .as_deref(),
        Some("address_denied")
    );
    // Metadata endpoints are denied by default (no connection is attempted).
    let default = gateway("").await;
    let got = send(
        &c,
        Request::get(format!("http://{}/latest/meta-data/", default.proxy_addr))
            .header("x-tollgate-host", "169.254.169.254")
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.error_code().as_deref(), Some("address_denied"));
    assert!(got.error_message().contains("169.254.169.254"));
}

#[tokio::test]
async fn connect_reaches_port_443_only_by_default() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let closed = tokio::net::TcpListener::bind(local0())
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    // Open and closed ports answer the same: the tunnel is no port scanner.
    for target in [up.addr, closed] {
        let (_, answer) = connect_via(gw.proxy_addr, &target.to_string()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("x-tollgate-error: port_denied"), "{answer}");
    }
    let ranged = gateway(&format!(
        "egress:\n  connect_ports: [443, \"{}-{}\"]\n",
        up.addr.port(),
        up.addr.port()
    ))
    .await;
    let (_, answer) = connect_via(ranged.proxy_addr, &up.addr.to_string()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn the_admin_token_protects_all_but_the_probes() {
    // SAFETY: only this test uses this variable.
    unsafe { std::env::set_var("TOLLGATE_TEST_ADMIN_TOKEN", "s3cret-token") };
    let gw = gateway("admin:\n  token: ${TOLLGATE_TEST_ADMIN_TOKEN}\n").await;
    let c = client();
    let admin = |path: &str, token: Option<&str>| {
        let mut r = Request::get(format!("http://{}{path}", gw.admin_addr));
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.body(empty()).unwrap()
    };
    for path in ["/healthz", "/readyz"] {
        assert_eq!(send(&c, admin(path, None)).await.status, StatusCode::OK);
    }
    // The six protected endpoints (docs/configuration.md, `admin.token`).
    for path in [
        "/metrics",
        "/config",
        "/policies",
        "/discover",
        "/remedy-stats",
    ] {
        let got = send(&c, admin(path, None)).await;
        assert_eq!(got.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(got.header("www-authenticate"), Some("Bearer"));
        let got = send(&c, admin(path, Some("wrong"))).await;
        assert_eq!(got.status, StatusCode::UNAUTHORIZED, "{path}");
        let got = send(&c, admin(path, Some("s3cret-token"))).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
    }
    let got = send(
        &c,
        Request::post(format!("http://{}/reload", gw.admin_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::UNAUTHORIZED);
    // The token never shows in /config: the reference it was written as does.
    let config = send(&c, admin("/config", Some("s3cret-token"))).await;
    let text = String::from_utf8_lossy(&config.body);
    assert!(
        !text.contains("s3cret-token") && text.contains("${TOLLGATE_TEST_ADMIN_TOKEN}"),
        "{text}"
    );
}
