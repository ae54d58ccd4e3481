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

/// An upstream where `/stall` never answers and anything else answers at once.
async fn stall_or_answer() -> Server {
    upstream(|req| async move {
        if req.uri().path() == "/stall" {
            std::future::pending::<()>().await;
        }
        Response::new(full("fast"))
    })
    .await
}

const SHORT_RESPONSE_TIMEOUT: &str = "upstream: { response_timeout: 300ms }";

#[tokio::test]
async fn requests_in_turn_on_one_connection_each_get_the_full_response_timeout() {
    // The connection's requests share one timer: each must be timed from its own start,
    // and the timer must come back after a timeout.
    let up = stall_or_answer().await;
    let gw = gateway(SHORT_RESPONSE_TIMEOUT).await;
    let c = client(); // one idle keep-alive connection, reused for each request in turn
    for round in 0..2 {
        let got = send(&c, via_header(&gw, up.addr, "/").body(empty()).unwrap()).await;
        assert_eq!((round, got.status.as_u16()), (round, 200));
        let got = send(
            &c,
            via_header(&gw, up.addr, "/stall").body(empty()).unwrap(),
        )
        .await;
        assert_eq!(got.status, 504, "{:?}", got.body);
        assert_eq!(got.error_code().as_deref(), Some("upstream_timeout"));
    }
}

#[tokio::test]
async fn concurrent_http2_streams_each_get_their_own_response_timeout() {
    let up = stall_or_answer().await;
    let gw = gateway(SHORT_RESPONSE_TIMEOUT).await;
    let c = h2c_client();
    let (stalled, quick) = tokio::join!(
        send(
            &c,
            via_header(&gw, up.addr, "/stall").body(empty()).unwrap()
        ),
        async {
            // Starts while the stalled stream holds the connection's timer.
            tokio::time::sleep(Duration::from_millis(50)).await;
            send(&c, via_header(&gw, up.addr, "/").body(empty()).unwrap()).await
        }
    );
    assert_eq!(stalled.status, 504);
    assert_eq!(quick.status, 200);
    assert_eq!(quick.body, "fast");
}

/// Writes `first`, pauses, then writes `rest`: the first bytes arrive on their own.
async fn split_write(gw: &tollgate::Gateway, first: &[u8], rest: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(rest).await.unwrap();
    s
}

#[tokio::test]
async fn the_protocol_is_told_by_the_first_bytes_even_when_they_arrive_apart() {
    let up = upstream(|_req| async { Response::new(full("ok")) }).await;
    let gw = gateway(QUICK).await;

    // "P" could begin the HTTP/2 preface; "PO" cannot: served as HTTP/1.1.
    let req = format!(
        "OST /a HTTP/1.1\r\nHost: a\r\nx-tollgate-host: {}\r\nx-tollgate-scheme: http\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        up.addr
    );
    let mut s = split_write(&gw, b"P", req.as_bytes()).await;
    let answer = String::from_utf8(read_until_closed(&mut s).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");

    // The preface in two pieces, then an empty SETTINGS frame (RFC 9113 §3.4, §6.5):
    // the gateway answers with its own SETTINGS frame, so it speaks HTTP/2.
    let mut rest = b"\r\nSM\r\n\r\n".to_vec();
    rest.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let mut s = split_write(&gw, b"PRI * HTTP/2.0\r\n", &rest).await;
    let mut frame = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut frame))
        .await
        .expect("an HTTP/2 answer")
        .unwrap();
    assert_eq!(frame[3], 4, "a SETTINGS frame: {frame:?}");

    // A client that stops inside the preface is cut off by the read deadline.
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(b"PRI * HT").await.unwrap();
    assert!(read_until_closed(&mut s).await.is_empty());
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_and_the_upstream_released() {
    // The upstream streams until its writes fail, then says so.
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::channel::<()>(1);
    let up = raw_upstream(move |mut s| {
        let closed = closed_tx.clone();
        async move {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
            while s.write_all(chunk.as_bytes()).await.is_ok() {}
            let _ = closed.send(()).await;
        }
    })
    .await;
    let gw = gateway("listen: { send_timeout: 300ms }").await;
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(
        format!(
            "GET /big HTTP/1.1\r\nHost: a\r\nx-tollgate-host: {}\r\nx-tollgate-scheme: http\r\n\r\n",
            up.addr
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Read nothing: buffers fill, hyper stops asking the body for more, the sweep sees
    // the response waiting on the client and cuts it.
    tokio::time::timeout(Duration::from_secs(20), closed_rx.recv())
        .await
        .expect("the upstream connection is released");
    let text = metrics_when(&gw, |t| t.contains("tollgate_upstream_connections 0")).await;
    assert!(text.contains("tollgate_upstream_connections 0"), "{text}");
    read_until_closed(&mut s).await;
}

#[tokio::test]
async fn a_slow_upstream_is_not_a_stalled_client() {
    // Pauses longer than the send timeout between chunks: the wait is on the upstream.
    let up = upstream(|_req| async {
        let frames = futures_util::stream::unfold(0, |i| async move {
            if i == 3 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(400)).await;
            Some((Ok::<_, BoxError>(Frame::data(Bytes::from("chunk"))), i + 1))
        });
        let body: Body = StreamBody::new(frames).boxed_unsync();
        Response::new(body)
    })
    .await;
    let gw = gateway("listen: { send_timeout: 100ms }").await;
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/").body(empty()).unwrap(),
    )
    .await;
    assert_eq!(got.body, "chunkchunkchunk");
}
