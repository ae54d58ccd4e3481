//! The admin listener: health, readiness, metrics, effective config with secrets masked.

use crate::support::*;
use http::{Request, StatusCode};

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
        text.contains("tollgate_errors_total{code=\"missing_target\",status_class=\"4xx\"} 1"),
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
    assert_eq!(
        cfg["listen"]["max_header_bytes"], "64KiB",
        "a size as the file writes it"
    );
    // Validation errors do not print substituted secrets either.
    let err = tollgate::Config::from_yaml(
        "routes:\n  - prefix: /x\n    upstream: https://u:${TOLLGATE_TEST_API_KEY}@h.example.com\n",
    )
    .unwrap_err();
    assert!(!format!("{err:?}").contains("sk-live-123"), "{err:?}");
}

#[tokio::test]
async fn config_shows_every_remedy_key_and_masks_literal_secrets() {
    // SAFETY: only this test reads this variable.
    unsafe { std::env::set_var("TOLLGATE_TEST_ADMIN_KEY_B", "sk-b-value") };
    let gw = gateway(
        r#"
breakers:
  gh: {consecutive_failures: 3}
policies:
  - name: p
    match: {host: api.example.com}
    mock: {body: hi, when: {header: x-mock}}
    request: {set_headers: {x-api-version: "2", x-api-key: literal-key-123}}
    credentials:
      accounts:
        - bearer: literal-secret-a
        - bearer: ${TOLLGATE_TEST_ADMIN_KEY_B}
    breaker: gh
    provider_throttling: {}
    retry: {attempts: 4}
    timeouts: {total: 30s}
"#,
    )
    .await;
    let got = admin_get(&gw, "/config").await;
    let text = String::from_utf8_lossy(&got.body).into_owned();
    assert!(
        !text.contains("literal-secret-a") && !text.contains("sk-b-value"),
        "{text}"
    );
    assert!(!text.contains("literal-key-123"), "{text}");
    let p = &got.json()["policies"][0];
    // Before: no timeouts, mock, transforms or throttling, retry as `attempts` alone.
    assert_eq!(p["retry"]["attempts"], 4);
    assert_eq!(p["retry"]["base_delay"], "100ms", "defaults are shown");
    assert_eq!(p["timeouts"]["total"], "30s");
    assert_eq!(p["mock"]["when"]["header"], "x-mock");
    assert_eq!(p["provider_throttling"]["max_throttle"], "1h");
    assert_eq!(p["request"]["set_headers"]["x-api-version"], "2");
    assert_eq!(p["request"]["set_headers"]["x-api-key"], "MASKED");
    assert_eq!(p["breaker"]["name"], "gh");
    assert_eq!(p["breaker"]["consecutive_failures"], 3);
    assert_eq!(p["breaker"]["open_for"], "30s");
    let accounts = &p["credentials"]["accounts"];
    assert_eq!(accounts[0]["bearer"], "MASKED");
    assert_eq!(accounts[1]["bearer"], "${TOLLGATE_TEST_ADMIN_KEY_B}");
    assert_eq!(p["remedies"][0], "timeouts");
}

/// Every metric family a live gateway's `/metrics` shows is in configuration.md's table of
/// metrics (generated from the registry: this holds the generator to what is served).
#[tokio::test]
async fn the_metrics_list_in_the_docs_is_complete() {
    let gw = gateway(
        "policies:\n  - name: p\n    rate_limit: {limit: 5, window: hour}\ndiagnosis:\n  discovery: {enabled: true, metrics: true}\n",
    )
    .await;
    // Some traffic, so that families with labels have samples to show.
    let up = echo_upstream().await;
    for _ in 0..2 {
        get_via(&gw, up.addr, "/items/1", &[]).await;
    }
    let text = metrics_when(&gw, |t| t.contains("tollgate_remedy_actions_total{")).await;
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let row = docs
        .split("<!-- generated:metrics-list -->")
        .nth(1)
        .and_then(|t| t.split("<!-- /generated:metrics-list -->").next())
        .expect("the table of metrics");
    let (mut seen, mut missing) = (0, Vec::<String>::new());
    for name in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = name.split_whitespace().next().unwrap();
        // Counters are exposed as `NAME_total`, documented so.
        seen += 1;
        let listed = row.contains(&format!("`{name}")) || row.contains(&format!("`{name}_total"));
        if !listed {
            missing.push(name.to_owned());
        }
    }
    assert!(seen >= 8, "{text}");
    assert!(
        missing.is_empty(),
        "not in configuration.md's table of metrics: {missing:?}"
    );
}

