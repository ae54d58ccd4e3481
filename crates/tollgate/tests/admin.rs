//! The admin listener: health, readiness, metrics, effective config with secrets masked.

mod support;

use http::{Request, StatusCode};
use support::*;

#[tokio::test]
async fn health_readiness_and_unknown_paths() {
    let gw = gateway("").await;
    let h = admin_get(&gw, "/healthz").await;
    assert_eq!((h.status, &h.body[..]), (StatusCode::OK, &b"ok\n"[..]));
    assert_eq!(admin_get(&gw, "/readyz").await.status, StatusCode::OK);
    assert_eq!(admin_get(&gw, "/nope").await.status, StatusCode::NOT_FOUND);
    let got = send(
        &client(),
        Request::get(format!("http://{}/reload", gw.admin_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn metrics_count_requests_errors_and_latency() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let c = client();
    for _ in 0..3 {
        send(&c, via_header(&gw, up.addr, "/").body(empty()).unwrap()).await;
    }
    send(
        &c,
        Request::get(format!("http://{}/", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    let text = metrics_when(&gw, |t| {
        t.contains("status_class=\"2xx\"} 3") && t.contains("missing_target")
    })
    .await;
    assert!(
        text.contains(
            "tollgate_requests_total{host=\"127.0.0.1\",method=\"GET\",status_class=\"2xx\"} 3"
        ),
        "{text}"
    );
    assert!(
        text.contains("tollgate_errors_total{code=\"missing_target\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_request_duration_seconds_count{host=\"127.0.0.1\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_upstream_duration_seconds_count{host=\"127.0.0.1\"} 3"),
        "{text}"
    );
    assert!(text.contains("tollgate_client_connections "), "{text}");
    assert!(
        text.contains("tollgate_upstream_connections 1"),
        "pooled connection counted: {text}"
    );
    assert!(text.contains("tollgate_events_dropped_total 0"), "{text}");
}

#[tokio::test]
async fn config_is_effective_and_masks_secrets() {
    // SAFETY: only this test reads this variable, before any thread could race on it.
    unsafe { std::env::set_var("TOLLGATE_TEST_API_KEY", "sk-live-123") };
    let gw = gateway(
        "routes:\n  - prefix: /pay\n    upstream: https://pay.example.com/keys/${TOLLGATE_TEST_API_KEY}\nupstream:\n  pool:\n    max_idle_per_host: 8\n",
    )
    .await;
    let got = admin_get(&gw, "/config").await;
    let text = String::from_utf8_lossy(&got.body);
    assert!(!text.contains("sk-live-123"), "secret leaked: {text}");
    let cfg = got.json();
    assert_eq!(
        cfg["routes"][0]["upstream"],
        "https://pay.example.com/keys/${TOLLGATE_TEST_API_KEY}"
    );
    assert_eq!(cfg["upstream"]["pool"]["max_idle_per_host"], 8);
    assert_eq!(
        cfg["upstream"]["connect_timeout"], "5s",
        "defaults are shown"
    );
    assert_eq!(cfg["listen"]["max_header_bytes"], 65536);
    // Validation errors do not print substituted secrets either.
    let err = tollgate::Config::from_yaml(
        "routes:\n  - prefix: /x\n    upstream: https://u:${TOLLGATE_TEST_API_KEY}@h.example.com\n",
    )
    .unwrap_err();
    assert!(!format!("{err:?}").contains("sk-live-123"), "{err:?}");
}
