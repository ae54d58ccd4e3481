//! Aggregated endpoints against real in-process backends: the merge rules, parallel
//! fan-out (checked by the order of events, not by wall time), partial answers, the error
//! contract when every backend fails, what passes from the client to the backends,
//! sequential backends, and the no-op relay; and what a KrakenD user moving over relies
//! on: `*` headers and query, a `User-Agent` on backend calls, gzip answers inflated,
//! numbers kept as written, `{resp0_…}` reading the shaped answer, arrays as `1,2,3`, and
//! service-level defaults (`endpoint_defaults`).

use crate::support::*;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

async fn get(gw: &tollgate::Gateway, path_and_query: &str, headers: &[(&str, &str)]) -> Got {
    let mut b = Request::get(format!("http://{}{path_and_query}", gw.proxy_addr));
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    send(&client(), b.body(empty()).unwrap()).await
}

fn json_answer(v: Value) -> http::Response<tollgate::body::Body> {
    json_text(&v.to_string())
}

/// A JSON answer as written (numbers, spacing).
fn json_text(v: &str) -> http::Response<tollgate::body::Body> {
    answer(200, &[("content-type", "application/json")], v)
}

#[tokio::test]
async fn backends_are_shaped_and_merged_in_declaration_order() {
    let a = upstream(|_| async { json_answer(json!({"a": 1, "shared": "from a"})) }).await;
    let b = upstream(|_| async {
        json_answer(
            json!({"data": {"user": {"name": "ada", "secret": "s"}, "plan": "pro"}, "meta": 1}),
        )
    })
    .await;
    let c = upstream(|_| async { json_answer(json!([{"id": 1}, {"id": 2}])) }).await;
    let d = upstream(|_| async { json_answer(json!({"shared": "from d", "old": true})) }).await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /social/{{user}}
    backends:
      - url: http://{a}/a/{{user}}
      - url: http://{b}/b
        target: data
        deny: [user.secret]
        group: account
      - url: http://{c}/c
        collection: items
      - url: http://{d}/d
        mapping: {{old: renamed}}
"#,
        a = a.addr,
        b = b.addr,
        c = c.addr,
        d = d.addr
    ))
    .await;
    let got = get(&gw, "/social/ada", &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-tollgate-completed"), Some("true"));
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert!(got.header("x-tollgate-request-id").is_some());
    assert_eq!(
        got.json(),
        json!({
            "a": 1,
            "shared": "from d",
            "account": {"user": {"name": "ada"}, "plan": "pro"},
            "items": [{"id": 1}, {"id": 2}],
            "renamed": true
        })
    );
    // Not an endpoint: the usual error for a request with no target.
    assert_eq!(
        get(&gw, "/social", &[]).await.error_code().as_deref(),
        Some("missing_target")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_of_a_round_run_in_parallel() {
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut servers = Vec::new();
    for name in ["x", "y", "z"] {
        let events = events.clone();
        servers.push(
            upstream(move |_| {
                let events = events.clone();
                async move {
                    events.lock().unwrap().push(format!("start {name}"));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    events.lock().unwrap().push(format!("end {name}"));
                    json_answer(json!({ name: true }))
                }
            })
            .await,
        );
    }
    let yaml = format!(
        "endpoints:\n  - path: /all\n    backends:\n{}",
        servers
            .iter()
            .map(|s| format!("      - url: http://{}/\n", s.addr))
            .collect::<String>()
    );
    let gw = gateway(&yaml).await;
    let got = get(&gw, "/all", &[]).await;
    assert_eq!(got.json(), json!({"x": true, "y": true, "z": true}));
    let events = events.lock().unwrap().clone();
    let first_end = events.iter().position(|e| e.starts_with("end")).unwrap();
    assert_eq!(
        events[..first_end].len(),
        3,
        "every backend started before any finished: {events:?}"
    );
}

#[tokio::test]
async fn a_partial_answer_says_so_and_names_the_failed_backends() {
    let ok = upstream(|_| async { json_answer(json!({"ok": 1})) }).await;
    let broken = upstream(|_| async { answer(500, &[], "boom") }).await;
    let slow = stall_upstream().await;
    let text =
        upstream(|_| async { answer(200, &[("content-type", "text/plain")], "hello") }).await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /partial
    timeout: 2s
    errors_key: _errors
    cache_ttl: 60s
    backends:
      - url: http://{ok}/
      - url: http://{broken}/
        name: broken
      - url: http://{slow}/
        name: slow
        timeout: 150ms
      - url: http://{text}/
        group: text
"#,
        ok = ok.addr,
        broken = broken.addr,
        slow = slow.addr,
        text = text.addr
    ))
    .await;
    let got = get(&gw, "/partial", &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-tollgate-completed"), Some("false"));
    assert_eq!(
        got.header("x-tollgate-failed-backends"),
        Some("broken,slow,text")
    );
    assert_eq!(
        got.header("cache-control"),
        None,
        "a partial answer is not cacheable"
    );
    let body = got.json();
    assert_eq!(body["ok"], 1);
    assert_eq!(body["_errors"]["broken"]["error"], "upstream_error");
    assert!(
        body["_errors"]["broken"]["message"]
            .as_str()
            .unwrap()
            .contains("500")
    );
    assert_eq!(body["_errors"]["slow"]["error"], "upstream_timeout");
    assert!(
        body["_errors"]["text"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
}

#[tokio::test]
async fn complete_answers_carry_the_cache_ttl() {
    let ok = upstream(|_| async { json_answer(json!({"ok": 1})) }).await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /c\n    cache_ttl: 5m\n    backends:\n      - url: http://{}/\n",
        ok.addr
    ))
    .await;
    let got = get(&gw, "/c", &[]).await;
    assert_eq!(got.header("x-tollgate-completed"), Some("true"));
    assert_eq!(got.header("cache-control"), Some("public, max-age=300"));
}

#[tokio::test]
async fn every_backend_failing_is_the_error_contract() {
    let broken = upstream(|_| async { answer(503, &[], "down") }).await;
    let slow = stall_upstream().await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /failed
    backends:
      - url: http://{broken}/
      - url: http://{broken}/again
  - path: /late
    timeout: 150ms
    backends:
      - url: http://{slow}/
"#,
        broken = broken.addr,
        slow = slow.addr
    ))
    .await;
    let got = get(&gw, "/failed", &[]).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert_eq!(got.error_code().as_deref(), Some("upstream_error"));
    let message = got.error_message();
    assert!(message.contains("backend0: answered 503"), "{message}");
    // The backends answered: no connection failed, and the sentence says so.
    assert!(!message.contains("connection failed"), "{message}");
    let got = get(&gw, "/late", &[]).await;
    assert_eq!(got.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(got.error_code().as_deref(), Some("upstream_timeout"));
    let message = got.error_message();
    assert!(
        message.starts_with("every backend of endpoint `/late` ") && !message.contains("``"),
        "{message}"
    );
    // Counted as failed calls, each backend with its reason.
    let timeout = r#"backend="backend0",result="timeout"} 1"#;
    let text = metrics_when(&gw, |t| t.contains(timeout)).await;
    assert!(text.contains(timeout), "{text}");
    assert!(text.contains(
        r#"tollgate_aggregate_requests_total{method="GET",endpoint="/failed",result="failed"} 1"#
    ));
}

