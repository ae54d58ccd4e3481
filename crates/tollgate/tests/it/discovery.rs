//! Endpoint discovery on a realistic mix of paths (policy templates, learned `{id}`s, a
//! position collapsed past `max_children`), its caps, per-endpoint metrics, consumer
//! counts, and remedy statistics overall, per endpoint and per status.

use crate::support::*;
use serde_json::Value;
use std::time::Duration;

/// Polls `GET /discover` until the endpoints' counts add up to `n`.
async fn discovered(gw: &tollgate::Gateway, n: u64) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        last = admin_get(gw, "/discover").await.json();
        let total: u64 = last["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["count"].as_u64().unwrap())
            .sum();
        if total >= n {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("discovery did not count {n} calls: {last}");
}

fn find<'a>(d: &'a Value, method: &str, endpoint: &str) -> &'a Value {
    d["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["method"] == method && e["endpoint"] == endpoint)
        .unwrap_or_else(|| panic!("no {method} {endpoint} in {d:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_percentiles_follow_calls_of_very_different_durations() {
    // 1 ms, 120 ms and 2 s calls to one endpoint each, and an aggregated endpoint whose
    // backend takes 300 ms.
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        let ms: u64 = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(ms)).await;
        answer(200, &[("content-type", "application/json")], "{}")
    })
    .await;
    let gw = gateway(&format!(
        "diagnosis:\n  discovery: {{ enabled: true }}\nendpoints:\n  - path: /agg\n    backends:\n      - url: http://{}/slow/300\n",
        up.addr
    ))
    .await;
    // What the client saw of each endpoint's calls, the longest: the gateway's own time
    // is inside it. Bounds from what was observed, not from how fast a loaded machine is.
    let mut longest = Vec::new();
    for ms in [1, 120, 2000] {
        let mut most = Duration::ZERO;
        for _ in 0..3 {
            let path = format!("/lit{ms}/sleep/{ms}");
            let sent = std::time::Instant::now();
            assert_eq!(get_via(&gw, up.addr, &path, &[]).await.status, 200);
            most = most.max(sent.elapsed());
        }
        longest.push((ms as f64, most.as_secs_f64() * 1e3));
    }
    let c = client();
    let sent = std::time::Instant::now();
    let agg = send(
        &c,
        http::Request::get(format!("http://{}/agg", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    let agg_ms = sent.elapsed().as_secs_f64() * 1e3;
    assert_eq!(agg.status, 200);
    let d = discovered(&gw, 9).await;
    for (ms, seen) in longest {
        let e = find(&d, "GET", &format!("/lit{ms}/sleep/{{id}}"));
        let l = &e["latency_ms"];
        for q in ["p50", "p99", "max"] {
            let got = l[q].as_f64().unwrap();
            // At least the sleep, and at most the longest call the client saw, each within
            // the histogram's 2 significant figures (1 %).
            assert!(
                got >= ms * 0.99 && got <= seen * 1.01,
                "{ms} ms call (the client saw at most {seen:.1} ms): {q} = {got} in {l}"
            );
        }
    }
    let mut agg = Value::Null;
    for _ in 0..300 {
        agg = admin_get(&gw, "/discover").await.json()["aggregated"].clone();
        if agg.to_string().contains("latency_ms") && agg[0]["count"].as_u64() == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let p99 = agg[0]["latency_ms"]["p99"].as_f64().unwrap_or(0.0);
    assert!(
        p99 >= 297.0 && p99 <= agg_ms * 1.01,
        "aggregated /agg p99 {p99}: {agg:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realistic_mix_of_paths_becomes_templates() {
    let up = echo_upstream().await;
    let yaml = r#"
policies:
  - name: repos
    match: { path: "/repos/{owner}/{repo}/issues" }
diagnosis:
  discovery:
    enabled: true
    metrics: true
    max_children: 5
    consumer_header: x-app
"#;
    let gw = gateway(yaml).await;
    let mut calls = 0;
    let mut get = |path: String, app: &'static str| {
        calls += 1;
        let gw = &gw;
        let addr = up.addr;
        async move {
            let r = get_via(gw, addr, &path, &[("x-app", app)]).await;
            assert_eq!(r.status, 200, "{path}");
        }
    };
    // Ids of every kind.
    for id in [
        "42",
        "1337",
        "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
        "cus_9s6XKzkNRiz8i3",
    ] {
        get(format!("/v1/customers/{id}"), "billing").await;
    }
    get("/v1/customers/42/charges".into(), "billing").await;
    get("/v1/customers/77/charges".into(), "reports").await;
    // A policy's template names its calls.
    get("/repos/rust-lang/rust/issues".into(), "bot").await;
    get("/repos/tokio-rs/tokio/issues".into(), "bot").await;
    // Names are not ids, until a position has too many distinct values.
    for user in ["alice", "bob", "carol", "dave", "erin", "frank", "grace"] {
        get(format!("/users/{user}"), "web").await;
    }
    get("/v1/balance".into(), "billing").await;
    let d = discovered(&gw, calls).await;

    // The upstream's port is not http's default: the host keeps it.
    let host = up.addr.to_string();
    let customers = find(&d, "GET", "/v1/customers/{id}");
    assert_eq!(customers["count"], 4);
    assert_eq!(customers["host"], host);
    assert_eq!(customers["status"]["200"], 4);
    assert!(customers["latency_ms"]["p50"].as_f64().unwrap() > 0.0);
    assert!(customers["provider_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(customers["response_bytes"].as_u64().unwrap() > 0);
    assert!(customers["first_seen"].as_str().unwrap() <= customers["last_seen"].as_str().unwrap());
    let charges = find(&d, "GET", "/v1/customers/{id}/charges");
    assert_eq!(charges["count"], 2);
    assert_eq!(charges["consumers"]["billing"], 1);
    assert_eq!(charges["consumers"]["reports"], 1);
    assert_eq!(find(&d, "GET", "/repos/{owner}/{repo}/issues")["count"], 2);
    // Past max_children (5) names, the position collapsed and the first five merged in.
    assert_eq!(find(&d, "GET", "/users/{id}")["count"], 7);
    assert!(!d.to_string().contains("/users/alice"), "{d:#}");
    assert_eq!(find(&d, "GET", "/v1/balance")["count"], 1);
    // Sorted by count.
    let counts: Vec<u64> = d["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["count"].as_u64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{counts:?}");

    // Per-endpoint Prometheus series, labelled by template.
    let m = metrics_when(&gw, |m| m.contains("tollgate_endpoint_requests_total{")).await;
    let line = format!(
        "tollgate_endpoint_requests_total{{host=\"{host}\",method=\"GET\",endpoint=\"/v1/customers/{{id}}\",status_class=\"2xx\"}} 4"
    );
    assert!(m.contains(&line), "{line} in\n{m}");
    assert!(m.contains("tollgate_endpoint_duration_seconds_bucket{"));
    assert!(m.contains("tollgate_endpoint_response_bytes_total{"));
    assert!(!m.contains("cus_9s6XKzkNRiz8i3"), "no raw path in a label");

    // The CLI table, from the same JSON.
    let table = tollgate::diagnosis::discovery::table::table(&d);
    assert!(
        table.lines().nth(1).unwrap().contains("/users/{id}"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_bound_memory_and_label_sets() {
    let up = echo_upstream().await;
    let yaml = "diagnosis:\n  discovery:\n    enabled: true\n    metrics: true\n    max_endpoints_per_host: 3\n    max_children: 1000\n";
    let gw = gateway(yaml).await;
    for i in 0..20 {
        let r = get_via(
            &gw,
            up.addr,
            &format!(
                "/page-{}",
                "abcdefghijklmnopqrstuvwxyz".chars().nth(i).unwrap()
            ),
            &[],
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let d = discovered(&gw, 20).await;
    let eps = d["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 4, "3 endpoints and `other`: {d:#}");
    assert_eq!(find(&d, "GET", "other")["count"], 17);
    assert_eq!(d["folded"], 17);
    let m = metrics_when(&gw, |m| m.contains("tollgate_endpoints_folded_total 17")).await;
    let series = m
        .lines()
        .filter(|l| l.starts_with("tollgate_endpoint_requests_total{"))
        .count();
    assert_eq!(series, 4, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_off_says_how_to_turn_it_on() {
    let gw = gateway("").await;
    let d = admin_get(&gw, "/discover").await.json();
    assert_eq!(d["enabled"], false);
    assert!(d["message"].as_str().unwrap().contains("discovery"));
    assert!(tollgate::diagnosis::discovery::table::table(&d).contains("enabled: true"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remedy_stats_count_actions_overall_per_endpoint_and_per_status() {
    // Its limit counts per hour: a window ending mid-test would let one more through.
    clear_of_the_hour_end(30).await;
    let up = echo_upstream().await;
    let yaml = r#"
policies:
  - name: limited
    match: { path: "/items/{id}" }
    rate_limit: { limit: 2, window: hour }
diagnosis:
  discovery: { enabled: true, metrics: true }
"#;
    let gw = gateway(yaml).await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        statuses.push(
            get_via(&gw, up.addr, &format!("/items/{i}"), &[])
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429]);
    let mut s = Value::Null;
    for _ in 0..300 {
        s = admin_get(&gw, "/remedy-stats").await.json();
        if s["policies"][0]["requests"] == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let p = &s["policies"][0];
    assert_eq!(p["policy"], "limited");
    assert_eq!(p["requests"], 5);
    let action = |scope: &Value, a: &str| {
        scope["actions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["remedy"] == "rate_limit" && x["action"] == a)
            .cloned()
            .unwrap_or_else(|| panic!("no rate_limit/{a} in {scope}"))
    };
    assert_eq!(action(p, "allowed")["count"], 2);
    assert_eq!(action(p, "rejected")["count"], 3);
    assert_eq!(action(p, "rejected")["ratio"], 0.6);
    let e = &s["endpoints"][0];
    assert_eq!(e["endpoint"], format!("GET {} /items/{{id}}", up.addr));
    assert_eq!(action(e, "rejected")["count"], 3);
    let by_status = |code: &str| {
        s["statuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["status"] == code)
            .cloned()
            .unwrap()
    };
    assert_eq!(action(&by_status("429"), "rejected")["ratio"], 1.0);
    assert_eq!(action(&by_status("200"), "allowed")["count"], 2);
    // The same actions per endpoint in Prometheus.
    let m = metrics_when(&gw, |m| {
        m.contains("tollgate_endpoint_remedy_actions_total{")
    })
    .await;
    let line = format!(
        "tollgate_endpoint_remedy_actions_total{{host=\"{}\",method=\"GET\",endpoint=\"/items/{{id}}\",remedy=\"rate_limit\",action=\"rejected\"}} 3",
        up.addr
    );
    assert!(m.contains(&line), "{line} in\n{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_consumer_header_is_counted_by_digest() {
    let up = echo_upstream().await;
    let gw =
        gateway("diagnosis:\n  discovery: { enabled: true, consumer_header: authorization }\n")
            .await;
    for token in ["sk-live-aaaa1111", "sk-live-aaaa1111", "sk-live-bbbb2222"] {
        let auth = format!("Bearer {token}");
        let r = get_via(&gw, up.addr, "/v1/models", &[("authorization", &auth)]).await;
        assert_eq!(r.status, 200);
    }
    let d = discovered(&gw, 3).await;
    let text = d.to_string();
    assert!(!text.contains("sk-live"), "{d:#}");
    let consumers = find(&d, "GET", "/v1/models")["consumers"]
        .as_object()
        .unwrap()
        .clone();
    // One token stays one consumer; the scheme shows what kind of credential it was.
    let mut counts: Vec<u64> = consumers.values().map(|v| v.as_u64().unwrap()).collect();
    counts.sort();
    assert_eq!(counts, [1, 2], "{consumers:?}");
    assert!(
        consumers
            .keys()
            .all(|k| k.starts_with("Bearer sha256:") && k.len() == 26),
        "{consumers:?}"
    );
}
