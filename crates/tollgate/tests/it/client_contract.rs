//! What a client sees at the edges of the remedies: a queue that cannot serve in time
//! refuses at once with the real `Retry-After`, a retry after an account's 429 goes to a
//! free account, `refund_on` gives back what the provider did not charge, and tollgate's
//! own errors and mocks say what retry and the mock did.

use crate::support::config::config;
use crate::support::*;
use std::sync::atomic::Ordering;

/// Seconds from now to the end of the current UTC hour (what a `window: hour` resets at).
fn secs_to_next_hour() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    3600 - now % 3600
}

/// Two accounts, and retry on 429 with a `Retry-After` cap of 1 s.
async fn two_accounts_retrying_429() -> tollgate::Gateway {
    gateway(
        &config()
            .local_policy(&[
                (
                    "credentials",
                    "{accounts: [{bearer: key-a}, {bearer: key-b}]}",
                ),
                ("retry", "{attempts: 3, statuses: ['429'], max_delay: 1s}"),
            ])
            .yaml(),
    )
    .await
}

#[tokio::test]
async fn a_queue_that_cannot_serve_in_time_refuses_at_once_with_the_real_retry_after() {
    // Within 30 s of the hour's end the queue could serve in time (the next window opens
    // before `max_wait`): the test runs clear of it.
    clear_of_the_hour_end(40).await;
    let (up, hits) = counting_upstream(|_, _| async { answer(200, &[], "ok") }).await;
    // The GitHub shape: an hour's budget, a queue that waits at most 30 s.
    let gw = gateway(
        "policies:\n  - name: gh\n    match: {host: 127.0.0.1}\n    rate_limit:\n      limit: 1\n      window: hour\n      queue: {size: 10, max_wait: 30s}\n",
    )
    .await;
    assert_eq!(get_via(&gw, up.addr, "/user", &[]).await.status, 200);
    let expected = secs_to_next_hour();
    let got = get_via(&gw, up.addr, "/user", &[]).await;
    // Before: held 30 s, then 503 `queue_timeout` with `Retry-After: 1`.
    assert_eq!(got.status, 429);
    assert_eq!(got.error_code().as_deref(), Some("rate_limited"));
    let retry: u64 = got.header("retry-after").unwrap().parse().unwrap();
    assert!(
        retry.abs_diff(expected) <= 2,
        "Retry-After {retry}, the window ends in {expected}s"
    );
    assert_eq!(got.header("ratelimit-reset"), got.header("retry-after"));
    assert!(got.error_message().contains("max_wait"), "{:?}", got.body);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let m = metrics_when(&gw, |t| t.contains("action=\"rejected\"")).await;
    assert!(
        m.contains("remedy=\"rate_limit\",action=\"rejected\"} 1"),
        "counted as rejected, never queued: {m}"
    );
    assert!(!m.contains("action=\"timed_out\"} 1"), "{m}");
}