#[tokio::test]
async fn only_declared_headers_and_query_parameters_reach_the_backends() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /me/{{id}}
    headers: [Authorization]
    query: [page]
    backends:
      - url: http://{echo}/users/{{id}}?fixed=1
"#,
        echo = echo.addr
    ))
    .await;
    let got = get(
        &gw,
        "/me/42?page=2&secret=x",
        &[
            ("authorization", "Bearer t"),
            ("cookie", "session=1"),
            ("x-other", "y"),
        ],
    )
    .await;
    let seen = got.json();
    assert_eq!(seen["path"], "/users/42?fixed=1&page=2");
    let headers: Vec<String> = seen["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap().to_owned())
        .collect();
    assert!(headers.contains(&"authorization".to_owned()), "{headers:?}");
    assert!(!headers.contains(&"cookie".to_owned()), "{headers:?}");
    assert!(!headers.contains(&"x-other".to_owned()), "{headers:?}");
}

#[tokio::test]
async fn declared_query_names_match_their_decoded_form() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /people/{{id}}
    query: ["page[number]", page size]
    backends:
      - url: http://{echo}/users/{{id}}
"#,
        echo = echo.addr
    ))
    .await;
    // What Python `requests` and browsers send for `page[number]=2` and `page size=5`.
    let got = get(
        &gw,
        "/people/7?page%5Bnumber%5D=2&page+size=5&page%5Bother%5D=x",
        &[],
    )
    .await;
    // Forwarded as the client wrote them; the undeclared one is not.
    assert_eq!(
        got.json()["path"],
        "/users/7?page%5Bnumber%5D=2&page+size=5"
    );
}

