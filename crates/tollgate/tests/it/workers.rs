//! The data plane on several workers: connections spread over them, each request served
//! start to end by one, and what must hold across all of them — reload, graceful
//! shutdown, metrics, request ids — holds. Connections here are fresh TCP connections
//! (one request each), so the kernel's `SO_REUSEPORT` hash spreads them.

use crate::support::*;
use std::collections::HashSet;
use std::time::Duration;
use tollgate::{Gateway, Overrides, StartOptions};

const WORKERS: usize = 4;
/// Enough fresh connections that every worker gets some (the chance that 4 workers see
/// all 64 land on one is 4 × 4⁻⁶⁴).
const CONNECTIONS: usize = 64;

/// One request on a connection of its own; the whole answer.
async fn fresh(addr: std::net::SocketAddr, path: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nHost: client\r\nConnection: close\r\n\r\n");
    raw_exchange(addr, req.as_bytes()).await
}

fn accepted_per_worker(metrics: &str) -> Vec<u64> {
    (0..WORKERS)
        .map(|w| {
            let prefix = format!("tollgate_worker_connections_accepted_total{{worker=\"{w}\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0, |v| v.trim().parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_over_workers_and_ids_stay_unique() {
    let up = echo_upstream().await;
    let gw = gateway_with_workers(
        &format!("routes:\n  - prefix: /\n    upstream: http://{}\n", up.addr),
        WORKERS,
    )
    .await;
    let mut tasks = Vec::new();
    for i in 0..CONNECTIONS {
        let addr = gw.proxy_addr;
        tasks.push(tokio::spawn(
            async move { fresh(addr, &format!("/n{i}")).await },
        ));
    }
    let mut ids = HashSet::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let answer = t.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(&format!("\"path\":\"/n{i}\"")), "{answer}");
        let id = answer
            .lines()
            .find_map(|l| l.strip_prefix("x-tollgate-request-id: "))
            .expect("request id")
            .to_owned();
        assert!(ids.insert(id.clone()), "request id {id} given twice");
    }
    let all_counted = format!(
        "tollgate_requests_total{{host=\"127.0.0.1\",method=\"GET\",status_class=\"2xx\"}} {CONNECTIONS}\n"
    );
    let text = metrics_when(&gw, |t| t.contains(&all_counted)).await;
    let per = accepted_per_worker(&text);
    assert_eq!(per.iter().sum::<u64>(), CONNECTIONS as u64, "{text}");
    assert!(
        per.iter().filter(|&&n| n > 0).count() >= 2,
        "connections spread over workers: {per:?}"
    );
    assert!(
        text.contains(&all_counted),
        "every worker's events reach the metrics: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reaches_every_worker() {
    let a = echo_upstream().await;
    let b = upstream(|_req| async { answer(200, &[], "from b") }).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    let route =
        |up: std::net::SocketAddr| format!("routes:\n  - prefix: /\n    upstream: http://{up}\n");
    std::fs::write(file.path(), route(a.addr)).unwrap();
    let gw = Gateway::start(StartOptions {
        config_files: Some(tollgate::config::ConfigFiles::one(file.path())),
        overrides: Overrides {
            listen: Some(local0()),
            admin: Some(local0()),
        },
        workers: Some(WORKERS),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(fresh(gw.proxy_addr, "/x").await.contains("\"path\":\"/x\""));
    std::fs::write(file.path(), route(b.addr)).unwrap();
    assert_eq!(post_reload(&gw).await.status, 200);
    for i in 0..CONNECTIONS {
        let answer = fresh(gw.proxy_addr, &format!("/y{i}")).await;
        assert!(answer.ends_with("from b"), "connection {i}: {answer}");
    }
    let per = accepted_per_worker(&String::from_utf8_lossy(
        &admin_get(&gw, "/metrics").await.body,
    ));
    assert!(
        per.iter().filter(|&&n| n > 0).count() >= 2,
        "the new config was seen on several workers: {per:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests_on_every_worker() {
    let (slow, arrived) = counting_upstream(|_req, _| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        answer(200, &[], "slow but whole")
    })
    .await;
    let gw = gateway_with_workers(
        &format!(
            "routes:\n  - prefix: /\n    upstream: http://{}\n",
            slow.addr
        ),
        WORKERS,
    )
    .await;
    let mut in_flight = Vec::new();
    for _ in 0..16 {
        let addr = gw.proxy_addr;
        in_flight.push(tokio::spawn(async move { fresh(addr, "/slow").await }));
    }
    // Every request is in flight (it reached the provider) before shutdown starts.
    for _ in 0..400 {
        if arrived.load(std::sync::atomic::Ordering::SeqCst) == 16 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(arrived.load(std::sync::atomic::Ordering::SeqCst), 16);
    let text = String::from_utf8_lossy(&admin_get(&gw, "/metrics").await.body).into_owned();
    assert!(
        accepted_per_worker(&text)
            .iter()
            .filter(|&&n| n > 0)
            .count()
            >= 2,
        "in flight on several workers: {text}"
    );
    gw.shutdown();
    let addr = gw.proxy_addr;
    tokio::time::timeout(Duration::from_secs(10), gw.wait())
        .await
        .expect("shutdown finishes once the requests are done");
    for t in in_flight {
        let answer = t.await.unwrap();
        assert!(answer.ends_with("slow but whole"), "{answer}");
    }
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "every worker's listener is closed"
    );
}

#[test]
fn the_workers_stop_with_the_runtime_that_started_the_gateway() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = rt.block_on(async { gateway_with_workers("", WORKERS).await.proxy_addr });
    assert!(std::net::TcpStream::connect(addr).is_ok(), "serving");
    drop(rt);
    // The workers see the stop and close their listeners; poll for it (a deadline, not a
    // speed assertion).
    let closed = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        std::net::TcpStream::connect(addr).is_err()
    });
    assert!(closed, "the workers' listeners outlived the runtime");
}
