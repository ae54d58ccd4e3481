//! Provider throttling (Retry-After, RateLimit-Remaining), retries (statuses, methods,
//! Idempotency-Key, budget, x-tollgate-retries), circuit breaking (consecutive, ratio,
//! half-open, every retry through it) and per-policy timeouts.

use crate::support::config::config;
use crate::support::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test]
async fn provider_retry_after_pauses_the_policy() {
    let (up, hits) = counting_upstream(|_, i| async move {
        if i == 0 {
            answer(429, &[("retry-after", "30")], "slow down")
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let gw = gateway(
        &config()
            .local_policy(&[("provider_throttling", "{}")])
            .yaml(),
    )
    .await;
    let first = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(first.status, 429);
    assert!(
        first.header("x-tollgate-error").is_none(),
        "the provider's own 429 is relayed untouched"
    );
    let paused = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(
        (paused.status.as_u16(), paused.error_code().as_deref()),
        (429, Some("provider_throttled"))
    );
    let retry: u64 = paused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "nothing reached the provider while paused"
    );
    let state = admin_get(&gw, "/policies").await.json();
    assert_eq!(
        state["policies"][0]["state"]["provider_throttling"]["throttled"],
        true
    );
}

#[tokio::test]
async fn ratelimit_remaining_zero_pauses_until_the_reset_or_waits() {
    let (up, hits) = counting_upstream(|_, i| async move {
        if i == 0 {
            answer(
                200,
                &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1")],
                "last one",
            )
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let gw = gateway(
        &config()
            .local_policy(&[("provider_throttling", "{action: wait, max_wait: 5s}")])
            .yaml(),
    )
    .await;
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
    // Waits for the provider's reset (1s), then goes through.
    let second = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(second.status, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let m = metrics_when(&gw, |t| t.contains("action=\"waited\"")).await;
    assert!(
        m.contains("remedy=\"provider_throttling\",action=\"waited\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn retries_recover_and_say_so() {
    let (up, hits) = counting_upstream(|_, i| async move {
        if i < 2 {
            answer(503, &[], "busy")
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let gw = gateway(
        &config()
            .local_policy(&[(
                "retry",
                "{attempts: 3, base_delay: 1ms, max_delay: 10ms, statuses: ['500-599']}",
            )])
            .yaml(),
    )
    .await;
    let got = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("x-tollgate-retries"), Some("2"));
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn only_idempotent_requests_are_retried_and_bodies_are_replayed() {
    let (up, hits) = counting_upstream(|req, i| async move {
        if i < 2 {
            answer(503, &[], "busy")
        } else {
            echo_json(req).await
        }
    })
    .await;
    let gw = gateway(
        &config()
            .local_policy(&[("retry", "{attempts: 2, base_delay: 1ms, statuses: [503]}")])
            .yaml(),
    )
    .await;
    let post = |key: Option<&'static str>| {
        let mut b = via_header(&gw, up.addr, "/charge").method("POST");
        if let Some(k) = key {
            b = b.header("idempotency-key", k);
        }
        send_owned(b.body(bytes_body("amount=5")).unwrap())
    };
    // POST without Idempotency-Key: the provider's 503 is relayed, never sent twice.
    let got = post(None).await;
    assert_eq!(got.status, 503);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // With one, it is retried with the same body.
    let got = post(Some("k-1")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["body"], "amount=5");
    assert_eq!(got.header("x-tollgate-retries"), Some("1"));
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

async fn send_owned(req: http::Request<tollgate::body::Body>) -> Got {
    send(&client(), req).await
}

#[tokio::test]
async fn connect_failures_are_retried_whatever_the_method() {
    // A port with nothing listening: the request never reaches anyone.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gw = gateway(
        &config()
            .local_policy(&[("retry", "{attempts: 3, base_delay: 1ms}")])
            .yaml(),
    )
    .await;
    let got = send_owned(
        via_header(&gw, closed, "/")
            .method("POST")
            .body(bytes_body("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(got.error_code().as_deref(), Some("connect_error"));
    let m = metrics_when(&gw, |t| t.contains("action=\"retried\"")).await;
    assert!(m.contains("remedy=\"retry\",action=\"retried\"} 2"), "{m}");
}

#[tokio::test]
async fn the_retry_budget_stops_a_storm() {
    let (up, hits) = counting_upstream(|_, _| async { answer(503, &[], "down") }).await;
    let gw = gateway(
        &config()
            .local_policy(&[("retry", "{attempts: 5, base_delay: 0s, statuses: [503], budget: 10%, budget_min: 2, budget_window: 1h}")])
            .yaml(),
    )
    .await;
    for _ in 0..20 {
        assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 503);
    }
    // Without a budget: 20 × 5 = 100 calls. With it: 20 + at most 2 + 10% of 20.
    let calls = hits.load(Ordering::SeqCst);
    assert!((21..=24).contains(&calls), "{calls} provider calls");
    let m = metrics_when(&gw, |t| t.contains("budget_exhausted")).await;
    assert!(m.contains("action=\"budget_exhausted\"}"), "{m}");
}

#[tokio::test]
async fn breaker_opens_and_every_retry_passes_through_it() {
    let (up, hits) = counting_upstream(|_, _| async { answer(500, &[], "broken") }).await;
    let gw = gateway(
        &config()
            .section("breakers", "{b: {consecutive_failures: 3, open_for: 1h}}")
            .local_policy(&[
                ("breaker", "b"),
                (
                    "retry",
                    "{attempts: 10, base_delay: 0s, statuses: ['500-599']}",
                ),
            ])
            .yaml(),
    )
    .await;
    // Attempts 1–3 fail and open the breaker; the 4th attempt is refused by it.
    let got = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(
        (got.status.as_u16(), got.error_code().as_deref()),
        (503, Some("circuit_open"))
    );
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    let again = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(again.error_code().as_deref(), Some("circuit_open"));
    let retry: u64 = again.header("retry-after").unwrap().parse().unwrap();
    assert!(retry > 3000);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    let state = admin_get(&gw, "/policies").await.json();
    assert_eq!(
        state["policies"][0]["state"]["breaker"]["state"]["state"],
        "open"
    );
    let m = metrics_when(&gw, |t| t.contains("tollgate_breaker_state")).await;
    assert!(m.contains("tollgate_breaker_state{name=\"b\"} 1"), "{m}");
}

#[tokio::test]
async fn breaker_ratio_half_open_and_close() {
    let healthy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = healthy.clone();
    let (up, _) = counting_upstream(move |_, _| {
        let ok = h.load(Ordering::SeqCst);
        async move {
            if ok {
                answer(200, &[], "ok")
            } else {
                answer(502, &[], "bad")
            }
        }
    })
    .await;
    let gw = gateway(
        &config()
            .local_policy(&[("breaker", "{consecutive_failures: 0, failure_ratio: 50%, min_requests: 4, window: 1h, open_for: 300ms, half_open_probes: 1}")])
            .yaml(),
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get_via(&gw, up.addr, "/", &[]).await.status.as_u16());
    }
    // Four failures reach the minimum and the ratio: the fifth is refused.
    assert_eq!(statuses, [502, 502, 502, 502, 503]);
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Half-open: the probe goes through and succeeds, which closes it.
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
    let state = admin_get(&gw, "/policies").await.json();
    assert_eq!(
        state["policies"][0]["state"]["breaker"]["state"]["state"],
        "closed"
    );
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
}

#[tokio::test]
async fn policy_timeouts_override_the_upstream_ones() {
    let up = stall_upstream().await;
    let gw = gateway(
        "upstream: {response_timeout: 1h}\npolicies:\n  - name: slow\n    match: {path: '/slow/*'}\n    timeouts: {response: 100ms}\n  - name: total\n    match: {path: '/total/*'}\n    timeouts: {total: 150ms}\n",
    )
    .await;
    for path in ["/slow/x", "/total/x"] {
        let got = get_via(&gw, up.addr, path, &[]).await;
        assert_eq!(
            (got.status.as_u16(), got.error_code().as_deref()),
            (504, Some("upstream_timeout")),
            "{path}"
        );
    }
}