#[tokio::test]
async fn literal_segments_win_whatever_the_order() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /users/{{id}}\n    backends:\n      - url: http://{a}/by-id/{{id}}\n  - path: /users/me\n    backends:\n      - url: http://{a}/me\n  - path: /a/{{x}}/c\n    backends:\n      - url: http://{a}/x/{{x}}\n  - path: /a/b/{{y}}\n    backends:\n      - url: http://{a}/y/{{y}}\n",
        a = echo.addr
    ))
    .await;
    assert_eq!(get(&gw, "/users/me", &[]).await.json()["path"], "/me");
    assert_eq!(get(&gw, "/users/42", &[]).await.json()["path"], "/by-id/42");
    // The first segment where they differ decides.
    assert_eq!(get(&gw, "/a/b/c", &[]).await.json()["path"], "/y/c");
    assert_eq!(get(&gw, "/a/z/c", &[]).await.json()["path"], "/x/z");
}

#[tokio::test]
async fn parameter_names_may_have_hyphens() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /people/{{user-id}}\n    backends:\n      - url: http://{}/users/{{user-id}}\n",
        echo.addr
    ))
    .await;
    assert_eq!(get(&gw, "/people/7", &[]).await.json()["path"], "/users/7");
}

#[tokio::test]
async fn a_later_backend_uses_an_earlier_answer() {
    let orders =
        upstream(|_| async { json_answer(json!({"order": 9, "customer": {"id": "c 7"}})) }).await;
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /orders/{{id}}
    backends:
      - url: http://{orders}/orders/{{id}}
      - url: http://{echo}/customers/{{resp0.customer.id}}
        group: customer
        allow: [path]
"#,
        orders = orders.addr,
        echo = echo.addr
    ))
    .await;
    let got = get(&gw, "/orders/9", &[]).await;
    assert_eq!(got.header("x-tollgate-completed"), Some("true"));
    let body = got.json();
    assert_eq!(body["order"], 9);
    assert_eq!(body["customer"], json!({"path": "/customers/c%207"}));
}

#[tokio::test]
async fn no_op_relays_one_backend_untouched_and_streams_large_bodies() {
    const SIZE: usize = 8 << 20;
    let big = upstream(|_| async {
        answer(
            201,
            &[
                ("content-type", "application/octet-stream"),
                ("x-from", "backend"),
            ],
            &"x".repeat(SIZE),
        )
    })
    .await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /blob\n    encoding: no-op\n    backends:\n      - url: http://{}/blob\n",
        big.addr
    ))
    .await;
    let got = get(&gw, "/blob", &[]).await;
    assert_eq!(got.status, StatusCode::CREATED);
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    assert_eq!(got.header("x-from"), Some("backend"));
    assert!(got.header("x-tollgate-request-id").is_some());
    assert_eq!(got.body.len(), SIZE);
}

async fn post(gw: &tollgate::Gateway, path: &str, content_type: &str, body: &str) -> Got {
    let req = Request::post(format!("http://{}{path}", gw.proxy_addr))
        .header("content-type", content_type)
        .body(bytes_body(body.to_owned()))
        .unwrap();
    send(&client(), req).await
}

#[tokio::test]
async fn the_clients_body_goes_to_the_backends_whose_method_carries_one() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /orders
    method: POST
    max_body_bytes: 1KiB
    backends:
      - url: http://{echo}/create
        method: POST
        group: created
      - url: http://{echo}/audit
        method: PUT
        group: audit
      - url: http://{echo}/lookup
        group: lookup
  - path: /upload
    method: POST
    encoding: no-op
    backends:
      - url: http://{echo}/upload
        method: POST
