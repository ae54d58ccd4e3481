//! The built-in provider emulator: httpbin-compatible paths used by tests, demos and benchmarks.

use crate::support::*;
use http::{Request, StatusCode};
use std::io::Read;
use tollgate_provider::{Provider, STATIC_BODY};

async fn get(p: &Provider, path: &str) -> Got {
    send(
        &client(),
        Request::get(format!("http://{}{path}", p.addr))
            .body(empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn httpbin_paths() {
    let p = Provider::start(local0()).await.unwrap();
    let s = get(&p, "/static").await;
    assert_eq!((s.status, s.body.len()), (StatusCode::OK, 110));
    assert_eq!(&s.body[..], &STATIC_BODY[..]);
    assert!(
        serde_json::from_slice::<serde_json::Value>(&s.body).is_ok(),
        "static body is JSON"
    );
    // The aggregation benchmark's fixtures: a `data` object, and a response time asked for.
    let d = get(&p, "/static/data?delay=1ms").await;
    assert_eq!(d.status, StatusCode::OK);
    assert!(d.json()["data"].is_object(), "{:?}", d.json());
    assert_eq!(&get(&p, "/static?delay=0").await.body[..], &STATIC_BODY[..]);
    assert_eq!(
        get(&p, "/static?delay=soon").await.status,
        StatusCode::NOT_FOUND
    );

    for d in ["/delay/0.05", "/delay/50ms"] {
        let got = get(&p, d).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.json()["url"], format!("http://{}{d}", p.addr));
    }
    assert_eq!(get(&p, "/delay/soon").await.status, StatusCode::NOT_FOUND);
    assert_eq!(get(&p, "/status/418").await.status.as_u16(), 418);
    assert_eq!(get(&p, "/status/503").await.status.as_u16(), 503);

    let a = get(&p, "/bytes/1000?seed=42").await;
    let b = get(&p, "/bytes/1000?seed=42").await;
    let c = get(&p, "/bytes/1000?seed=43").await;
    assert_eq!(a.body.len(), 1000);
    assert_eq!(a.body, b.body, "deterministic with a seed");
    assert_ne!(a.body, c.body);

    let got = get(&p, "/anything/x/y?a=1&a=2&b=").await;
    let j = got.json();
    assert_eq!(j["method"], "GET");
    assert_eq!(j["args"]["a"], serde_json::json!(["1", "2"]));
    assert_eq!(j["args"]["b"], "");
    assert_eq!(
        get(&p, "/get").await.json()["headers"]["Host"],
        p.addr.to_string()
    );
    assert!(get(&p, "/headers").await.json()["headers"].is_object());
    assert!(get(&p, "/json").await.json()["slideshow"].is_object());
    assert_eq!(
        get(&p, "/uuid").await.json()["uuid"]
            .as_str()
            .unwrap()
            .len(),
        36
    );
    assert_eq!(
        get(&p, "/post").await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );

    let post = send(
        &client(),
        Request::post(format!("http://{}/post", p.addr))
            .body(bytes_body(r#"{"k":1}"#))
            .unwrap(),
    )
    .await
    .json();
    assert_eq!(post["json"]["k"], 1);
    assert_eq!(post["data"], r#"{"k":1}"#);

    let lines = get(&p, "/stream/3").await;
    let ids: Vec<u64> = String::from_utf8_lossy(&lines.body)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ids, [0, 1, 2]);

    let gz = get(&p, "/gzip").await;
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&gz.body[..])
        .read_to_string(&mut plain)
        .unwrap();
    assert!(plain.contains("\"gzipped\": true"), "{plain}");

    let drip = get(&p, "/drip?numbytes=4&duration=0.1&code=201").await;
    assert_eq!((drip.status.as_u16(), &drip.body[..]), (201, &b"****"[..]));
    assert_eq!(get(&p, "/nope").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn out_of_range_parameters_are_a_400_not_an_abort() {
    let p = Provider::start(local0()).await.unwrap();
    for path in [
        "/drip?duration=18446744073709551616",
        "/drip?duration=1e300",
        "/drip?delay=-1",
        "/drip?numbytes=lots",
        "/drip?code=99999",
    ] {
        let got = get(&p, path).await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{path}");
    }
    assert_eq!(
        get(&p, "/delay/18446744073709551616").await.status,
        StatusCode::NOT_FOUND
    );
    // Still serving after all of them.
    assert_eq!(get(&p, "/static").await.status, StatusCode::OK);
}
