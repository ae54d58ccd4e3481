//! Policies: matching on the upstream path in every routing mode, shadowing warnings,
//! mocks, transformations, credentials, `GET /policies`, config errors with field paths,
//! and the unmatched path's cost.

use crate::support::*;
use http::Request;
use serde_json::json;
use std::sync::atomic::Ordering;

#[tokio::test]
async fn policies_match_the_upstream_path_in_every_routing_mode() {
    let (up, hits) = counting_upstream(|req, _| echo_json(req)).await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /gh\n    upstream: http://{0}/base\npolicies:\n  - name: repos\n    match:\n      host: 127.0.0.1\n      path: /base/repos/{{owner}}/*\n    mock:\n      status: 418\n      body: mocked\n",
        up.addr
    ))
    .await;
    let c = client();
    // Route mode: `/gh` stripped, the base path added: upstream path /base/repos/me/x.
    let routed = send(
        &c,
        Request::get(format!("http://{}/gh/repos/me/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    // Header mode and forward-proxy mode with the same upstream path.
    let header = get_via(&gw, up.addr, "/base/repos/me/x", &[]).await;
    let forward = raw_exchange(
        gw.proxy_addr,
        format!(
            "GET http://{0}/base/repos/me/x HTTP/1.1\r\nHost: {0}\r\nConnection: close\r\n\r\n",
            up.addr
        )
        .as_bytes(),
    )
    .await;
    assert!(forward.starts_with("HTTP/1.1 418"), "{forward}");
    assert!(forward.contains("x-tollgate-generated: true"), "{forward}");
    for got in [&routed, &header] {
        assert_eq!(got.status, 418, "{:?}", got.body);
        assert_eq!(&got.body[..], b"mocked");
        assert_eq!(got.header("x-tollgate-generated"), Some("true"));
    }
    // The client path `/gh/repos/...` is not what policies see: this one is not matched.
    let other = send(
        &c,
        Request::get(format!("http://{}/gh/other", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(other.status, 200);
    assert_eq!(other.json()["path"], "/base/other");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[test]
fn shadowed_policies_are_reported() {
    let c = tollgate::Config::from_yaml(
        "policies:\n  - name: all-github\n    match: {host: '*.github.com'}\n  - name: repos\n    match: {host: api.github.com, path: '/repos/*', methods: [GET]}\n  - name: other-host\n    match: {host: api.stripe.com}\n",
    )
    .unwrap();
    let w = c.policies.shadowed();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("policies[1] `repos` never applies"),
        "{}",
        w[0]
    );
    assert!(w[0].contains("policies[0] `all-github`"), "{}", w[0]);
}

#[test]
fn a_per_tool_policy_without_the_server_s_refusals_is_reported() {
    let c = tollgate::Config::from_yaml(
        "policies:\n  - name: writes\n    match: {host: api.githubcopilot.com, mcp: {tools: ['*']}}\n    rate_limit: {limit: 10, window: minute}\n  - name: guarded-writes\n    match: {host: api.githubcopilot.com, mcp: {tools: ['create_*']}}\n    mcp: {deny: [delete_repository]}\n  - name: reads\n    match: {host: api.githubcopilot.com, mcp: {tools: [get_issue, list_issues]}}\n  - name: deletes\n    match: {host: api.githubcopilot.com, mcp: {tools: [delete_repository]}}\n  - name: github\n    match: {host: api.githubcopilot.com}\n    mcp: {deny: [delete_repository]}\n  - name: elsewhere\n    match: {host: mcp.stripe.com, mcp: {tools: ['*']}}\n",
    )
    .unwrap();
    // `writes` (any tool) and `deletes` (a refused tool) escape; `reads` names tools
    // nobody refuses; `elsewhere` is another host.
    let w = c.policies.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[1].contains("`deletes` takes some MCP calls"), "{}", w[1]);
    assert!(
        w[0].contains("policies[0] `writes` takes some MCP calls")
            && w[0].contains("whatever `guarded-writes` denies"),
        "{}",
        w[0]
    );
}

#[tokio::test]
async fn mock_only_when_asked_and_json_bodies() {
    let up = echo_upstream().await;
    let gw = gateway(
        "policies:\n  - name: dev\n    match: {path: '/v1/*'}\n    mock:\n      status: 201\n      headers: {x-mocked: 'yes'}\n      body: {id: 7, ok: true}\n      when: {header: x-mock}\n",
    )
    .await;
    let real = get_via(&gw, up.addr, "/v1/items", &[]).await;
    assert_eq!(real.status, 200);
    assert!(real.header("x-tollgate-generated").is_none());
    let off = get_via(&gw, up.addr, "/v1/items", &[("x-mock", "false")]).await;
    assert_eq!(off.status, 200);
    let mocked = get_via(&gw, up.addr, "/v1/items", &[("x-mock", "1")]).await;
    assert_eq!(mocked.status, 201);
    assert_eq!(mocked.json(), json!({"id": 7, "ok": true}));
    assert_eq!(mocked.header("content-type"), Some("application/json"));
    assert_eq!(mocked.header("x-mocked"), Some("yes"));
    assert_eq!(mocked.header("x-tollgate-generated"), Some("true"));
    assert!(mocked.header("x-tollgate-request-id").is_some());
}

#[tokio::test]
async fn request_and_response_transforms() {
    let up = upstream(|req| async move {
        let mut r = echo_json(req).await;
        r.headers_mut()
            .insert("server", "provider".parse().unwrap());
        r
    })
    .await;
    let gw = gateway(
        "policies:\n  - name: t\n    match: {path: '/repos/{owner}/{repo}/*'}\n    request:\n      set_headers: {x-api-version: '2022-11-28'}\n      add_headers: {x-extra: one}\n      remove_headers: [x-drop]\n      path: /v2/{repo}/by/{owner}/{*}\n      json_set: {/model: gpt-x, /options/temperature: 0}\n      json_remove: [/secret]\n      max_body: 64B\n    response:\n      set_headers: {x-seen: tollgate}\n      remove_headers: [server]\n",
    )
    .await;
    let c = client();
    let req = via_header(&gw, up.addr, "/repos/me/app/issues/3?state=open")
        .method("POST")
        .header("x-drop", "gone")
        .header("x-extra", "zero")
        .header("content-type", "application/json")
        .body(bytes_body(r#"{"model":"old","secret":"s","keep":1}"#))
        .unwrap();
    let got = send(&c, req).await;
    assert_eq!(got.status, 200);
    let seen = got.json();
    assert_eq!(seen["path"], "/v2/app/by/me/issues/3?state=open");
    let headers = seen["headers"].as_array().unwrap();
    assert!(headers.contains(&json!(["x-api-version", "2022-11-28"])));
    assert!(
        headers.contains(&json!(["x-extra", "zero"]))
            && headers.contains(&json!(["x-extra", "one"]))
    );
    assert!(!headers.iter().any(|h| h[0] == "x-drop"));
    let body: serde_json::Value = serde_json::from_str(seen["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"model": "gpt-x", "keep": 1, "options": {"temperature": 0}})
    );
    assert_eq!(got.header("x-seen"), Some("tollgate"));
    assert!(got.header("server").is_none());
    // Over the JSON cap: 413 with a clear error; nothing reaches the provider.
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(100));
    let req = via_header(&gw, up.addr, "/repos/me/app/x")
        .method("POST")
        .header("content-type", "application/json")
        .body(bytes_body(big))
        .unwrap();
    let got = send(&c, req).await;
    assert_eq!(got.status, 413);
    assert_eq!(got.error_code().as_deref(), Some("body_too_large"));
}

#[tokio::test]
async fn credentials_are_injected_rotated_and_never_shown() {
    // SAFETY of the test: a variable only this test reads.
    unsafe { std::env::set_var("TG_TEST_KEY_A", "sk-alpha-secret") };
    unsafe { std::env::set_var("TG_TEST_KEY_B", "sk-bravo-secret") };
    let (up, _) = counting_upstream(|req, _| async move {
        let auth = req
            .headers()
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned());
        // Account A is "rate limited" by the provider.
        if auth.as_deref() == Some("Bearer sk-alpha-secret") {
            return answer(429, &[("retry-after", "60")], "slow down");
        }
        echo_json(req).await
    })
    .await;
    let gw = gateway(
        "policies:\n  - name: openai\n    match: {host: 127.0.0.1}\n    credentials:\n      accounts:\n        - bearer: ${TG_TEST_KEY_A}\n        - bearer: ${TG_TEST_KEY_B}\n  - name: keyed\n    match: {host: localhost}\n    credentials:\n      query: {name: api_key, value: '${TG_TEST_KEY_A}'}\n",
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let got = get_via(
            &gw,
            up.addr,
            "/v1/models",
            &[("authorization", "Bearer client-own")],
        )
        .await;
        statuses.push(got.status.as_u16());
        if got.status == 200 {
            let headers = got.json()["headers"].clone();
            assert!(
                headers
                    .as_array()
                    .unwrap()
                    .contains(&json!(["authorization", "Bearer sk-bravo-secret"]))
            );
        }
    }
    // Round robin hits A at most once: after its 429 it is skipped for its Retry-After.
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        1,
        "{statuses:?}"
    );
    // Query credentials.
    let got = send(
        &client(),
        Request::get(format!("http://{}/q?x=1", gw.proxy_addr))
            .header("x-tollgate-host", format!("localhost:{}", up.addr.port()))
            .header("x-tollgate-scheme", "http")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.json()["path"], "/q?x=1&api_key=sk-alpha-secret");
    // Never in /config, /policies or /metrics.
    for path in ["/config", "/policies", "/metrics"] {
        let text = String::from_utf8_lossy(&admin_get(&gw, path).await.body).into_owned();
        assert!(!text.contains("secret"), "{path} shows a secret: {text}");
    }
    let policies = admin_get(&gw, "/policies").await.json();
    assert_eq!(
        policies["policies"][0]["state"]["credentials"]["accounts"][0]["credential"],
        "header authorization: MASKED"
    );
    assert!(
        policies["policies"][0]["state"]["credentials"]["accounts"][0]["cooling_down_s"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn bad_policy_configs_name_the_field() {
    let cases = [
        (
            "rate_limits:\n  gh: {limit: 100, window: hour, group_by: x-team, groups: {a: 60%, b: 50%}}\n",
            "rate_limits.gh.groups",
            "add up to 110%",
        ),
        (
            "policies:\n  - name: p\n    rate_limit: github\n",
            "policies[0].rate_limit",
            "no rate_limits entry named `github`",
        ),
        (
            "policies:\n  - name: p\n    rate_limit: {limit: 10, windw: day}\n",
            "policies[0].rate_limit",
            "unknown field `windw`",
        ),
        (
            "policies:\n  - name: p\n    queue: {size: 10, max_wait: 1s}\n",
            "policies[0]",
            "unknown field `queue`",
        ),
        (
            "policies:\n  - name: p\n    rate_limit: {limit: 10, window: fortnight}\n",
            "policies[0].rate_limit.window",
            "write `second`, `minute`, `hour` or `day`",
        ),
        (
            "quotas:\n  org: {limit: 1000, per: month, time_zone: Mars/Olympus}\n",
            "quotas.org.time_zone",
            "not a time zone",
        ),
        (
            "quotas:\n  team: {parent: org, share: 10%}\n",
            "quotas.team.parent",
            "no quota named `org`",
        ),
        (
            "policies:\n  - name: p\n    cache: {methods: [POST]}\n",
            "policies[0].cache.methods",
            "needs `key_body: true`",
        ),
        (
            "policies:\n  - name: p\n    retry: {attempts: 50}\n",
            "policies[0].retry.attempts",
            "from 2 to 20",
        ),
        (
            "policies:\n  - name: p\n    request: {path: '/v2/{repo}'}\n",
            "policies[0].request.path",
            "`match.path` does not define",
        ),
        (
            "policies:\n  - name: p\n    credentials: {bearer: a, header: {name: x-key, value: b}}\n",
            "policies[0].credentials",
            "exactly one of",
        ),
        (
            "policies:\n  - name: p\n    rate_limit: {limit: 10, window: second, group_by: x-tollgate-team}\n",
            "policies[0].rate_limit.group_by",
            "removed before policies run",
        ),
    ];
    for (yaml, path, says) in cases {
        let errors = tollgate::Config::from_yaml(yaml).expect_err(yaml);
        assert!(
            errors
                .iter()
                .any(|e| e.path.starts_with(path) && e.to_string().contains(says)),
            "{yaml}: wanted {path}: …{says}…, got {errors:?}"
        );
        for e in &errors {
            assert!(!e.message.contains("Raw"), "internal type name in {e}");
        }
    }
}

#[test]
fn unmatched_requests_pay_nothing_more() {
    // The per-request future of the plain path: the policy path is boxed, so adding
    // remedies must not grow it. 1784 bytes at 9e29550, before the engine existed; 1312
    // since the pool hands a request to a connection ready at once before any await.
    let size = tollgate::request::handle_future_size();
    assert!(
        size <= UNMATCHED_FUTURE_LIMIT,
        "the unmatched request future grew to {size} bytes"
    );
}

const UNMATCHED_FUTURE_LIMIT: usize = 1312;