"#,
        echo = echo.addr
    ))
    .await;
    let got = post(&gw, "/orders", "application/json", r#"{"item":7}"#).await;
    assert_eq!(got.header("x-tollgate-completed"), Some("true"));
    let body = got.json();
    for (group, method) in [("created", "POST"), ("audit", "PUT")] {
        let seen = &body[group];
        assert_eq!(seen["method"], method);
        assert_eq!(seen["body"], r#"{"item":7}"#, "{group}: {seen}");
        let headers = seen["headers"].as_array().unwrap();
        assert!(
            headers.contains(&json!(["content-type", "application/json"])),
            "{group}: the body's type goes with it: {headers:?}"
        );
        assert!(
            headers.contains(&json!(["content-length", "10"])),
            "{headers:?}"
        );
    }
    assert_eq!(body["lookup"]["method"], "GET");
    assert_eq!(body["lookup"]["body_len"], 0, "a GET backend gets no body");

    // No-op: the body streams to the one backend.
    let got = post(&gw, "/upload", "text/plain", &"y".repeat(5000)).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["body_len"], 5000);

    // Read whole for several backends: bounded by max_body_bytes.
    let got = post(&gw, "/orders", "application/json", &"z".repeat(2000)).await;
    assert_eq!(got.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(got.error_code().as_deref(), Some("body_too_large"));
    assert!(
        got.error_message().contains("max_body_bytes"),
        "the error names the setting to raise"
    );
}

#[tokio::test]
async fn calls_and_backends_are_counted_in_metrics_and_listed_by_discover() {
    let ok = upstream(|_| async { json_answer(json!({"ok": 1})) }).await;
    let broken = upstream(|_| async { answer(500, &[], "boom") }).await;
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /mixed/{{id}}
    backends:
      - url: http://{ok}/ok/{{id}}
        name: good
      - url: http://{broken}/
        name: bad
      - url: http://{ok}/after/{{resp1.id}}
        name: later
  - path: /quiet
    backends:
      - url: http://{ok}/
"#,
        ok = ok.addr,
        broken = broken.addr
    ))
    .await;
    for id in ["1", "2"] {
        let got = get(&gw, &format!("/mixed/{id}"), &[]).await;
        assert_eq!(got.header("x-tollgate-failed-backends"), Some("bad,later"));
    }
    let partial = r#"tollgate_aggregate_requests_total{method="GET",endpoint="/mixed/{id}",result="partial"} 2"#;
    let text = metrics_when(&gw, |t| t.contains(partial)).await;
    assert!(text.contains(partial), "{text}");
    for (backend, result) in [("good", "ok"), ("bad", "failed"), ("later", "skipped")] {
        let line = format!(
            r#"tollgate_aggregate_backend_requests_total{{method="GET",endpoint="/mixed/{{id}}",backend="{backend}",result="{result}"}} 2"#
        );
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(text.contains(
        r#"tollgate_aggregate_backend_duration_seconds_count{method="GET",endpoint="/mixed/{id}",backend="good"} 2"#
    ));
    assert!(
        !text.contains(r#"backend="later"} "#),
        "a backend never called has no duration"
    );

    let discover = admin_get(&gw, "/discover").await.json();
    let listed = discover["aggregated"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "every declared endpoint: {discover}");
    let mixed = &listed[0];
    assert_eq!(mixed["endpoint"], "/mixed/{id}");
    assert_eq!(mixed["count"], 2);
    assert_eq!(mixed["results"], json!({"partial": 2}));
    assert!(mixed["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    let names: Vec<&str> = mixed["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["good", "bad", "later"]);
    assert_eq!(mixed["backends"][1]["results"], json!({"failed": 2}));
    assert_eq!(mixed["backends"][2]["results"], json!({"skipped": 2}));
    assert_eq!(listed[1]["endpoint"], "/quiet");
    assert_eq!(listed[1]["count"], 0, "declared, not yet called");
    // `tollgate discover` prints them after the discovered endpoints (discovery is off).
    let table = tollgate::diagnosis::discovery::table::table(&discover);
    assert!(table.contains("endpoint discovery is off"), "{table}");
    let row = table.lines().find(|l| l.contains("/mixed/{id}")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols[..6],
        ["2", "GET", "/mixed/{id}", "0", "2", "0"],
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("bad (") && l.contains("fail 2")),
        "{table}"
    );
}

#[test]
fn bad_endpoints_are_refused_at_their_field_paths() {
    let errors = tollgate::Config::from_yaml(
        r#"
endpoints:
  - path: /a/{id}
    backends:
      - url: http://127.0.0.1:1/x/{nope}
      - url: http://127.0.0.1:1/y
        group: g
      - url: http://127.0.0.1:1/z
        group: g
      - url: http://127.0.0.1:1/w/{resp3.id}
  - path: /a/{other}
    backends:
      - url: http://127.0.0.1:1/
  - path: /b
    encoding: no-op
    backends:
      - url: http://127.0.0.1:1/
      - url: http://127.0.0.1:1/
  - path: /env
    backends:
      - url: ${TOLLGATE_TEST_UNSET_BACKEND_HOST}/x
"#,
    )
    .unwrap_err();
    let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let has = |path: &str, words: &str| {
        assert!(
            text.iter()
                .any(|t| t.starts_with(path) && t.contains(words)),
            "no `{path}` error saying `{words}` in {text:#?}"
        )
    };
    has(
        "endpoints[0].backends[0].url",
        "`{nope}` is not a parameter",
    );
    has(
        "endpoints[0].backends[2].group",
        "group `g` is also backends[1]'s",
    );
    has("endpoints[0].backends[3].url", "earlier backend");
    has("endpoints[1].path", "declared twice");
    has("endpoints[2].encoding", "`no-op` relays one backend");
    has(
        "endpoints[3].backends[0].url",
        "TOLLGATE_TEST_UNSET_BACKEND_HOST",
    );
}

/// The echo's header names and values.
fn seen_headers(seen: &Value) -> Vec<(String, String)> {
    seen["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h[0].as_str().unwrap().into(), h[1].as_str().unwrap().into()))
        .collect()
}

#[tokio::test]
async fn star_passes_every_end_to_end_header_and_the_whole_query() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /me\n    headers: ['*']\n    query: ['*']\n    backends:\n      - url: http://{}/users?fixed=1\n",
        echo.addr
    ))
    .await;
    let got = get(
        &gw,
        "/me?page=2&page%5Bsize%5D=5&x",
        &[
            ("authorization", "Bearer t"),
            ("x-custom", "y"),
            ("user-agent", "my-app/1.0"),
            ("x-tollgate-note", "for tollgate"),
            ("proxy-authorization", "Basic cHJveHk6cA=="),
            ("accept-encoding", "br"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
        ],
    )
    .await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    let seen = got.json();
    assert_eq!(seen["path"], "/users?fixed=1&page=2&page%5Bsize%5D=5&x");
    let h = seen_headers(&seen);
    let has = |n: &str| h.iter().any(|(k, _)| k == n);
    for n in ["authorization", "x-custom", "user-agent"] {
        assert!(has(n), "{n} passed: {h:?}");
    }
    for n in [
        "x-tollgate-note",
        "proxy-authorization",
        "x-hop",
        "connection",
    ] {
        assert!(!has(n), "{n} not passed: {h:?}");
    }
    // The client's own User-Agent is kept; tollgate asks for what it can decode.
    assert!(
        h.contains(&("user-agent".into(), "my-app/1.0".into())),
        "{h:?}"
    );
    assert!(
        h.contains(&("accept-encoding".into(), "gzip".into())),
        "{h:?}"
    );
}