#[tokio::test]
async fn a_retry_after_an_accounts_429_goes_to_a_free_account_at_once() {
    let (up, hits) = counting_upstream(|req, _| async move {
        let auth = req.headers()["authorization"].to_str().unwrap().to_owned();
        if auth == "Bearer key-a" {
            answer(429, &[("retry-after", "30")], "account a is tired")
        } else {
            answer(200, &[], &format!("served with {auth}"))
        }
    })
    .await;
    // A's Retry-After (30 s) is past max_delay (1 s): waiting for A is never an option,
    // so only going to B at once can succeed.
    let gw = two_accounts_retrying_429().await;
    let got = get_via(&gw, up.addr, "/v1/chat", &[]).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body, "served with Bearer key-b".as_bytes());
    assert_eq!(got.header("x-tollgate-retries"), Some("1"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // A cools down: the next requests go to B without trying A.
    for _ in 0..3 {
        let got = get_via(&gw, up.addr, "/v1/chat", &[]).await;
        assert_eq!(got.body, "served with Bearer key-b".as_bytes());
        assert_eq!(got.header("x-tollgate-retries"), None);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn with_every_account_cooling_the_retry_honours_retry_after() {
    let (up, hits) =
        counting_upstream(|_, _| async { answer(429, &[("retry-after", "30")], "all tired") })
            .await;
    let gw = two_accounts_retrying_429().await;
    let got = get_via(&gw, up.addr, "/", &[]).await;
    // A, then B at once; both cooling for 30 s, past max_delay: relayed, not retried.
    assert_eq!(got.status, 429);
    assert_eq!(got.header("x-tollgate-retries"), Some("1"));
    assert_eq!(got.header("x-should-retry"), Some("false"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn refund_on_gives_back_what_the_provider_did_not_charge() {
    clear_of_the_hour_end(30).await;
    let (up, hits) = counting_upstream(|req, _| async move {
        if req.headers().contains_key("if-none-match") {
            answer(304, &[("etag", "\"v1\"")], "")
        } else {
            answer(200, &[("etag", "\"v1\"")], "fresh")
        }
    })
    .await;
    let gw = gateway(
        "quotas:\n  daily: {limit: 3, refund_on: [304]}\npolicies:\n  - name: gh\n    match: {host: 127.0.0.1, path: '/repos/*'}\n    rate_limit: {limit: 2, window: hour, refund_on: [304]}\n  - name: q\n    match: {host: 127.0.0.1, path: '/quota/*'}\n    quota: daily\n",
    )
    .await;
    // Conditional requests the provider answers 304 cost nothing.
    for _ in 0..5 {
        let got = get_via(&gw, up.addr, "/repos/a/b", &[("if-none-match", "\"v1\"")]).await;
        assert_eq!(got.status, 304);
    }
    assert_eq!(get_via(&gw, up.addr, "/repos/a/b", &[]).await.status, 200);
    assert_eq!(get_via(&gw, up.addr, "/repos/a/b", &[]).await.status, 200);
    let over = get_via(&gw, up.addr, "/repos/a/b", &[]).await;
    assert_eq!(over.error_code().as_deref(), Some("rate_limited"));
    // A quota too, with its own statuses.
    for _ in 0..4 {
        let got = get_via(&gw, up.addr, "/quota/x", &[("if-none-match", "\"v1\"")]).await;
        assert_eq!(got.status, 304);
    }
    for _ in 0..3 {
        assert_eq!(get_via(&gw, up.addr, "/quota/x", &[]).await.status, 200);
    }
    let over = get_via(&gw, up.addr, "/quota/x", &[]).await;
    assert_eq!(over.error_code().as_deref(), Some("quota_exceeded"));
    assert_eq!(hits.load(Ordering::SeqCst), 14);
    let m = metrics_when(&gw, |t| t.contains("action=\"refunded\"} 5")).await;
    assert!(
        m.contains("policy=\"q\",remedy=\"quota\",action=\"refunded\"} 4"),
        "{m}"
    );
}

#[test]
fn refund_on_must_name_statuses() {
    let err = tollgate::Config::from_yaml(
        "policies:\n  - name: p\n    rate_limit: {limit: 2, window: hour, refund_on: [42]}\n",
    )
    .expect_err("refused")
    .iter()
    .map(|e| e.to_string())
    .collect::<String>();
    assert!(
        err.contains("policies[0].rate_limit.refund_on[0]") && err.contains("100 to 599"),
        "{err}"
    );
}

#[tokio::test]
async fn tollgates_own_error_after_retries_says_so() {
    // A port nothing listens on: every attempt is a connect error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = gateway(
        &config()
            .local_policy(&[("retry", "{attempts: 3, base_delay: 1ms, max_delay: 2ms}")])
            .yaml(),
    )
    .await;
    let got = get_via(&gw, closed, "/", &[]).await;
    assert_eq!(got.status, 502);
    assert_eq!(got.error_code().as_deref(), Some("connect_error"));
    assert_eq!(got.header("x-tollgate-retries"), Some("2"));
    assert_eq!(got.header("x-should-retry"), Some("false"));
}

#[tokio::test]
async fn mock_answers_are_remedy_actions() {
    let (up, hits) = counting_upstream(|_, _| async { answer(200, &[], "real") }).await;
    let gw = gateway(
        "policies:\n  - name: m\n    match: {host: 127.0.0.1}\n    mock: {status: 201, body: mocked, when: {header: x-mock}}\ndiagnosis:\n  discovery: {enabled: true}\n",
    )
    .await;
    for _ in 0..2 {
        let got = get_via(&gw, up.addr, "/", &[("x-mock", "1")]).await;
        assert_eq!((got.status.as_u16(), &got.body[..]), (201, &b"mocked"[..]));
    }
    assert_eq!(
        get_via(&gw, up.addr, "/", &[]).await.body,
        "real".as_bytes()
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let m = metrics_when(&gw, |t| t.contains("remedy=\"mock\"")).await;
    assert!(
        m.contains(
            "tollgate_remedy_actions_total{policy=\"m\",remedy=\"mock\",action=\"answered\"} 2"
        ),
        "{m}"
    );
    let text = eventually("three requests in /remedy-stats", || async {
        let text = admin_get(&gw, "/remedy-stats").await.json().to_string();
        if text.contains(r#""requests":3"#) {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert!(
        text.contains(r#""remedy":"mock""#) && text.contains(r#""action":"answered""#),
        "{text}"
    );
}

#[tokio::test]
async fn a_retry_after_too_large_for_64_bits_pauses_for_max_throttle() {
    let (up, hits) = counting_upstream(|_, _| async {
        answer(429, &[("retry-after", "99999999999999999999999")], "later")
    })
    .await;
    let gw = gateway(
        &config()
            .local_policy(&[("provider_throttling", "{max_throttle: 2m}")])
            .yaml(),
    )
    .await;
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 429);
    let paused = get_via(&gw, up.addr, "/", &[]).await;
    // Before: no pause at all, the second request reached the provider.
    assert_eq!(paused.error_code().as_deref(), Some("provider_throttled"));
    let retry: u64 = paused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (100..=120).contains(&retry),
        "capped at max_throttle: {retry}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_connect_tunnel_past_a_policy_is_named_in_policies() {
    let up = echo_upstream().await;
    let gw = gateway(&format!(
        "egress:\n  connect_ports: [{}]\npolicies:\n  - name: openai\n    match: {{host: 127.0.0.1}}\n    credentials: {{bearer: sk-secret}}\n  - name: other\n    match: {{host: api.example.com}}\n    mock: {{body: x}}\n",
        up.addr.port()
    ))
    .await;
    for _ in 0..2 {
        let (_, answer) = connect_via(gw.proxy_addr, &up.addr.to_string()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let p = admin_get(&gw, "/policies").await.json();
    let t = &p["policies"][0]["state"]["tunnelled"];
    assert_eq!(t["connects"], 2, "{p}");
    assert_eq!(t["hosts"], serde_json::json!(["127.0.0.1"]));
    assert!(t["note"].as_str().unwrap().contains("x-tollgate-host"));
    // The fix that needs no code change comes first.
    assert!(
        t["note"].as_str().unwrap().contains("intercept.hosts"),
        "{t}"
    );
    assert!(p["policies"][1]["state"].get("tunnelled").is_none(), "{p}");
}