/// Without a token, a page that rebinds its own name to the admin listener's address
/// (DNS rebinding: `Host` and `Origin` are then the page's, and the browser calls it
/// same-origin) is refused; the listener's address, `localhost` and the names in
/// `admin.hosts` are answered.
#[tokio::test]
async fn a_rebound_name_does_not_reach_the_admin_api_without_a_token() {
    let gw =
        gateway("admin: {hosts: [tollgate-admin.monitoring.svc, '*.internal.example']}\n").await;
    let port = gw.admin_addr.port();
    let ask = |method: http::Method, path: &str, host: String| {
        let addr = gw.admin_addr;
        let path = path.to_owned();
        async move {
            let origin = format!("http://{host}");
            send(
                &client(),
                Request::builder()
                    .method(method)
                    .uri(format!("http://{addr}{path}"))
                    .header("host", host)
                    .header("origin", origin)
                    .header("sec-fetch-site", "same-origin")
                    .body(empty())
                    .unwrap(),
            )
            .await
        }
    };
    let evil = format!("rebind.evil.example:{port}");
    for (method, path) in [
        (http::Method::POST, "/reload"),
        (http::Method::GET, "/config"),
        (http::Method::GET, "/ui/api/summary"),
    ] {
        let got = ask(method.clone(), path, evil.clone()).await;
        assert_eq!(
            got.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{method} {path}"
        );
        assert_eq!(got.json()["error"]["code"], "unknown_host");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("tollgate-admin.monitoring.svc:{port}"),
        "prometheus.internal.example".to_owned(),
    ] {
        let got = ask(http::Method::GET, "/config", host.clone()).await;
        assert_eq!(got.status, StatusCode::OK, "{host}");
    }
    // The probes answer whatever the name.
    let got = ask(http::Method::GET, "/healthz", evil.clone()).await;
    assert_eq!(got.status, StatusCode::OK);
    // With a token, the token is the proof: any name.
    let gw = gateway("admin: {token: t0ken}\n").await;
    let got = send(
        &client(),
        Request::get(format!("http://{}/config", gw.admin_addr))
            .header("host", "tollgate-admin.default.svc:8081")
            .header("authorization", "Bearer t0ken")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
}

/// `request` sent from the loopback address `from` (the whole 127.0.0.0/8 is this
/// machine's): the status line and headers of the answer.
async fn from_address(from: &str, to: std::net::SocketAddr, request: &str) -> String {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut c = s.connect(to).await.unwrap();
    use tokio::io::AsyncWriteExt;
    c.write_all(request.as_bytes()).await.unwrap();
    read_head(&mut c).await
}

fn login_form(host: std::net::SocketAddr, token: &str) -> String {
    let body = format!("token={token}");
    format!(
        "POST /ui/login HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Wrong tokens slow their address down (the form and `Authorization` alike): past the
/// first few, its next token is refused unchecked for a while, counted; the right token
/// from another address is taken at once.
#[tokio::test]
async fn wrong_tokens_slow_their_address_down_and_only_theirs() {
    let gw = gateway("admin: {token: right-token}\n").await;
    let admin = gw.admin_addr;
    for i in 0..6 {
        let head = from_address("127.0.0.7", admin, &login_form(admin, "guess")).await;
        assert!(head.starts_with("HTTP/1.1 303"), "wrong token {i}: {head}");
    }
    // Closed now: even the right token is not checked from this address.
    let head = from_address("127.0.0.7", admin, &login_form(admin, "right-token")).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let api = format!(
        "GET /config HTTP/1.1\r\nhost: {admin}\r\nauthorization: Bearer guess\r\nconnection: close\r\n\r\n"
    );
    let head = from_address("127.0.0.7", admin, &api).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    // Another address is not affected.
    let head = from_address("127.0.0.8", admin, &login_form(admin, "right-token")).await;
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    assert!(head.contains("location: /ui\r\n"), "{head}");
    let metrics = send(
        &client(),
        Request::get(format!("http://{admin}/metrics"))
            .header("authorization", "Bearer right-token")
            .body(empty())
            .unwrap(),
    )
    .await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.contains("tollgate_ui_logins_total{result=\"throttled\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tollgate_ui_logins_total{result=\"error\"} 6"),
        "{text}"
    );
}

/// Live-call streams are bounded: past the most at once another is answered 503, and a
/// browser gone frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_are_bounded() {
    let gw = gateway("").await;
    let admin = gw.admin_addr;
    let open_one = || async move {
        let mut c = tokio::net::TcpStream::connect(admin).await.unwrap();
        use tokio::io::AsyncWriteExt;
        c.write_all(format!("GET /ui/api/live HTTP/1.1\r\nhost: {admin}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let head = read_head(&mut c).await;
        (c, head)
    };
    let mut open = Vec::new();
    for i in 0..tollgate::ui::live::MAX_STREAMS {
        let (c, head) = open_one().await;
        assert!(head.starts_with("HTTP/1.1 200"), "stream {i}: {head}");
        open.push(c);
    }
    let (_, head) = open_one().await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    drop(open);
    metrics_when(&gw, |t| t.contains("tollgate_ui_live_streams 0\n")).await;
    let (_, head) = open_one().await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}
