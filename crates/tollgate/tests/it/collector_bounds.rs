//! A collector that answers without end (HAR's, OTLP's) costs the gateway a few KiB: its
//! answer is read up to a cap, then its connection is dropped.

use crate::support::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::io::AsyncWriteExt;

/// The most a collector here writes before it stops by itself (the test's own bound).
const MOST: u64 = 256 << 20;

/// A collector answering every POST `200` with a chunked body that never ends: what it
/// wrote once the gateway dropped the connection, and whether it did.
async fn endless_collector() -> (Server, Arc<AtomicU64>, Arc<AtomicBool>) {
    let (written, dropped) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (w, d) = (written.clone(), dropped.clone());
    let server = raw_upstream(move |mut s| {
        let (w, d) = (w.clone(), d.clone());
        async move {
            if !read_request(&mut s).await {
                return;
            }
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
            let mut n = 0u64;
            while n < MOST {
                if s.write_all(chunk.as_bytes()).await.is_err() {
                    d.store(true, Ordering::SeqCst);
                    break;
                }
                n += 0x10000;
                w.store(n, Ordering::SeqCst);
            }
        }
    })
    .await;
    (server, written, dropped)
}

async fn assert_cut_short(written: &AtomicU64, dropped: &AtomicBool) {
    wait_until("the gateway dropped the collector's endless answer", || {
        dropped.load(Ordering::SeqCst) || written.load(Ordering::SeqCst) >= MOST
    })
    .await;
    let n = written.load(Ordering::SeqCst);
    // What the sockets' buffers hold, not what the collector could write in the timeout.
    assert!(
        dropped.load(Ordering::SeqCst) && n < 32 << 20,
        "the gateway read {n} bytes of the answer"
    );
}

/// A call through a gateway whose diagnosis, `diagnosis` (`{}` for the collector's
/// address), sends to an endless collector: its answer is cut short.
async fn cut_short_with(diagnosis: &str) {
    let (col, written, dropped) = endless_collector().await;
    let up = echo_upstream().await;
    let gw = gateway(&format!(
        "diagnosis:\n{}",
        diagnosis.replace("{}", &col.addr.to_string())
    ))
    .await;
    let r = get_via(&gw, up.addr, "/x", &[]).await;
    assert_eq!(r.status, 200);
    assert_cut_short(&written, &dropped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_har_collector_answering_without_end_is_cut_short() {
    cut_short_with(
        "  har:\n    enabled: true\n    collector: {url: 'http://{}/har', interval: 20ms, timeout: 60s}\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_collector_answering_without_end_is_cut_short() {
    cut_short_with(
        "  traces:\n    enabled: true\n    endpoint: 'http://{}/v1/traces'\n    interval: 20ms\n    timeout: 60s\n",
    )
    .await;
}
