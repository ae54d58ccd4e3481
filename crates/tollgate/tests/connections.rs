//! Client connections: the read deadline (`listen.header_read_timeout`) closes quiet
//! HTTP/1.1 connections (slow-loris guard, keep-alive idle limit) and never one that
//! has a request in flight, however slow its response.

mod support;

use bytes::Bytes;
use http::Response;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate::body::{Body, BoxError, full};

const QUICK: &str = "listen: { header_read_timeout: 200ms }";

/// Reads until the server closes; a hang fails the test instead of stalling it.
async fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("the gateway closes the connection")
        .ok();
    out
}

/// One request through a gateway with the short deadline gets `body` whole.
async fn assert_relayed(up: &Server, body: &str) {
    let gw = gateway(QUICK).await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/").body(empty()).unwrap(),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, body);
}

#[tokio::test]
async fn an_incomplete_request_head_is_cut_off() {
    let gw = gateway(QUICK).await;
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: example.com\r\nX-Trickle: ")
        .await
        .unwrap();
    let answer = read_until_closed(&mut s).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
}

#[tokio::test]
async fn a_keep_alive_connection_left_idle_is_closed_after_its_response() {
    let up = upstream(|_req| async { Response::new(full("ok")) }).await;
    let gw = gateway(QUICK).await;
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    let req = format!(
        "GET /a HTTP/1.1\r\nHost: a\r\nx-tollgate-host: {}\r\nx-tollgate-scheme: http\r\n\r\n",
        up.addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let answer = String::from_utf8(read_until_closed(&mut s).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    // One complete response, then the close: nothing was cut short.
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
}

#[tokio::test]
async fn a_response_slower_than_the_limit_still_arrives() {
    let up = upstream(|_req| async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        Response::new(full("late but whole"))
    })
    .await;
    assert_relayed(&up, "late but whole").await;
}

#[tokio::test]
async fn a_streamed_body_with_long_pauses_is_relayed_whole() {
    let up = upstream(|_req| async {
        let chunks = futures_util::stream::unfold(0u8, |i| async move {
            if i == 3 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(450)).await;
            Some((
                Ok::<_, BoxError>(Frame::data(Bytes::from(format!("chunk{i};")))),
                i + 1,
            ))
        });
        Response::new(StreamBody::new(chunks).boxed_unsync() as Body)
    })
    .await;
    assert_relayed(&up, "chunk0;chunk1;chunk2;").await;
}
