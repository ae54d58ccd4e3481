//! HAR capture of large uploads (its own test binary: it measures this process's memory).
//! What calls being captured hold is bounded by `max_queue_bytes` whatever the bodies'
//! size and however many are in flight, not only what waits in the writer's queue.

mod support;

use http_body_util::BodyExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use support::*;

const UPLOAD: usize = 4 << 20;
const AT_ONCE: usize = 24;
const ROUNDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_uploads_captured_at_once_hold_no_more_than_the_queue_bound() {
    let dir = tempfile::tempdir().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    // A provider that reads each upload as it streams and keeps none of it.
    let up = upstream(move |req: http::Request<hyper::body::Incoming>| {
        let r = r.clone();
        async move {
            let mut body = req.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(d) = frame.data_ref() {
                    r.fetch_add(d.len() as u64, Ordering::Relaxed);
                }
            }
            answer(200, &[], "ok")
        }
    })
    .await;
    let gw = gateway(&format!(
        "diagnosis:\n  har:\n    enabled: true\n    max_body_bytes: 16MiB\n    max_queue_bytes: 1MiB\n    file: {{ dir: {} }}\n",
        dir.path().display()
    ))
    .await;
    let body = bytes::Bytes::from(vec![b'u'; UPLOAD]);
    let before = rss_kib();
    let peak = Arc::new(AtomicU64::new(before));
    let sampling = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..AT_ONCE {
        let (c, gw_addr, body) = (client(), gw.proxy_addr, body.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let req = http::Request::post(format!("http://{gw_addr}/upload"))
                    .header("x-tollgate-host", up.addr.to_string())
                    .header("x-tollgate-scheme", "http")
                    .body(bytes_body(body.clone()))
                    .unwrap();
                assert_eq!(send(&c, req).await.status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    sampling.abort();
    let grown_mib = (peak.load(Ordering::Relaxed).max(rss_kib()) - before) / 1024;
    let total = (AT_ONCE * ROUNDS * UPLOAD) as u64;
    assert_eq!(
        received.load(Ordering::Relaxed),
        total,
        "every upload arrived whole"
    );
    let text = metrics_when(&gw, |_| true).await;
    eprintln!(
        "{} uploads of {} MiB, {AT_ONCE} at once: RSS +{grown_mib} MiB",
        AT_ONCE * ROUNDS,
        UPLOAD >> 20
    );
    // Copies of calls in flight: at most max_queue_bytes (1 MiB), the queue as much
    // again, plus the uploads' own buffers in flight (socket reads, the test client's
    // and provider's) and the allocator's slack. Before the capture budget each of the
    // 24 held its upload whole: +217 MiB in the black-box run.
    assert!(grown_mib < 96, "RSS grew by {grown_mib} MiB: {text}");
}
