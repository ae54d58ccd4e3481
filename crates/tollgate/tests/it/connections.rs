//! Client connections: the read deadline (`listen.header_read_timeout`) closes quiet
//! HTTP/1.1 connections (slow-loris guard, keep-alive idle limit) and never one that
//! has a request in flight, however slow its response.

use crate::support::*;
use bytes::Bytes;
use http::Response;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use std::time::Duration;
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

/// Sends `GET path` on a fresh connection and reads none of the answer.
async fn ask_and_never_read(
    gw: &tollgate::Gateway,
    path: &str,
    up: std::net::SocketAddr,
) -> TcpStream {
    let mut s = TcpStream::connect(gw.proxy_addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: a\r\nx-tollgate-host: {up}\r\nx-tollgate-scheme: http\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    s
}

#[tokio::test]
async fn answers_handed_over_whole_are_cut_at_the_send_timeout_too() {
    // Cache hits and aggregated answers are one body hyper takes whole: the response is
    // over for the body, not for the socket. The read deadline is an hour, so only the
    // send timeout can cut these clients.
    let big = "x".repeat(8 << 20);
    let payload = big.clone();
    let up = upstream(move |_req| {
        let b = payload.clone();
        async move {
            answer(
                200,
                &[("content-type", "application/json")],
                &format!("{{\"data\":\"{b}\"}}"),
            )
        }
    })
    .await;
    let gw = gateway(&format!(
        "listen: {{ send_timeout: 300ms, header_read_timeout: 1h }}
policies:
  - name: c
    match: {{host: 127.0.0.1}}
    cache: {{ttl: 1h, max_entry: 16MiB}}
endpoints:
  - path: /agg
    backends:
      - url: http://{}/agg
",
        up.addr
    ))
    .await;
    // Fill the cache, on a connection that closes after.
    let filled = raw_exchange(
        gw.proxy_addr,
        format!("GET /c HTTP/1.1\r\nHost: a\r\nx-tollgate-host: {}\r\nx-tollgate-scheme: http\r\nconnection: close\r\n\r\n", up.addr).as_bytes(),
    )
    .await;
    assert!(filled.len() > big.len(), "the first call is relayed whole");
    let text = metrics_when(&gw, |t| t.contains("tollgate_client_connections 0")).await;
    assert!(text.contains("tollgate_client_connections 0"), "{text}");
    let mut hit = ask_and_never_read(&gw, "/c", up.addr).await;
    let mut aggregated = TcpStream::connect(gw.proxy_addr).await.unwrap();
    aggregated
        .write_all(b"GET /agg HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let text = metrics_when(&gw, |t| t.contains("action=\"hit\"")).await;
    assert!(
        text.contains("action=\"hit\""),
        "the second call is a cache hit: {text}"
    );
    // Both clients read nothing: their sockets fill and the sweep cuts them. Waiting for
    // both cuts, not for no connection: on a busy machine the aggregated call's
    // connection may not be accepted yet when the hit's is cut, and reading it then would
    // drain its answer (no stall) and keep it open.
    let stalled = "tollgate_stalls_total{kind=\"connection\"} 2\n";
    let text = metrics_when(&gw, |t| {
        t.contains(stalled) && t.contains("tollgate_client_connections 0")
    })
    .await;
    assert!(text.contains(stalled), "{text}");
    for s in [&mut hit, &mut aggregated] {
        let got = read_until_closed(s).await;
        assert!(
            got.len() < big.len(),
            "cut before the whole answer was sent"
        );
    }
}

#[tokio::test]
async fn http2_streams_without_window_release_their_upstream_connections() {
    // Each answer is small: it waits on the stream's window, not on the socket, and
    // holds an upstream connection until its body is read.
    let up = upstream(|_req| async { answer(200, &[], &"y".repeat(64 << 10)) }).await;
    let gw = gateway("listen: { send_timeout: 300ms }").await;
    let tcp = TcpStream::connect(gw.proxy_addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(0)
            .adaptive_window(false)
            .handshake::<_, Body>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let streams = 20;
    let mut responses = Vec::new();
    for i in 0..streams {
        sender.ready().await.unwrap();
        let req = http::Request::get(format!("http://gw/{i}"))
            .header("x-tollgate-host", up.addr.to_string())
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap();
        responses.push(sender.send_request(req));
    }
    // Every head arrives (headers need no window); no body byte can.
    let mut bodies = Vec::new();
    for r in responses {
        let resp = tokio::time::timeout(Duration::from_secs(20), r)
            .await
            .expect("the head arrives")
            .unwrap();
        assert_eq!(resp.status(), 200);
        bodies.push(resp.into_body());
    }
    // The sweep releases each stalled stream's upstream connection while the client
    // keeps its connection and its streams.
    let text = metrics_when(&gw, |t| t.contains("tollgate_upstream_connections 0")).await;
    assert!(text.contains("tollgate_upstream_connections 0"), "{text}");
    assert!(text.contains("tollgate_client_connections 1"), "{text}");
    assert!(
        text.contains(&format!(
            "tollgate_stalls_total{{kind=\"stream\"}} {streams}"
        )),
        "{text}"
    );
    // The connection still works for a stream the client reads.
    let got = send(
        &h2c_client(),
        via_header(&gw, up.addr, "/fresh").body(empty()).unwrap(),
    )
    .await;
    assert_eq!(got.body.len(), 64 << 10);
    drop(bodies);
}

#[tokio::test]
async fn one_http2_connection_holds_at_most_128_upstream_connections_by_default() {
    let up = stall_upstream().await;
    let gw = gateway("").await;
    let tcp = TcpStream::connect(gw.proxy_addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake::<_, Body>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    // 200 requests to an upstream that never answers: the client queues what is over the
    // server's stream limit (listen.max_concurrent_streams, 128 by default).
    let mut pending = Vec::new();
    for i in 0..200 {
        let mut s = sender.clone();
        let addr = up.addr;
        pending.push(tokio::spawn(async move {
            let req = http::Request::get(format!("http://gw/{i}"))
                .header("x-tollgate-host", addr.to_string())
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap();
            let _ = s.send_request(req).await;
        }));
    }
    let text = metrics_when(&gw, |t| t.contains("tollgate_upstream_connections 128")).await;
    assert!(text.contains("tollgate_upstream_connections 128"), "{text}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = String::from_utf8_lossy(&admin_get(&gw, "/metrics").await.body).into_owned();
    assert!(
        text.contains("tollgate_upstream_connections 128"),
        "never more: {text}"
    );
    for p in pending {
        p.abort();
    }
}
