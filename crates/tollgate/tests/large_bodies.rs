//! 1 GiB up and 1 GiB down through the proxy with flat memory. Its own test binary so
//! that no other test shares the process whose memory is measured.

mod support;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use support::*;
use tollgate::body::{Body, BoxError};

const GIB: u64 = 1 << 30;
const CHUNK: usize = 256 * 1024;

fn generated(total: u64) -> Body {
    let chunk = Bytes::from(vec![0x5a; CHUNK]);
    let s = futures_util::stream::unfold(0u64, move |sent| {
        let chunk = chunk.clone();
        async move {
            (sent < total).then(|| {
                let n = (total - sent).min(CHUNK as u64) as usize;
                (
                    Ok::<_, BoxError>(Frame::data(chunk.slice(..n))),
                    sent + n as u64,
                )
            })
        }
    });
    StreamBody::new(s).boxed_unsync()
}

async fn count(body: hyper::body::Incoming) -> u64 {
    let mut body = body;
    let mut n = 0u64;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            n += d.len() as u64;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gib_each_way_with_flat_memory() {
    let up = upstream(|req: Request<hyper::body::Incoming>| async move {
        if req.uri().path() == "/download" {
            Response::new(generated(GIB))
        } else {
            let n = count(req.into_body()).await;
            Response::new(tollgate::body::full(n.to_string()))
        }
    })
    .await;
    let gw = gateway("").await;
    let c = client();
    // Warm up so that pools, buffers and allocator arenas exist before the baseline.
    let _ = send(
        &c,
        via_header(&gw, up.addr, "/upload")
            .method("POST")
            .body(generated(64 << 20))
            .unwrap(),
    )
    .await;
    let before = rss_kib();

    let got = send(
        &c,
        via_header(&gw, up.addr, "/upload")
            .method("POST")
            .body(generated(GIB))
            .unwrap(),
    )
    .await;
    assert_eq!(got.body, GIB.to_string(), "upstream received every byte");
    let resp = c
        .request(via_header(&gw, up.addr, "/download").body(empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        count(resp.into_body()).await,
        GIB,
        "client received every byte"
    );

    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    // Buffering either body would grow memory by ~1 GiB; streaming keeps it to buffers.
    assert!(
        grown_mib < 100,
        "memory grew by {grown_mib} MiB while 2 GiB passed through"
    );
}
