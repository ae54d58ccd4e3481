//! Streaming without buffering: chunks are relayed as they come, in both directions.
//! Causality, not timing: the upstream sends its next chunk only after the client has
//! received the previous one through the proxy, so a buffering proxy would deadlock.

use crate::support::*;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tollgate::body::{Body, BoxError};

fn channel_body(rx: mpsc::Receiver<Bytes>) -> Body {
    let s = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, BoxError>(Frame::data(b)), rx))
    });
    StreamBody::new(s).boxed_unsync()
}

#[tokio::test]
async fn response_chunks_are_relayed_one_by_one() {
    // The test drives the upstream: it hands the upstream one chunk at a time.
    type Feed = Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>;
    let feed: Feed = Arc::default();
    let (tx, rx) = mpsc::channel(1);
    *feed.lock().unwrap() = Some(rx);
    let f = feed.clone();
    let up = upstream(move |_req| {
        let rx = f.lock().unwrap().take().expect("one request");
        async move { Response::new(channel_body(rx)) }
    })
    .await;
    let gw = gateway("").await;
    let resp = client()
        .request(via_header(&gw, up.addr, "/drip").body(empty()).unwrap())
        .await
        .unwrap();
    let mut body = resp.into_body();
    for i in 0..5 {
        let chunk = Bytes::from(format!("chunk-{i};"));
        tx.send(chunk.clone()).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("chunk relayed before the next one exists")
            .unwrap()
            .unwrap();
        assert_eq!(got.into_data().unwrap(), chunk);
    }
    drop(tx);
    assert!(body.frame().await.is_none(), "end of stream relayed");
}

#[tokio::test]
async fn request_chunks_are_relayed_one_by_one() {
    let (seen_tx, mut seen_rx) = mpsc::channel::<Bytes>(16);
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let seen_tx = seen_tx.clone();
        async move {
            let mut body = req.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(d) = frame.into_data() {
                    seen_tx.send(d).await.unwrap();
                }
            }
            Response::new(tollgate::body::full("done"))
        }
    })
    .await;
    let gw = gateway("").await;
    let (tx, rx) = mpsc::channel(1);
    let req = via_header(&gw, up.addr, "/upload")
        .method("POST")
        .body(channel_body(rx))
        .unwrap();
    let c = client();
    let pending = tokio::spawn(async move { send(&c, req).await });
    let mut received = Vec::new();
    for i in 0..5 {
        let chunk = Bytes::from(format!("part-{i};"));
        tx.send(chunk.clone()).await.unwrap();
        // Chunks may coalesce on the wire; wait until this one's bytes have arrived.
        let want: usize = (0..=i).map(|j| format!("part-{j};").len()).sum();
        while received.len() < want {
            let d = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv())
                .await
                .expect("upstream got the chunk before the next was written")
                .unwrap();
            received.extend_from_slice(&d);
        }
    }
    drop(tx);
    let got = pending.await.unwrap();
    assert_eq!(got.body, "done");
    assert_eq!(
        String::from_utf8(received).unwrap(),
        "part-0;part-1;part-2;part-3;part-4;"
    );
}

#[tokio::test]
async fn provider_drip_passes_through_chunked() {
    let provider = tollgate_provider::Provider::start(local0()).await.unwrap();
    let gw = gateway("").await;
    let resp = client()
        .request(
            via_header(&gw, provider.addr, "/drip?numbytes=5&duration=0.2")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(
        resp.headers().get("content-length").is_none(),
        "streamed, not buffered into a length"
    );
    let mut body = resp.into_body();
    let mut frames = 0;
    let mut bytes = 0;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            frames += 1;
            bytes += d.len();
        }
    }
    assert_eq!(bytes, 5);
    assert!(frames > 1, "drip arrives in several chunks, not one");
}