#[tokio::test]
async fn backend_calls_carry_a_user_agent_and_gzip_answers_are_inflated() {
    let echo = echo_upstream().await;
    // A backend that always answers gzip, whatever it is asked.
    let gz = upstream(|_| async {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(br#"{"zipped": true}"#).unwrap();
        let mut r = http::Response::new(tollgate::body::full(e.finish().unwrap()));
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r.headers_mut()
            .insert("content-encoding", "gzip".parse().unwrap());
        r
    })
    .await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /a\n    backends:\n      - url: http://{e}/e\n        group: echo\n      - url: http://{g}/g\n  - path: /b\n    user_agent: acme-gateway/2\n    backends:\n      - url: http://{e}/e\n",
        e = echo.addr,
        g = gz.addr
    ))
    .await;
    let got = get(&gw, "/a", &[("user-agent", "not-passed/1")]).await;
    assert_eq!(got.header("x-tollgate-completed"), Some("true"));
    let body = got.json();
    assert_eq!(body["zipped"], true);
    let h = seen_headers(&body["echo"]);
    let ua = format!("tollgate/{}", env!("CARGO_PKG_VERSION"));
    assert!(h.contains(&("user-agent".into(), ua)), "{h:?}");
    let got = get(&gw, "/b", &[]).await.json();
    assert!(
        seen_headers(&got).contains(&("user-agent".into(), "acme-gateway/2".into())),
        "{got}"
    );
}

