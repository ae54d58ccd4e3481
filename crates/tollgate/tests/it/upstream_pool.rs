//! The HTTP/1.1 upstream pool: connections are reused, and an upstream that silently
//! closes idle keep-alive connections never costs a client request.

use crate::support::*;
use http::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers exactly one request per connection with a keep-alive response (no
/// `Connection: close`), then closes the socket: the classic stale pooled connection.
async fn one_shot_upstream(accepted: Arc<AtomicUsize>) -> Server {
    raw_upstream(move |mut s| {
        accepted.fetch_add(1, Ordering::Relaxed);
        async move {
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
            let _ = s.flush().await;
            // Let the response reach the proxy before the close, like a server whose
            // keep-alive timeout fires between two requests.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

/// GET `/{i}` through the gateway to `upstream`, header-routed.
async fn get(
    c: &TestClient,
    gw: &tollgate::server::Gateway,
    upstream: std::net::SocketAddr,
    i: usize,
) -> Got {
    send(
        c,
        via_header(gw, upstream, &format!("/{i}"))
            .body(empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn stale_pooled_connections_never_fail_a_request() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let up = one_shot_upstream(accepted.clone()).await;
    let gw = gateway("").await;
    let c = client();
    for i in 0..20 {
        let got = get(&c, &gw, up.addr, i).await;
        assert_eq!(got.status, StatusCode::OK, "request {i}: {:?}", got.body);
        assert_eq!(got.body, "ok");
        // Give the upstream's close time to arrive, so the next request meets a stale connection.
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        20,
        "one connection per request"
    );
}

#[tokio::test]
async fn keep_alive_connections_are_reused() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let c = client();
    for i in 0..50 {
        let got = get(&c, &gw, up.addr, i).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let text = metrics_when(&gw, |t| t.contains("tollgate_upstream_connections 1")).await;
    assert!(
        text.contains("tollgate_upstream_connections 1"),
        "50 sequential requests on one connection: {text}"
    );
}

/// Requests without a body or with a short one share connections that write each
/// request flat; a long body goes on a connection of its own that writes it as it comes;
/// each lane's connection is reused by the requests like it, and every body arrives whole.
#[tokio::test]
async fn long_bodies_go_on_connections_of_their_own() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let c = client();
    let post = |i: usize, body: String| {
        let c = &c;
        let req = via_header(&gw, up.addr, &format!("/post/{i}"))
            .method("POST")
            .body(bytes_body(body.clone()))
            .unwrap();
        async move {
            let got = send(c, req).await;
            assert_eq!(got.status, StatusCode::OK);
            let seen: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
            assert_eq!(seen["body_len"], body.len(), "request {i}");
            assert_eq!(seen["body"], body.as_str(), "request {i}");
        }
    };
    for i in 0..10 {
        assert_eq!(get(&c, &gw, up.addr, i).await.status, StatusCode::OK);
        post(i, "s".repeat(1 + i * 400)).await;
    }
    let text = metrics_when(&gw, |t| t.contains("tollgate_upstream_connections 1\n")).await;
    assert!(
        text.contains("tollgate_upstream_connections 1\n"),
        "no body and bodies up to 4 KiB, alternated, on one connection: {text}"
    );
    for i in 10..20 {
        assert_eq!(get(&c, &gw, up.addr, i).await.status, StatusCode::OK);
        post(i, "L".repeat(if i % 2 == 0 { 300 << 10 } else { 4097 })).await;
    }
    let text = metrics_when(&gw, |t| t.contains("tollgate_upstream_connections 2\n")).await;
    assert!(
        text.contains("tollgate_upstream_connections 2\n"),
        "and longer bodies, alternated with them, on one more: {text}"
    );
}

/// Answers one request per connection with a keep-alive response and closes at once:
/// the close races the next request on that pooled connection.
async fn closes_after_each_response() -> Server {
    raw_upstream(|mut s| async move {
        if !read_head(&mut s).await.ends_with("\r\n\r\n") {
            return;
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_closes_racing_requests_cost_no_request() {
    racing_idle_closes("").await;
}

/// For a policy that retries, the pool leaves a lost request to the retry remedy (one
/// mechanism, counting it as an attempt): still no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_retry_policy_the_remedy_resends_lost_requests() {
    let gw = racing_idle_closes(
        "policies:\n  - name: r\n    match: {host: 127.0.0.1}\n    retry: {attempts: 3, base_delay: 0s, budget_min: 1000}\n",
    )
    .await;
    let m = metrics_when(&gw, |t| t.contains("tollgate_remedy_actions_total")).await;
    assert!(!m.contains("action=\"budget_exhausted\"} 1"), "{m}");
}

async fn racing_idle_closes(yaml: &str) -> tollgate::Gateway {
    let up = closes_after_each_response().await;
    let gw = gateway(yaml).await;
    let mut workers = Vec::new();
    for w in 0..8 {
        let gw_addr = gw.proxy_addr;
        let up_addr = up.addr;
        workers.push(tokio::spawn(async move {
            let c = client();
            let mut failed = Vec::new();
            for i in 0..60 {
                let req = http::Request::get(format!("http://{gw_addr}/{w}/{i}"))
                    .header("x-tollgate-host", up_addr.to_string())
                    .header("x-tollgate-scheme", "http")
                    .body(empty())
                    .unwrap();
                let got = send(&c, req).await;
                if got.status != StatusCode::OK {
                    failed.push(format!("{}: {:?}", got.status, got.body));
                }
            }
            failed
        }));
    }
    let mut failed = Vec::new();
    for w in workers {
        failed.extend(w.await.unwrap());
    }
    assert!(
        failed.is_empty(),
        "{} of 480 failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    gw
}
