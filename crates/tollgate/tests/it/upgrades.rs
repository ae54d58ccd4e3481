//! HTTP/1.1 upgrades (WebSocket) in every routing mode: the provider's 101 reaches the
//! client, then bytes flow both ways; the domain lists apply; a drain lets them finish.

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A WebSocket-like upstream: records the request head, answers 101, then echoes bytes.
async fn echo_after_101() -> (Server, Heads) {
    let heads: Heads = Default::default();
    let h = heads.clone();
    let server = raw_upstream(move |mut s| {
        let heads = h.clone();
        async move {
            let head = read_head(&mut s).await;
            heads.lock().unwrap().push(head);
            let _ = s
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
                .await;
            let mut buf = [0u8; 1024];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    })
    .await;
    (server, heads)
}

const WS: &str = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

/// Upgrades through the gateway and checks the relay both ways.
async fn upgrade_and_echo(proxy: std::net::SocketAddr, head: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let answer = read_head(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(
        lower.contains("upgrade: websocket") && lower.contains("connection: upgrade"),
        "{answer}"
    );
    assert!(
        lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{answer}"
    );
    for msg in [&b"ping"[..], b"second message"] {
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, msg);
    }
    s
}

#[tokio::test]
async fn websocket_upgrades_work_in_every_mode() {
    let (up, heads) = echo_after_101().await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /ws\n    upstream: http://{}/socket\n",
        up.addr
    ))
    .await;
    let a = up.addr;
    for (mode, head) in [
        (
            "header",
            format!(
                "GET /socket/chat HTTP/1.1\r\nHost: gw\r\nx-tollgate-host: {a}\r\nx-tollgate-scheme: http\r\n{WS}\r\n"
            ),
        ),
        (
            "forward proxy",
            format!("GET http://{a}/socket/chat HTTP/1.1\r\nHost: {a}\r\n{WS}\r\n"),
        ),
        (
            "route",
            format!("GET /ws/chat HTTP/1.1\r\nHost: gw\r\n{WS}\r\n"),
        ),
    ] {
        let s = upgrade_and_echo(gw.proxy_addr, &head).await;
        drop(s);
        let seen = heads.lock().unwrap().pop().unwrap();
        let lower = seen.to_ascii_lowercase();
        assert!(
            seen.starts_with("GET /socket/chat HTTP/1.1\r\n"),
            "{mode}: {seen}"
        );
        assert!(lower.contains("upgrade: websocket\r\n"), "{mode}: {seen}");
        assert!(lower.contains("connection: upgrade\r\n"), "{mode}: {seen}");
        assert!(
            lower.contains("sec-websocket-key: dghlihnhbxbszsbub25jzq==\r\n"),
            "{mode}: {seen}"
        );
        assert!(lower.contains(&format!("host: {a}\r\n")), "{mode}: {seen}");
    }
}

#[tokio::test]
async fn upgrades_obey_the_domain_lists_and_finish_during_a_drain() {
    let (up, _heads) = echo_after_101().await;
    let denied = gateway("domains:\n  deny: ['127.0.0.1']\n").await;
    let mut s = TcpStream::connect(denied.proxy_addr).await.unwrap();
    s.write_all(format!("GET http://{}/x HTTP/1.1\r\nHost: a\r\n{WS}\r\n", up.addr).as_bytes())
        .await
        .unwrap();
    let answer = read_head(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    let gw = gateway("").await;
    let mut s = upgrade_and_echo(
        gw.proxy_addr,
        &format!("GET http://{}/x HTTP/1.1\r\nHost: a\r\n{WS}\r\n", up.addr),
    )
    .await;
    gw.shutdown();
    s.write_all(b"after shutdown").await.unwrap();
    let mut back = [0u8; 14];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(
        &back, b"after shutdown",
        "an open upgraded connection keeps working while draining"
    );
    drop(s);
    gw.wait().await;
}

#[tokio::test]
async fn a_refused_upgrade_is_relayed_as_a_response() {
    let up = raw_upstream(|mut s| async move {
        let _ = read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 3\r\n\r\nno!")
            .await;
    })
    .await;
    let gw = gateway("").await;
    let answer = raw_exchange(
        gw.proxy_addr,
        format!(
            "GET http://{}/x HTTP/1.1\r\nHost: a\r\n{WS}Connection: close\r\n\r\n",
            up.addr
        )
        .as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 426"), "{answer}");
    assert!(answer.ends_with("no!"), "{answer}");
}