#[tokio::test]
async fn numbers_are_merged_as_written() {
    let a = upstream(|_| async {
        json_text(r#"{"big": 123456789012345678901234567890, "p": 0.1000000000000000055511151231257827, "e": 1E3, "price": 19.990}"#)
    })
    .await;
    let b =
        upstream(|_| async { json_text(r#"{"items": [1.50, -0.0, 12345678901234567890123]}"#) })
            .await;
    let gw = gateway(&format!(
        "endpoints:\n  - path: /n\n    backends:\n      - url: http://{}/a\n      - url: http://{}/b\n        group: b\n",
        a.addr, b.addr
    ))
    .await;
    let got = get(&gw, "/n", &[]).await;
    // Every digit kept (Lura keeps them too); only an exponent is spelled `e+3`.
    assert_eq!(
        String::from_utf8(got.body.to_vec()).unwrap(),
        r#"{"b":{"items":[1.50,-0.0,12345678901234567890123]},"big":123456789012345678901234567890,"e":1e+3,"p":0.1000000000000000055511151231257827,"price":19.990}"#
    );
}

#[tokio::test]
async fn a_sequential_backend_reads_the_shaped_answer_and_arrays_as_lists() {
    let orders = upstream(|_| async {
        json_text(r#"{"customer_id": "c7", "item_ids": [3, 4, 5], "internal": 1}"#)
    })
    .await;
    let echo = echo_upstream().await;
    // As KrakenD writes it: the grouped backend's field under its group.
    let gw = gateway(&format!(
        r#"
endpoints:
  - path: /orders/{{id}}
    backends:
      - url: http://{orders}/orders/{{id}}
        group: order
        deny: [internal]
      - url: http://{echo}/customers/{{resp0_order.customer_id}}?items={{resp0.order.item_ids}}&raw={{resp0.customer_id}}
        group: customer
        allow: [path]
"#,
        orders = orders.addr,
        echo = echo.addr
    ))
    .await;
    let got = get(&gw, "/orders/9", &[]).await;
    assert_eq!(
        got.header("x-tollgate-completed"),
        Some("true"),
        "{:?}",
        got.json()
    );
    let body = got.json();
    assert_eq!(body["customer"]["path"], "/customers/c7?items=3,4,5&raw=c7");
    assert_eq!(
        body["order"],
        json!({"customer_id": "c7", "item_ids": [3, 4, 5]})
    );
}

#[tokio::test]
async fn endpoint_defaults_apply_where_an_endpoint_says_nothing() {
    let echo = echo_upstream().await;
    let gw = gateway(&format!(
        r#"
endpoint_defaults:
  host: http://{echo}
  timeout: 2s
  cache_ttl: 1m
endpoints:
  - path: /a
    backends:
      - url: /users/a
  - path: /b
    timeout: 500ms
    cache_ttl: 5s
    backends:
      - url: http://{echo}/users/b
"#,
        echo = echo.addr
    ))
    .await;
    let a = get(&gw, "/a", &[]).await;
    assert_eq!(a.json()["path"], "/users/a");
    assert_eq!(a.header("cache-control"), Some("public, max-age=60"));
    let b = get(&gw, "/b", &[]).await;
    assert_eq!(b.header("cache-control"), Some("public, max-age=5"));
    let effective = admin_get(&gw, "/config").await.json();
    assert_eq!(effective["endpoints"][0]["timeout"], "2s");
    assert_eq!(effective["endpoints"][1]["timeout"], "500ms");
    // A path URL needs the default host.
    let e = tollgate::Config::from_yaml(
        "endpoints:\n  - path: /a\n    backends:\n      - url: /users/a\n",
    )
    .unwrap_err();
    assert_eq!(e[0].path, "endpoints[0].backends[0].url");
    assert!(e[0].message.contains("endpoint_defaults.host"), "{}", e[0]);
}
