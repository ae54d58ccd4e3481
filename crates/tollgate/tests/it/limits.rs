//! Rate limits, consumer groups, queues with priorities, concurrency limits, quotas:
//! exact counts under concurrency, refusals in the error contract, slots released when
//! a client goes away, state kept across a reload when the definition is unchanged.
//! Windows are `day` here, so a test never straddles a window boundary it did not ask
//! for (the windows themselves are unit-tested on fixed instants in `window.rs`).

use crate::support::config::config;
use crate::support::*;
use http::Request;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Semaphore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_limit_passes_under_concurrency() {
    let (up, hits) = counting_upstream(|_, _| async { answer(200, &[], "ok") }).await;
    let gw = Arc::new(
        gateway(
            &config()
                .local_policy(&[("rate_limit", "{limit: 10, window: day}")])
                .yaml(),
        )
        .await,
    );
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let gw = gw.clone();
        let addr = up.addr;
        tasks.push(tokio::spawn(
            async move { get_via(&gw, addr, "/x", &[]).await },
        ));
    }
    let mut ok = 0;
    let mut limited = 0;
    for t in tasks {
        let got = t.await.unwrap();
        match got.status.as_u16() {
            200 => ok += 1,
            429 => {
                assert_eq!(got.error_code().as_deref(), Some("rate_limited"));
                let retry: u64 = got.header("retry-after").unwrap().parse().unwrap();
                assert!((1..=86_400).contains(&retry));
                assert_eq!(got.header("ratelimit-limit"), Some("10"));
                assert_eq!(got.header("ratelimit-remaining"), Some("0"));
                assert_eq!(
                    got.header("ratelimit-reset"),
                    Some(retry.to_string().as_str())
                );
                assert_eq!(got.header("x-tollgate-generated"), Some("true"));
                limited += 1;
            }
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!((ok, limited), (10, 190));
    assert_eq!(hits.load(Ordering::SeqCst), 10);
    let state = admin_get(&gw, "/policies").await.json();
    let rl = &state["policies"][0]["state"]["rate_limit"];
    assert_eq!(
        (rl["used"].as_u64(), rl["remaining"].as_u64()),
        (Some(10), Some(0))
    );
    let m = metrics_when(&gw, |t| t.contains("action=\"rejected\"")).await;
    assert!(m.contains("tollgate_remedy_actions_total{policy=\"p\",remedy=\"rate_limit\",action=\"rejected\"} 190"), "{m}");
}

#[tokio::test]
async fn groups_get_their_share_and_refusals_do_not_count() {
    let up = echo_upstream().await;
    let gw = gateway(
        "rate_limits:\n  shared:\n    limit: 10\n    window: day\n    group_by: x-team\n    groups: {ci: 20%, web: 50%}\n    default_group: block\npolicies:\n  - name: a\n    match: {path: '/a/*'}\n    rate_limit: shared\n  - name: b\n    match: {path: '/b/*'}\n    rate_limit: shared\n",
    )
    .await;
    let status = |path: &'static str, team: &'static str| {
        let gw = &gw;
        let addr = up.addr;
        async move {
            get_via(gw, addr, path, &[("x-team", team)])
                .await
                .status
                .as_u16()
        }
    };
    // ci: 2 of 10, across both policies (one shared limit).
    assert_eq!(status("/a/1", "ci").await, 200);
    assert_eq!(status("/b/1", "ci").await, 200);
    assert_eq!(status("/a/1", "ci").await, 429);
    assert_eq!(status("/b/1", "ci").await, 429);
    // Unknown teams are blocked, and blocked requests took nothing from the total.
    for _ in 0..5 {
        assert_eq!(status("/a/1", "other").await, 429);
    }
    for _ in 0..5 {
        assert_eq!(status("/a/1", "web").await, 200);
    }
    assert_eq!(status("/a/1", "web").await, 429);
    let got = get_via(&gw, up.addr, "/a/1", &[("x-team", "nobody")]).await;
    assert!(got.error_message().contains("default_group: block"));
}

/// An upstream that answers once a permit is added, recording the order of arrival.
async fn gated_upstream() -> (Server, Arc<Semaphore>, Arc<std::sync::Mutex<Vec<String>>>) {
    let gate = Arc::new(Semaphore::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (g, o) = (gate.clone(), order.clone());
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let (g, o) = (g.clone(), o.clone());
        async move {
            let who = req
                .headers()
                .get("x-who")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            o.lock().unwrap().push(who);
            g.acquire().await.unwrap().forget();
            answer(200, &[], "done")
        }
    })
    .await;
    (up, gate, order)
}

