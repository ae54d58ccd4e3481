//! Hot reload: `POST /reload` and file watching; a bad file is rejected with every error
//! and the running config kept; a reload under concurrent load fails zero requests.

use crate::support::*;
use http::{Request, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

fn route_yaml(prefix: &str, upstream: std::net::SocketAddr) -> String {
    format!("routes:\n  - prefix: {prefix}\n    upstream: http://{upstream}\n")
}

/// GETs `url` until it answers 200 or 10 s have passed (a deadline for the watcher, not a
/// speed assertion); the last status.
async fn status_once_ok(url: &str) -> StatusCode {
    let mut status = StatusCode::BAD_REQUEST;
    for _ in 0..200 {
        status = send(&client(), Request::get(url).body(empty()).unwrap())
            .await
            .status;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_fails_zero_requests() {
    let a = echo_upstream().await;
    let b = echo_upstream().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), route_yaml("/api", a.addr)).unwrap();
    let gw = gateway_from_file(file.path(), false).await;

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut workers = Vec::new();
    for w in 0..16 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        let url = format!("http://{}/api/w{w}", gw.proxy_addr);
        // Half the workers on keep-alive HTTP/1.1, half on one HTTP/2 connection each.
        let c = if w % 2 == 0 { client() } else { h2c_client() };
        workers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && n < 5_000 {
                n += 1;
                let got = send(&c, Request::get(&url).body(empty()).unwrap()).await;
                if got.status == StatusCode::OK && got.json()["path"] == format!("/w{w}") {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for i in 0..30 {
        let up = if i % 2 == 0 { b.addr } else { a.addr };
        std::fs::write(file.path(), route_yaml("/api", up)).unwrap();
        let got = post_reload(&gw).await;
        assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 0);
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed across 30 reloads",
        ok + failed
    );
}

#[tokio::test]
async fn bad_reload_is_rejected_with_every_error_and_config_is_kept() {
    let a = echo_upstream().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), route_yaml("/api", a.addr)).unwrap();
    let gw = gateway_from_file(file.path(), false).await;
    std::fs::write(
        file.path(),
        "upstream:\n  connect_timeout: soon\nroutes:\n  - prefix: nope\n    upstream: http://x\n",
    )
    .unwrap();
    let got = post_reload(&gw).await;
    assert_eq!(got.status, StatusCode::UNPROCESSABLE_ENTITY);
    let errors: Vec<String> = got.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("upstream.connect_timeout:")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("routes[0]:")),
        "{errors:?}"
    );
    // Still serving the old config.
    let got = send(
        &client(),
        Request::get(format!("http://{}/api/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    let m = admin_get(&gw, "/metrics").await;
    let text = String::from_utf8_lossy(&m.body);
    assert!(
        text.contains("tollgate_reloads_total{result=\"error\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn syntax_errors_name_line_and_column() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "listen:\n  address: 127.0.0.1:0\n").unwrap();
    let gw = gateway_from_file(file.path(), false).await;
    std::fs::write(file.path(), "listen:\n  adress: 127.0.0.1:0\n").unwrap();
    let got = post_reload(&gw).await;
    assert_eq!(got.status, StatusCode::UNPROCESSABLE_ENTITY);
    let e = got.json()["errors"][0].as_str().unwrap().to_owned();
    assert!(
        e.contains("unknown field `adress`") && e.contains("line 2"),
        "{e}"
    );
}

#[tokio::test]
async fn file_changes_are_picked_up() {
    let a = echo_upstream().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), route_yaml("/one", a.addr)).unwrap();
    let gw = gateway_from_file(file.path(), true).await;
    std::fs::write(file.path(), route_yaml("/two/longer/prefix", a.addr)).unwrap();
    let url = format!("http://{}/two/longer/prefix/x", gw.proxy_addr);
    let status = status_once_ok(&url).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the watcher reloaded the changed file"
    );
    let cfg = admin_get(&gw, "/config").await.json();
    assert_eq!(cfg["routes"][0]["prefix"], "/two/longer/prefix");
}

#[tokio::test]
async fn reload_without_a_file_is_refused() {
    let gw = gateway("").await;
    let got = post_reload(&gw).await;
    assert_eq!(got.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn reload_reports_a_typed_diff() {
    let a = echo_upstream().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), route_yaml("/api", a.addr)).unwrap();
    let gw = gateway_from_file(file.path(), false).await;
    std::fs::write(
        file.path(),
        route_yaml("/api", a.addr) + "domains:\n  deny: ['x.test']\n",
    )
    .unwrap();
    let got = post_reload(&gw).await.json();
    assert_eq!(got["diff"]["changed"], serde_json::json!(["domains"]));
    assert_eq!(got["diff"]["paths"], serde_json::json!(["domains.deny[0]"]));
    assert_eq!(got["diff"]["needs_restart"], serde_json::json!([]));
    // A change deep inside a policy is named by its path (before: `changed: []`).
    std::fs::write(
        file.path(),
        route_yaml("/api", a.addr)
            + "domains:\n  deny: ['x.test']\npolicies:\n  - name: p\n    retry: {base_delay: 250ms}\n",
    )
    .unwrap();
    post_reload(&gw).await;
    std::fs::write(
        file.path(),
        route_yaml("/api", a.addr)
            + "domains:\n  deny: ['x.test']\npolicies:\n  - name: p\n    retry: {base_delay: 300ms}\n",
    )
    .unwrap();
    let got = post_reload(&gw).await.json();
    assert_eq!(got["diff"]["changed"], serde_json::json!(["policies"]));
    assert_eq!(
        got["diff"]["paths"],
        serde_json::json!(["policies[0].retry.base_delay"])
    );
}

#[tokio::test]
async fn an_empty_file_is_refused_and_the_running_config_kept() {
    let a = echo_upstream().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), route_yaml("/api", a.addr)).unwrap();
    let gw = gateway_from_file(file.path(), false).await;
    for empty in ["", "\n  \n"] {
        std::fs::write(file.path(), empty).unwrap();
        let got = post_reload(&gw).await;
        assert_eq!(got.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            got.json()["errors"][0].as_str().unwrap().contains("empty"),
            "{:?}",
            got.body
        );
    }
    let got = send(
        &client(),
        Request::get(format!("http://{}/api/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "the routes are still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_applies_only_files_that_have_settled() {
    let a = echo_upstream().await;
    let full = |round: usize| {
        format!(
            "domains:\n  deny: ['denied.test']\n{}  - prefix: /round{round}\n    upstream: http://{}\n",
            route_yaml("/api", a.addr),
            a.addr
        )
    };
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), full(0)).unwrap();
    let gw = gateway_from_file(file.path(), true).await;
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicUsize::new(0));
    let (s, f, url) = (
        stop.clone(),
        failed.clone(),
        format!("http://{}/api/x", gw.proxy_addr),
    );
    let load = tokio::spawn(async move {
        let c = client();
        while !s.load(Ordering::Relaxed) {
            if send(&c, Request::get(&url).body(empty()).unwrap())
                .await
                .status
                != StatusCode::OK
            {
                f.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    for round in 1..=4 {
        // A writer that is not atomic: the first part (valid YAML on its own, without the
        // routes) sits in the file for a moment before the rest arrives.
        std::fs::write(file.path(), "domains:\n  deny: ['denied.test']\n").unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        std::fs::write(file.path(), full(round)).unwrap();
        let url = format!("http://{}/round{round}/x", gw.proxy_addr);
        let status = status_once_ok(&url).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "round {round} applied once it settled"
        );
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "a half-written file was applied"
    );
}

#[tokio::test]
async fn a_rotated_secret_is_a_changed_path_and_its_value_never_shown() {
    let a = echo_upstream().await;
    let file = tempfile::NamedTempFile::new().unwrap();
    let with = |token: &str, key: &str| {
        route_yaml("/api", a.addr)
            + &format!(
                "admin: {{token: {token}}}\npolicies:\n  - name: p\n    credentials: {{bearer: {key}}}\n"
            )
    };
    std::fs::write(file.path(), with("old-admin-token", "sk-old-key")).unwrap();
    let gw = gateway_from_file(file.path(), false).await;
    std::fs::write(file.path(), with("new-admin-token", "sk-new-key")).unwrap();
    let req = http::Request::post(format!("http://{}/reload", gw.admin_addr))
        .header("authorization", "Bearer old-admin-token")
        .body(empty())
        .unwrap();
    let got = send(&client(), req).await;
    let text = String::from_utf8_lossy(&got.body).into_owned();
    assert_eq!(got.status, StatusCode::OK, "{text}");
    let diff = &got.json()["diff"];
    let paths: Vec<&str> = diff["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(paths.contains(&"admin.token"), "{diff}");
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("policies[0].credentials")),
        "{diff}"
    );
    for secret in [
        "old-admin-token",
        "new-admin-token",
        "sk-old-key",
        "sk-new-key",
    ] {
        assert!(!text.contains(secret), "{secret} shown: {text}");
    }
    // /config still shows them as MASKED, without a fingerprint.
    let req = http::Request::get(format!("http://{}/config", gw.admin_addr))
        .header("authorization", "Bearer new-admin-token")
        .body(empty())
        .unwrap();
    let config = String::from_utf8_lossy(&send(&client(), req).await.body).into_owned();
    assert!(
        config.contains("\"MASKED\"") && !config.contains("MASKED#"),
        "{config}"
    );
}

#[tokio::test]
async fn config_shows_the_addresses_listened_on() {
    // The tests' gateways run with --listen/--admin 127.0.0.1:0 over the file's.
    let gw = gateway("listen: {address: '127.0.0.1:18000'}\nadmin: {address: '127.0.0.1:18081'}\n")
        .await;
    let config = admin_get(&gw, "/config").await.json();
    assert_eq!(config["listen"]["address"], "127.0.0.1:0", "{config}");
    assert_eq!(config["admin"]["address"], "127.0.0.1:0", "{config}");
}
