//! Metric labels stay bounded whatever clients send: refused targets are no labels,
//! unknown methods are `other`, and past `metrics.max_hosts` hosts fold into `other`.

use crate::support::*;
use http::{Method, Request, StatusCode};

#[tokio::test]
async fn client_input_never_grows_the_label_set() {
    let up = echo_upstream().await;
    let gw = gateway("domains:\n  deny: ['*.denied.test']\nmetrics:\n  max_hosts: 2\n").await;
    let c = client();
    for i in 0..200 {
        let got = send(
            &c,
            Request::get(format!("http://{}/", gw.proxy_addr))
                .header("x-tollgate-host", format!("h{i}.denied.test"))
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(got.status, StatusCode::FORBIDDEN);
    }
    let long_method = "X".repeat(10_000);
    let got = send(
        &c,
        via_header(&gw, up.addr, "/")
            .method(Method::from_bytes(long_method.as_bytes()).unwrap())
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    // Three validated hosts with a cap of two: the third is `other`.
    let port = up.addr.port();
    for host in ["127.0.0.1", "localhost", "[::1]"] {
        send(
            &c,
            Request::get(format!("http://{}/", gw.proxy_addr))
                .header("x-tollgate-host", format!("{host}:{port}"))
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap(),
        )
        .await;
    }
    let text = metrics_when(&gw, |t| {
        t.contains("tollgate_metric_hosts_folded_total 1")
            && t.contains("code=\"domain_denied\",status_class=\"4xx\"} 200")
    })
    .await;
    assert!(
        !text.contains("denied.test"),
        "refused hosts are no labels:\n{text}"
    );
    assert!(!text.contains(&long_method[..100]), "methods are bounded");
    assert!(text.contains("method=\"other\""), "{text}");
    assert!(text.contains("host=\"other\""), "{text}");
    assert!(
        text.contains("tollgate_metric_hosts_folded_total 1"),
        "{text}"
    );
    assert!(
        text.contains("code=\"domain_denied\",status_class=\"4xx\"} 200"),
        "{text}"
    );
}
