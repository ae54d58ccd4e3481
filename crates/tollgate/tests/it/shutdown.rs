//! Graceful shutdown: readiness goes 503, new connections are refused, in-flight requests
//! and tunnels finish, late requests get 503 `shutting_down`, the drain deadline is kept.

use crate::support::*;
use http::{Response, StatusCode};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, oneshot};

/// An upstream that answers only when released, and says when a request has arrived.
async fn gated() -> (Server, Arc<Notify>, Arc<Mutex<Vec<oneshot::Sender<()>>>>) {
    let arrived = Arc::new(Notify::new());
    let gates: Arc<Mutex<Vec<oneshot::Sender<()>>>> = Arc::default();
    let (a, g) = (arrived.clone(), gates.clone());
    let up = upstream(move |_req| {
        let (tx, rx) = oneshot::channel();
        g.lock().unwrap().push(tx);
        a.notify_one();
        async move {
            let _ = rx.await;
            Response::new(tollgate::body::full("finished"))
        }
    })
    .await;
    (up, arrived, gates)
}

#[tokio::test]
async fn in_flight_requests_complete_and_readiness_drops() {
    let (up, arrived, gates) = gated().await;
    let gw = gateway("").await;
    assert_eq!(admin_get(&gw, "/readyz").await.status, StatusCode::OK);
    let c = client();
    let req = via_header(&gw, up.addr, "/slow").body(empty()).unwrap();
    let in_flight = tokio::spawn(async move { send(&c, req).await });
    arrived.notified().await;

    gw.shutdown();
    assert_eq!(
        admin_get(&gw, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The listener is closed: new connections are refused. Each worker closes its own
    // socket on its own thread, so poll for it (a deadline, not a speed assertion).
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(gw.proxy_addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(refused, "listener closed after shutdown");

    for g in gates.lock().unwrap().drain(..) {
        let _ = g.send(());
    }
    let got = in_flight.await.unwrap();
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body, "finished");
    gw.wait().await;
}

#[tokio::test]
async fn a_request_arriving_while_draining_gets_503() {
    let (up, arrived, gates) = gated().await;
    let gw = gateway("").await;
    // HTTP/2: one connection, one stream in flight keeps the connection open while draining.
    let c = h2c_client();
    let first = {
        let (c, req) = (
            c.clone(),
            via_header(&gw, up.addr, "/first").body(empty()).unwrap(),
        );
        tokio::spawn(async move { send(&c, req).await })
    };
    arrived.notified().await;
    // A request whose head was read before the connection learned of the shutdown is
    // answered 503 by the pipeline; emulate that race with a raw HTTP/1.1 connection
    // whose head completes after shutdown started.
    let mut raw = tokio::net::TcpStream::connect(gw.proxy_addr).await.unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nx-tollgate-host: ")
        .await
        .unwrap();
    // Let the server read the partial head, so the connection is busy, not idle.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    gw.shutdown();
    raw.write_all(format!("{}\r\nx-tollgate-scheme: http\r\n\r\n", up.addr).as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = raw.read_to_string(&mut answer).await;
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("x-tollgate-error: shutting_down"),
        "503 shutting_down, never forwarded: {answer}"
    );
    for g in gates.lock().unwrap().drain(..) {
        let _ = g.send(());
    }
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    gw.wait().await;
}

#[tokio::test]
async fn drain_deadline_cuts_stuck_requests() {
    let (up, arrived, _gates) = gated().await;
    let gw = gateway("shutdown:\n  drain_timeout: 200ms\n").await;
    let c = client();
    let req = via_header(&gw, up.addr, "/stuck").body(empty()).unwrap();
    let stuck = tokio::spawn(async move { c.request(req).await });
    arrived.notified().await;
    gw.shutdown();
    gw.wait().await; // returns although the upstream never answers
    assert!(
        stuck.await.unwrap().is_err(),
        "the stuck request was cut at the deadline"
    );
}

#[tokio::test]
async fn requests_still_queued_at_the_drain_deadline_get_503_not_a_reset() {
    // One request holds the only slot (its upstream never answers); three wait behind it
    // in the concurrency queue, and three behind a spent rate limit.
    let (up, arrived, _gates) = gated().await;
    let gw = gateway(
        "shutdown:\n  drain_timeout: 300ms\npolicies:\n  - name: slots\n    match: {host: 127.0.0.1, path: /slots/*}\n    concurrency: {max: 1, queue: {size: 10, max_wait: 1h}}\n  - name: rate\n    match: {host: 127.0.0.1, path: /rate/*}\n    rate_limit: {limit: 1, window: hour, queue: {size: 10, max_wait: 1h}}\n",
    )
    .await;
    let c = client();
    let ask = |path: &str| {
        let (c, req) = (
            c.clone(),
            via_header(&gw, up.addr, path).body(empty()).unwrap(),
        );
        tokio::spawn(async move { c.request(req).await })
    };
    let holder = ask("/slots/holder");
    arrived.notified().await;
    let spent = ask("/rate/first");
    arrived.notified().await;
    let queued: Vec<_> = (0..3)
        .flat_map(|i| [ask(&format!("/slots/{i}")), ask(&format!("/rate/{i}"))])
        .collect();
    let m = metrics_when(&gw, |t| {
        t.contains("remedy=\"concurrency\",action=\"queued\"} 3")
            && t.contains("remedy=\"rate_limit\",action=\"queued\"} 3")
    })
    .await;
    assert!(m.contains("action=\"queued\"} 3"), "{m}");
    gw.shutdown();
    gw.wait().await;
    for q in queued {
        let resp = q.await.unwrap().expect("an answer, not a reset");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            resp.headers().get("x-tollgate-error").unwrap(),
            "shutting_down"
        );
    }
    // What was sent upstream and is stuck there is still cut: it may have been acted on.
    assert!(holder.await.unwrap().is_err());
    assert!(spent.await.unwrap().is_err());
}

#[tokio::test]
async fn an_aggregated_backend_still_queued_at_the_drain_deadline_answers_503() {
    // The backend's requests match a policy whose one slot is held (its upstream never
    // answers): the endpoint's call waits in that queue when the drain deadline comes.
    let (up, arrived, _gates) = gated().await;
    let gw = gateway(&format!(
        r#"
shutdown:
  drain_timeout: 300ms
endpoints:
  - path: /both
    timeout: 1m
    backends:
      - url: http://{up}/slots/backend
policies:
  - name: slots
    match: {{host: 127.0.0.1, path: /slots/*}}
    concurrency: {{max: 1, queue: {{size: 10, max_wait: 1h}}}}
"#,
        up = up.addr
    ))
    .await;
    let c = client();
    let holder = {
        let (c, req) = (
            c.clone(),
            via_header(&gw, up.addr, "/slots/holder")
                .body(empty())
                .unwrap(),
        );
        tokio::spawn(async move { c.request(req).await })
    };
    arrived.notified().await;
    let aggregated = {
        let req = http::Request::get(format!("http://{}/both", gw.proxy_addr))
            .body(empty())
            .unwrap();
        tokio::spawn(async move { c.request(req).await })
    };
    metrics_when(&gw, |t| {
        t.contains("remedy=\"concurrency\",action=\"queued\"} 1")
    })
    .await;
    gw.shutdown();
    gw.wait().await;
    let resp = aggregated.await.unwrap().expect("an answer, not a reset");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        resp.headers().get("x-tollgate-error").unwrap(),
        "shutting_down"
    );
    assert!(holder.await.unwrap().is_err());
}

#[tokio::test]
async fn open_tunnels_finish_during_drain() {
    let up = echo_upstream().await;
    let gw = gateway(ANY_CONNECT_PORT).await;
    let (mut s, head) = connect_via(gw.proxy_addr, &up.addr.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    gw.shutdown();
    s.write_all(b"GET /after-shutdown HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).await.unwrap();
    assert!(rest.contains("/after-shutdown"), "{rest}");
    drop(s);
    gw.wait().await;
}

#[tokio::test]
async fn shutting_down_error_shape() {
    let err = tollgate::error::ProxyError::ShuttingDown;
    let resp = err.to_response(&http::HeaderValue::from_static("id-1"));
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["x-tollgate-error"], "shutting_down");
    assert_eq!(resp.headers()["connection"], "close");
}