async fn queued(gw: &tollgate::Gateway) -> u64 {
    admin_get(gw, "/policies").await.json()["policies"][0]["state"]["concurrency"]["queued"]
        .as_u64()
        .unwrap()
}

async fn wait_queued(gw: &tollgate::Gateway, n: u64) {
    eventually(&format!("{n} queued"), || async {
        match queued(gw).await {
            q if q == n => Ok(()),
            q => Err(q),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_releases_by_priority_then_fifo() {
    let (up, gate, order) = gated_upstream().await;
    let gw = Arc::new(
        gateway(
            &config()
            .section("concurrency_limits", "{one: {max: 1, queue: {size: 10, max_wait: 30s, priority_header: x-priority, priorities: {high: 0, low: 200}}}}")
            .local_policy(&[("concurrency", "one")])
            .yaml(),
        )
        .await,
    );
    let spawn = |who: &'static str, prio: &'static str| {
        let gw = gw.clone();
        let addr = up.addr;
        tokio::spawn(async move {
            get_via(&gw, addr, "/", &[("x-who", who), ("x-priority", prio)])
                .await
                .status
        })
    };
    let first = spawn("first", "low");
    wait_until("the first request reaches the upstream", || {
        !order.lock().unwrap().is_empty()
    })
    .await;
    // Queued in this order; released by priority, FIFO within one.
    let mut waiting = Vec::new();
    for (i, (who, prio)) in [
        ("low-1", "low"),
        ("mid-1", "none"),
        ("high-1", "high"),
        ("low-2", "low"),
        ("high-2", "high"),
    ]
    .into_iter()
    .enumerate()
    {
        waiting.push(spawn(who, prio));
        wait_queued(&gw, i as u64 + 1).await;
    }
    gate.add_permits(10);
    assert_eq!(first.await.unwrap(), 200);
    for w in waiting {
        assert_eq!(w.await.unwrap(), 200);
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["first", "high-1", "high-2", "mid-1", "low-1", "low-2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_full_timeout_and_client_gone() {
    let (up, gate, _) = gated_upstream().await;
    let gw = Arc::new(
        gateway(
            &config()
                .local_policy(&[("concurrency", "{max: 1, queue: {size: 1, max_wait: 300ms}}")])
                .yaml(),
        )
        .await,
    );
    let holder = {
        let gw = gw.clone();
        let addr = up.addr;
        tokio::spawn(async move { get_via(&gw, addr, "/", &[]).await.status })
    };
    eventually("one request in flight", || async {
        let state = admin_get(&gw, "/policies").await.json();
        let in_flight = state["policies"][0]["state"]["concurrency"]["in_flight"].clone();
        if in_flight == 1 {
            Ok(())
        } else {
            Err(in_flight)
        }
    })
    .await;
    // One waits (and times out); the next finds the queue full.
    let waiter = {
        let gw = gw.clone();
        let addr = up.addr;
        tokio::spawn(async move { get_via(&gw, addr, "/", &[]).await })
    };
    wait_queued(&gw, 1).await;
    let full = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(
        (full.status.as_u16(), full.error_code().as_deref()),
        (429, Some("queue_full"))
    );
    let timed_out = waiter.await.unwrap();
    assert_eq!(
        (timed_out.status.as_u16(), timed_out.error_code().as_deref()),
        (503, Some("queue_timeout"))
    );
    // A client that goes away while queued leaves the queue at once.
    let gone = {
        let gw = gw.clone();
        let addr = up.addr;
        tokio::spawn(async move { get_via(&gw, addr, "/", &[]).await })
    };
    wait_queued(&gw, 1).await;
    gone.abort();
    wait_queued(&gw, 0).await;
    gate.add_permits(1);
    assert_eq!(holder.await.unwrap(), 200);
    // The slot was released with the body: the next request passes.
    gate.add_permits(1);
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_slots_are_released_when_the_client_goes_away() {
    // The provider sends its head, then holds the body until the gate opens.
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let up = upstream(move |_req| {
        let g = g.clone();
        async move {
            let stream = futures_util::stream::once(async move {
                g.acquire().await.unwrap().forget();
                Ok::<_, tollgate::body::BoxError>(hyper::body::Frame::data(bytes::Bytes::from(
                    "tail",
                )))
            });
            let body =
                http_body_util::BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream));
            http::Response::new(body)
        }
    })
    .await;
    let gw = gateway(&config().local_policy(&[("concurrency", "{max: 1}")]).yaml()).await;
    let c = client();
    let resp = c
        .request(via_header(&gw, up.addr, "/").body(empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The head arrived, the body has not ended: the slot is still held.
    let second = get_via(&gw, up.addr, "/", &[]).await;
    assert_eq!(second.error_code().as_deref(), Some("concurrency_limited"));
    // The client goes away mid-body: the slot comes back.
    drop(resp);
    drop(c);
    let mut status = 0;
    for _ in 0..200 {
        gate.add_permits(1);
        let c = client();
        let r = c
            .request(via_header(&gw, up.addr, "/").body(empty()).unwrap())
            .await
            .unwrap();
        status = r.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        status, 200,
        "the slot of the abandoned request was never released"
    );
}

#[tokio::test]
async fn rate_limit_queue_waits_for_the_next_window() {
    let up = echo_upstream().await;
    let gw = gateway(
        &config()
            .local_policy(&[(
                "rate_limit",
                "{limit: 1, window: second, queue: {size: 5, max_wait: 5s}}",
            )])
            .yaml(),
    )
    .await;
    let (a, b) = tokio::join!(
        get_via(&gw, up.addr, "/", &[]),
        get_via(&gw, up.addr, "/", &[])
    );
    assert_eq!(
        (a.status.as_u16(), b.status.as_u16()),
        (200, 200),
        "the second waited for the next second"
    );
    let m = metrics_when(&gw, |t| t.contains("action=\"dequeued\"} 1")).await;
    assert!(
        m.contains("tollgate_queue_wait_seconds_count{name=\"policy p\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn quotas_with_parent_and_child() {
    let up = echo_upstream().await;
    let gw = gateway(
        "quotas:\n  org: {limit: 10, per: month, renews_on: 1, time_zone: Europe/Paris}\n  team: {parent: org, share: 30%}\npolicies:\n  - name: team\n    match: {path: '/team/*'}\n    quota: team\n  - name: org\n    match: {path: '/org/*'}\n    quota: org\n",
    )
    .await;
    for _ in 0..3 {
        assert_eq!(get_via(&gw, up.addr, "/team/x", &[]).await.status, 200);
    }
    let over = get_via(&gw, up.addr, "/team/x", &[]).await;
    assert_eq!(
        (over.status.as_u16(), over.error_code().as_deref()),
        (429, Some("quota_exceeded"))
    );
    let retry: u64 = over.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=32 * 86_400).contains(&retry));
    // The team's 3 counted in the org too: 7 left there.
    for _ in 0..7 {
        assert_eq!(get_via(&gw, up.addr, "/org/x", &[]).await.status, 200);
    }
    assert_eq!(get_via(&gw, up.addr, "/org/x", &[]).await.status, 429);
    let state = admin_get(&gw, "/policies").await.json();
    assert_eq!(state["policies"][0]["state"]["quota"]["remaining"], 0);
    assert_eq!(state["policies"][1]["state"]["quota"]["used"], 10);
    let m = metrics_when(&gw, |t| t.contains("tollgate_quota_remaining")).await;
    assert!(
        m.contains("tollgate_quota_remaining{name=\"org\"} 0"),
        "{m}"
    );
}

#[tokio::test]
async fn reload_keeps_state_unless_the_definition_changed() {
    let up = echo_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.yaml");
    let yaml = |limit: u64, level: &str| {
        format!(
            "log: {{level: {level}}}\npolicies:\n  - name: p\n    match: {{host: 127.0.0.1}}\n    rate_limit: {{limit: {limit}, window: day}}\n"
        )
    };
    std::fs::write(&file, yaml(2, "info")).unwrap();
    let gw = gateway_from_file(&file, false).await;
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
    // Another section changed: the counter is kept, the limit still reached.
    std::fs::write(&file, yaml(2, "debug")).unwrap();
    assert_eq!(post_reload(&gw).await.status, 200);
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 429);
    // The limit's definition changed: it starts afresh.
    std::fs::write(&file, yaml(3, "debug")).unwrap();
    assert_eq!(post_reload(&gw).await.status, 200);
    assert_eq!(get_via(&gw, up.addr, "/", &[]).await.status, 200);
}
