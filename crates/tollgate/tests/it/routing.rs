//! The four ways traffic gets in: header-routed, forward proxy, CONNECT, declared routes;
//! and HTTP/2 (h2c prior knowledge) from clients.

use crate::support::*;
use http::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn header_routed_defaults_and_explicit_scheme() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/v1/items?x=1")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["path"], "/v1/items?x=1");
    // Without x-tollgate-scheme the scheme is https: an http-only upstream fails the TLS handshake.
    let req = Request::get(format!("http://{}/", gw.proxy_addr))
        .header("x-tollgate-host", up.addr.to_string())
        .body(empty())
        .unwrap();
    let got = send(&client(), req).await;
    assert_eq!(got.error_code().as_deref(), Some("tls_error"));
}

#[tokio::test]
async fn forward_proxy_absolute_form() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let raw = format!(
        "GET http://{}/abs/path?q=1 HTTP/1.1\r\nHost: {}\r\nProxy-Connection: keep-alive\r\nConnection: close\r\n\r\n",
        up.addr, up.addr
    );
    let answer = raw_exchange(gw.proxy_addr, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"path\":\"/abs/path?q=1\""), "{answer}");
    assert!(!answer.contains("proxy-connection"), "{answer}");
    assert!(
        answer.contains(&format!("[\"host\",\"{}\"]", up.addr)),
        "{answer}"
    );
}

#[tokio::test]
async fn declared_routes_strip_the_prefix() {
    let up = echo_upstream().await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /svc/*\n    upstream: http://{a}/base\n  - prefix: /other\n    upstream: http://{a}\n",
        a = up.addr
    ))
    .await;
    let c = client();
    let get = |p: &str| {
        Request::get(format!("http://{}{p}", gw.proxy_addr))
            .body(empty())
            .unwrap()
    };
    let got = send(&c, get("/svc/users/1?x=y")).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["path"], "/base/users/1?x=y");
    assert_eq!(send(&c, get("/other/a")).await.json()["path"], "/a");
    assert_eq!(send(&c, get("/other")).await.json()["path"], "/");
    let miss = send(&c, get("/otherwise")).await;
    assert_eq!(miss.status, StatusCode::BAD_REQUEST);
    assert_eq!(miss.error_code().as_deref(), Some("missing_target"));
}

#[tokio::test]
async fn connect_tunnels_relay_bytes() {
    let up = echo_upstream().await;
    let gw = gateway(ANY_CONNECT_PORT).await;
    let (mut s, head) = connect_via(gw.proxy_addr, &up.addr.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Through the tunnel, speak HTTP to the upstream directly.
    s.write_all(b"GET /through/tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).await.unwrap();
    assert!(rest.contains("\"path\":\"/through/tunnel\""), "{rest}");
    // Control headers are not involved: the tunnel is a byte relay.
    assert!(rest.contains("[\"host\",\"x\"]"), "{rest}");
}

#[tokio::test]
async fn connect_errors_have_statuses() {
    let gw = gateway(&format!(
        "domains:\n  deny: ['denied.test']\n{ANY_CONNECT_PORT}"
    ))
    .await;
    let closed = tokio::net::TcpListener::bind(local0())
        .await
        .unwrap()
        .local_addr()
        .unwrap(); // dropped: refused
    for (target, status, code) in [
        ("denied.test:443".to_string(), "403", "domain_denied"),
        (closed.to_string(), "502", "connect_error"),
    ] {
        let (_, answer) = connect_via(gw.proxy_addr, &target).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
        assert!(
            answer.contains(&format!("x-tollgate-error: {code}")),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn h2c_clients_in_header_and_route_mode() {
    let up = echo_upstream().await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /r\n    upstream: http://{}\n",
        up.addr
    ))
    .await;
    let c = h2c_client();
    let got = send(
        &c,
        via_header(&gw, up.addr, "/h2?x=1").body(empty()).unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    let seen = got.json();
    assert_eq!(seen["path"], "/h2?x=1");
    assert_eq!(
        seen["version"], "HTTP/1.1",
        "plain-http upstreams are spoken to in HTTP/1.1"
    );
    let got = send(
        &c,
        Request::get(format!("http://{}/r/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.json()["path"], "/x");
    // Concurrent streams on one connection.
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (c, req) = (
            c.clone(),
            via_header(&gw, up.addr, &format!("/s/{i}"))
                .body(empty())
                .unwrap(),
        );
        tasks.push(tokio::spawn(async move {
            send(&c, req).await.json()["path"]
                .as_str()
                .unwrap()
                .to_owned()
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), format!("/s/{i}"));
    }
}
