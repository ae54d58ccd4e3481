//! `Expect: 100-continue` end to end: the client's `100 Continue` is the provider's, and a
//! provider that refuses on the headers alone never makes the client upload its body.

use crate::support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn upload_head(up: std::net::SocketAddr) -> String {
    format!(
        "PUT /upload HTTP/1.1\r\nHost: a\r\nx-tollgate-host: {up}\r\nx-tollgate-scheme: http\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n"
    )
}

/// Sends the upload head, expects `100 Continue`, sends the body, expects a final head
/// starting with `status`; the connection, for reading the body.
async fn upload_after_100(
    gw: &tollgate::Gateway,
    up: std::net::SocketAddr,
    status: &str,
) -> TcpStream {
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(upload_head(up).as_bytes()).await.unwrap();
    let interim = read_head(&mut s).await;
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    s.write_all(b"0123456789").await.unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with(status), "{head}");
    s
}

#[tokio::test]
async fn a_refusal_on_the_headers_reaches_the_client_before_any_body() {
    let up = raw_upstream(|mut s| async move {
        let head = read_head(&mut s).await;
        assert!(
            head.to_ascii_lowercase().contains("expect: 100-continue"),
            "forwarded: {head}"
        );
        let _ = s
            .write_all(
                b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope",
            )
            .await;
    })
    .await;
    let gw = gateway("").await;
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(upload_head(up.addr).as_bytes()).await.unwrap();
    // The body is not sent: the first thing back must be the provider's final answer.
    let head = read_head(&mut s).await;
    assert!(
        head.starts_with("HTTP/1.1 401"),
        "no 100 Continue made up by tollgate: {head}"
    );
}

#[tokio::test]
async fn the_providers_100_continue_releases_the_body() {
    let up = raw_upstream(|mut s| async move {
        let _ = read_head(&mut s).await;
        // Think a little before agreeing: tollgate must not answer in its place.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
        let mut body = [0u8; 10];
        let _ = s.read_exact(&mut body).await;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}",
            String::from_utf8_lossy(&body)
        );
        let _ = s.write_all(answer.as_bytes()).await;
    })
    .await;
    let gw = gateway("upstream:\n  expect_continue_timeout: 10s\n").await;
    let mut s = upload_after_100(&gw, up.addr, "HTTP/1.1 200").await;
    let mut body = [0u8; 10];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(&body, b"0123456789");
}

#[tokio::test]
async fn a_provider_that_never_says_100_gets_the_body_after_the_timeout() {
    // An HTTP/1.0-style server: ignores Expect and waits for the body.
    let up = raw_upstream(|mut s| async move {
        let _ = read_head(&mut s).await;
        let mut body = [0u8; 10];
        let _ = s.read_exact(&mut body).await;
        let _ = s
            .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")
            .await;
    })
    .await;
    let gw = gateway("upstream:\n  expect_continue_timeout: 100ms\n").await;
    upload_after_100(&gw, up.addr, "HTTP/1.1 201").await;
}
