//! `store.backend: redis`: several gateways share each limit through a real
//! `redis-server`, state outlives a gateway, and a Redis that goes away costs no request.

use crate::support::redis_procs::{RedisCluster, RedisSentinel, RedisServer};
use crate::support::*;
use http::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn store(redis: &RedisServer, extra: &str) -> String {
    format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 200ms\n{extra}",
        redis.url()
    )
}

/// `n` GETs of `path/i` spread over `gws` round-robin, all in flight together: the
/// statuses.
async fn spread(
    gws: &[tollgate::Gateway],
    up: std::net::SocketAddr,
    path: &str,
    n: usize,
) -> Vec<u16> {
    at_once(gws, up, n, |i| format!("{path}/{i}"))
        .await
        .iter()
        .map(|g| g.status.as_u16())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_gateways_on_one_redis_share_one_limit_exactly() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let up = upstream(move |_req| {
        h.fetch_add(1, Ordering::SeqCst);
        async { answer(200, &[], "ok") }
    })
    .await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    rate_limit: {limit: 50, window: hour}\n",
    );
    let gws = vec![
        gateway(&yaml).await,
        gateway(&yaml).await,
        gateway(&yaml).await,
    ];
    let statuses = spread(&gws, up.addr, "/shared", 300).await;
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((ok, limited), (50, 250), "{statuses:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 50);
    // The count is in Redis, under the prefix, the resource in a hash tag.
    let keys = redis.cli(&["--scan", "--pattern", "tollgate:{*"]);
    assert!(!keys.is_empty(), "no tollgate key in Redis");
    let m = metrics_when(&gws[0], |t| {
        t.contains("tollgate_store_duration_seconds_count")
    })
    .await;
    assert!(
        !m.contains("tollgate_store_errors_total{kind=\"error\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_outlives_the_gateway_that_counted_it() {
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    let yaml = store(
        &redis,
        "quotas:\n  daily: {limit: 5}\npolicies:\n  - name: q\n    quota: daily\n",
    );
    let first = gateway(&yaml).await;
    for _ in 0..3 {
        assert_eq!(
            get_via(&first, up.addr, "/q", &[]).await.status,
            StatusCode::OK
        );
    }
    first.shutdown();
    first.wait().await;
    let second = gateway(&yaml).await;
    for _ in 0..2 {
        assert_eq!(
            get_via(&second, up.addr, "/q", &[]).await.status,
            StatusCode::OK
        );
    }
    let over = get_via(&second, up.addr, "/q", &[]).await;
    assert_eq!(over.error_code().as_deref(), Some("quota_exceeded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_costs_no_request_and_shared_counting_resumes_when_it_returns() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // Two replicas expected: while Redis is away each takes half of the limit.
    let yaml = store(
        &redis,
        "  expected_replicas: 2\npolicies:\n  - name: p\n    rate_limit: {limit: 10, window: hour}\n",
    );
    let gw = gateway(&yaml).await;
    assert_eq!(
        get_via(&gw, up.addr, "/a", &[]).await.status,
        StatusCode::OK
    );
    let port = redis.kill();
    // Local counting with half the limit: 5 pass, then 429; never a 5xx.
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(get_via(&gw, up.addr, "/b", &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    let m = metrics_when(&gw, |t| {
        t.contains("tollgate_store_errors_total{kind=\"error\"}")
    })
    .await;
    assert!(
        m.contains("tollgate_store_errors_total{kind=\"error\"}"),
        "{m}"
    );
    // Still ready: each replica falls back; /policies says the store is not answering.
    assert_eq!(admin_get(&gw, "/readyz").await.status, StatusCode::OK);
    let store = admin_get(&gw, "/policies").await.json()["store"].clone();
    assert_eq!(store["backend"], "redis");
    assert_eq!(store["answering"], false, "{store}");
    // Redis back (empty): after the circuit's backoff the count is Redis's again.
    let redis = RedisServer::on(port);
    let mut back = false;
    for _ in 0..200 {
        let _ = get_via(&gw, up.addr, "/c", &[]).await;
        if !redis
            .cli(&["--scan", "--pattern", "tollgate:{*"])
            .is_empty()
        {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(back, "the gateway never counted in Redis again");
    let store = admin_get(&gw, "/policies").await.json()["store"].clone();
    assert_eq!(store["answering"], true, "{store}");
}

/// `kind`'s count of `tollgate_store_errors_total` (0 when absent).
async fn store_errors(gw: &tollgate::Gateway, kind: &str) -> u64 {
    let text = String::from_utf8_lossy(&admin_get(gw, "/metrics").await.body).into_owned();
    let line = format!("tollgate_store_errors_total{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_redis_is_shared_again_at_the_first_try_after_the_backoff() {
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    rate_limit: {limit: 1000, window: hour}\n",
    );
    let gw = gateway(&yaml).await;
    // Both workers' connections made and used.
    assert_eq!(passed(&gw, up.addr, "/a", 10).await, 10);
    let port = redis.kill();
    // Failures until the circuit has opened a few times (the backoff grows).
    let mut failed = 0;
    for _ in 0..500 {
        assert_eq!(
            get_via(&gw, up.addr, "/b", &[]).await.status,
            StatusCode::OK
        );
        failed = store_errors(&gw, "error").await + store_errors(&gw, "timeout").await;
        if failed >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(failed >= 3, "the dead Redis was never counted");
    let redis = RedisServer::on(port);
    // Redis answers PING: every try from now on succeeds, on every worker (none fails
    // on a connection broken before, or in its own reconnect backoff).
    let before = store_errors(&gw, "error").await + store_errors(&gw, "timeout").await;
    let mut back = false;
    for _ in 0..1000 {
        let _ = get_via(&gw, up.addr, "/c", &[]).await;
        if admin_get(&gw, "/policies").await.json()["store"]["answering"] == true
            && !redis
                .cli(&["--scan", "--pattern", "tollgate:{*"])
                .is_empty()
        {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(back, "never shared again");
    assert_eq!(passed(&gw, up.addr, "/d", 20).await, 20);
    let after = store_errors(&gw, "error").await + store_errors(&gw, "timeout").await;
    assert_eq!(after, before, "tries against a Redis that answers failed");
    // Counted in Redis: the 20 of /d and what /c sent once it was back.
    let key = redis.cli(&["--scan", "--pattern", "tollgate:{*"]);
    let counted: u64 = redis
        .cli(&["GET", key.lines().next().unwrap()])
        .parse()
        .unwrap();
    assert!(counted >= 20, "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_redis_password_is_an_auth_error_with_its_fix_in_policies() {
    let redis = RedisServer::start();
    redis.cli(&["CONFIG", "SET", "requirepass", "right"]);
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // The default timeout (20 ms): the refusal is still seen as what it is.
    let yaml = format!(
        "store:\n  backend: redis\n  url: redis://:wrong@127.0.0.1:{}\npolicies:\n  - name: p\n    rate_limit: {{limit: 10, window: hour}}\n",
        redis.port
    );
    let gw = gateway(&yaml).await;
    assert_eq!(
        get_via(&gw, up.addr, "/a", &[]).await.status,
        StatusCode::OK
    );
    let m = metrics_when(&gw, |t| {
        t.contains("tollgate_store_errors_total{kind=\"error\"} ")
            && !t.contains("tollgate_store_errors_total{kind=\"error\"} 0\n")
    })
    .await;
    // Every kind is exported from the start, at 0 until it happens.
    assert!(
        !m.contains("tollgate_store_errors_total{kind=\"error\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains("tollgate_store_errors_total{kind=\"timeout\"} 0\n"),
        "{m}"
    );
    let store = admin_get(&gw, "/policies").await.json()["store"].clone();
    assert_eq!(store["answering"], false, "{store}");
    let last = &store["last_error"];
    assert_eq!(last["cause"], "auth", "{store}");
    assert!(
        last["fix"].as_str().unwrap().contains("password"),
        "{store}"
    );
    assert!(
        !store.to_string().contains("wrong"),
        "the password shown: {store}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_streams_a_huge_reply_is_cut_off_and_named() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Not Redis: it announces a 1 GiB bulk reply to anything and streams it (64 MiB at
    // most per connection, this test's own bound).
    let streamed = Arc::new(AtomicUsize::new(0));
    let sent = streamed.clone();
    let peer = raw_upstream(move |mut s| {
        let sent = sent.clone();
        async move {
            let mut buf = [0u8; 4096];
            if s.read(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
            let _ = s.write_all(b"$1073741824\r\n").await;
            let chunk = vec![b'x'; 64 << 10];
            for _ in 0..1024 {
                if s.write_all(&chunk).await.is_err() {
                    return;
                }
                sent.fetch_add(chunk.len(), Ordering::SeqCst);
            }
        }
    })
    .await;
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // A timeout long enough for the stream to pass any sane reply's size.
    let yaml = format!(
        "store:\n  backend: redis\n  url: redis://{}\n  timeout: 2s\npolicies:\n  - name: p\n    rate_limit: {{limit: 10, window: hour}}\n",
        peer.addr
    );
    let gw = gateway(&yaml).await;
    assert_eq!(
        get_via(&gw, up.addr, "/a", &[]).await.status,
        StatusCode::OK
    );
    let store = admin_get(&gw, "/policies").await.json()["store"].clone();
    assert_eq!(store["last_error"]["cause"], "reply", "{store}");
    // What it could push before the connection was cut: the bound (1 MiB and a little
    // per byte sent) and the sockets' buffers, not the 64 MiB it had.
    let pushed = streamed.load(Ordering::SeqCst) >> 20;
    assert!(
        pushed < 16,
        "{pushed} MiB read from a peer that is not Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_mode_counts_the_blocks_a_replica_holds_when_it_falls_back() {
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // Limit 50 in blocks of 10, two replicas expected: a share of 25 while Redis is away.
    let yaml = store(
        &redis,
        "  expected_replicas: 2\n  sync: lease\n  lease_size: 10\npolicies:\n  - name: p\n    rate_limit: {limit: 50, window: hour}\n",
    );
    let gw = gateway(&yaml).await;
    assert_eq!(passed(&gw, up.addr, "/a", 20).await, 20);
    redis.kill();
    // It took 20 from Redis: 5 more of its share of 25, not 25 more.
    assert_eq!(passed(&gw, up.addr, "/b", 30).await, 5);
}

#[test]
fn the_store_section_names_what_is_missing_and_masks_the_password() {
    let e = tollgate::Config::from_yaml("store:\n  backend: redis\n").unwrap_err();
    let text = format!("{e:?}");
    assert!(
        text.contains("store.url") && text.contains("redis://HOST:6379"),
        "{text}"
    );
    let e = tollgate::Config::from_yaml("store:\n  backend: redis\n  url: http://x:6379\n")
        .unwrap_err();
    assert!(format!("{e:?}").contains("not a Redis URL"), "{e:?}");
    let e = tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  url: redis://h:6379\n  prefix: 'a{b}'\n",
    )
    .unwrap_err();
    assert!(format!("{e:?}").contains("store.prefix"), "{e:?}");
    let e = tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  url: redis://h:6379\n  cluster: ['redis://h:7000']\n",
    )
    .unwrap_err();
    assert!(
        format!("{e:?}").contains("store.cluster") && format!("{e:?}").contains("not several"),
        "{e:?}"
    );
    let e = tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  url: redis://h:6379\n  sentinel: {nodes: ['redis://h:26379'], master: m}\n",
    )
    .unwrap_err();
    assert!(format!("{e:?}").contains("store.sentinel"), "{e:?}");
    let e = tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  sentinel: {nodes: [], master: ''}\n",
    )
    .unwrap_err();
    let text = format!("{e:?}");
    assert!(
        text.contains("store.sentinel.nodes") && text.contains("store.sentinel.master"),
        "{text}"
    );
    // The primary's password and a Sentinel's never shown.
    let c = tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  sentinel: {nodes: ['redis://:s3cret@h:26379'], master: m, password: hunter3}\n",
    )
    .unwrap();
    let shown = c.effective().to_string();
    assert!(
        !shown.contains("hunter3") && !shown.contains("s3cret") && shown.contains("MASKED"),
        "{shown}"
    );
    // TLS to Redis is built in.
    tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  url: 'rediss://redis.internal:6380'\n",
    )
    .unwrap();
    let c = tollgate::Config::from_yaml(
        "store:\n  backend: redis\n  url: 'redis://:hunter2@127.0.0.1:6379/0'\n",
    )
    .unwrap();
    let shown = c.effective().to_string();
    assert!(
        !shown.contains("hunter2") && shown.contains("MASKED@127.0.0.1"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_pause_seen_by_one_replica_pauses_the_others() {
    let redis = RedisServer::start();
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        if req.uri().path() == "/slow-down" {
            answer(429, &[("retry-after", "120")], "")
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    provider_throttling: {}\n",
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    assert_eq!(get_via(&b, up.addr, "/x", &[]).await.status, StatusCode::OK);
    // Replica a hears the provider's 429 with Retry-After …
    assert_eq!(
        get_via(&a, up.addr, "/slow-down", &[])
            .await
            .status
            .as_u16(),
        429
    );
    // … and replica b, which never saw it, holds off too.
    let paused = get_via(&b, up.addr, "/x", &[]).await;
    assert_eq!(paused.error_code().as_deref(), Some("provider_throttled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_counts_requests_in_flight_on_every_replica() {
    let redis = RedisServer::start();
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let up = upstream(move |req: http::Request<hyper::body::Incoming>| {
        let g = g.clone();
        async move {
            if req.uri().path() == "/hold" {
                g.notified().await;
            }
            answer(200, &[], "ok")
        }
    })
    .await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    concurrency: {max: 1}\n",
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    let held = {
        let (proxy, up) = (a.proxy_addr, up.addr);
        tokio::spawn(async move {
            let req = http::Request::get(format!("http://{proxy}/hold"))
                .header("x-tollgate-host", up.to_string())
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap();
            send(&client(), req).await.status
        })
    };
    // The slot is taken on a (seen in Redis) before b is asked.
    let mut taken = false;
    for _ in 0..200 {
        let keys = redis.cli(&["--scan", "--pattern", "tollgate:{*"]);
        if keys.lines().any(|k| redis.cli(&["ZCARD", k]) == "1") {
            taken = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(taken, "replica a never took the slot in Redis");
    let refused = get_via(&b, up.addr, "/other", &[]).await;
    assert_eq!(refused.status.as_u16(), 429, "{:?}", refused.error_code());
    gate.notify_one();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // Released on a: b gets the slot.
    let mut ok = false;
    for _ in 0..200 {
        if get_via(&b, up.addr, "/other", &[]).await.status == StatusCode::OK {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(ok, "the slot released on a never became free for b");
}

/// An upstream that holds each request until a permit is added: how many it holds now,
/// and the most it ever held at once.
async fn holding_upstream() -> (
    Server,
    Arc<tokio::sync::Semaphore>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (held, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (g, h, p) = (gate.clone(), held.clone(), peak.clone());
    let up = upstream(move |_req| {
        let (g, h, p) = (g.clone(), h.clone(), p.clone());
        async move {
            let now = h.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            g.acquire().await.unwrap().forget();
            h.fetch_sub(1, Ordering::SeqCst);
            answer(200, &[], "ok")
        }
    })
    .await;
    (up, gate, held, peak)
}

/// The members of the one sorted set (the concurrency leases) under tollgate's prefix.
fn leases_in(redis: &RedisServer) -> usize {
    let keys = redis.cli(&["--scan", "--pattern", "tollgate:{*"]);
    keys.lines()
        .map(|k| redis.cli(&["ZCARD", k]).parse::<usize>().unwrap_or(0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_concurrency_limit_never_lets_more_than_max_run_at_once() {
    let redis = RedisServer::start();
    let (up, gate, held, peak) = holding_upstream().await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    concurrency: {max: 4}\n",
    );
    let gws = [gateway(&yaml).await, gateway(&yaml).await];
    // 24 at once over two replicas: 4 run, 20 are refused at once.
    let refused = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..24 {
        let proxy = gws[i % 2].proxy_addr;
        let refused = refused.clone();
        tasks.push(tokio::spawn(async move {
            let req = http::Request::get(format!("http://{proxy}/slow/{i}"))
                .header("x-tollgate-host", up.addr.to_string())
                .header("x-tollgate-scheme", "http")
                .body(empty())
                .unwrap();
            let status = send(&client(), req).await.status.as_u16();
            if status == 429 {
                refused.fetch_add(1, Ordering::SeqCst);
            }
            status
        }));
    }
    wait_until("every request held or refused", || {
        held.load(Ordering::SeqCst) + refused.load(Ordering::SeqCst) == 24
    })
    .await;
    assert_eq!(held.load(Ordering::SeqCst), 4);
    // One lease per request in flight, each its own member.
    assert_eq!(leases_in(&redis), 4);
    // The end of one request frees its own slot, not another's.
    gate.add_permits(1);
    wait_until("one held request answered", || {
        held.load(Ordering::SeqCst) == 3
    })
    .await;
    wait_until("its lease given back", || leases_in(&redis) <= 3).await;
    assert_eq!(leases_in(&redis), 3);
    gate.add_permits(3);
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        4,
        "{statuses:?}"
    );
    assert_eq!(peak.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_cluster_shares_limits_as_one_redis_does() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let cluster = RedisCluster::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // One seed node is enough: the others are discovered.
    let yaml = format!(
        "store:\n  backend: redis\n  cluster: ['redis://127.0.0.1:{}']\n  timeout: 500ms\nrate_limits:\n  a: {{limit: 20, window: hour}}\n  b: {{limit: 30, window: hour}}\npolicies:\n  - name: a\n    match: {{path: '/a/*'}}\n    rate_limit: a\n  - name: b\n    match: {{path: '/b/*'}}\n    rate_limit: b\n",
        cluster.nodes[0]
    );
    let gws = vec![
        gateway(&yaml).await,
        gateway(&yaml).await,
        gateway(&yaml).await,
    ];
    let a = spread(&gws, up.addr, "/a", 90).await;
    let b = spread(&gws, up.addr, "/b", 90).await;
    let ok = |s: &[u16]| s.iter().filter(|s| **s == 200).count();
    assert_eq!((ok(&a), ok(&b)), (20, 30), "{a:?} {b:?}");
    assert!(a.iter().chain(&b).all(|s| *s == 200 || *s == 429));
    // Each limit's keys live on the node that owns its hash tag's slot.
    let keys: Vec<String> = cluster
        .nodes
        .iter()
        .flat_map(|&p| {
            cluster
                .cli(p, &["--scan", "--pattern", "tollgate:{*"])
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(keys.len() >= 2, "{keys:?}");
    let m = metrics_when(&gws[0], |t| {
        t.contains("tollgate_store_duration_seconds_count")
    })
    .await;
    assert!(
        m.contains("tollgate_store_errors_total{kind=\"error\"} 0\n"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_holds_a_request_no_longer_than_the_store_timeout() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    let yaml = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 100ms\npolicies:\n  - name: p\n    rate_limit: {{limit: 10, window: hour}}\n",
        redis.url()
    );
    let gw = gateway(&yaml).await;
    assert_eq!(
        get_via(&gw, up.addr, "/warm", &[]).await.status,
        StatusCode::OK
    );
    // Redis stops answering every client for 5 s.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "5000", "ALL"]), "OK");
    let paused_at = std::time::Instant::now();
    let got = get_via(&gw, up.addr, "/during", &[]).await;
    let waited = paused_at.elapsed();
    // Answered from the fallback while Redis was still paused: the store's timeout, not
    // the pause, is what the request waited for.
    assert_eq!(got.status, StatusCode::OK);
    assert!(waited < std::time::Duration::from_secs(5), "{waited:?}");
    let m = metrics_when(&gw, |t| {
        t.contains("tollgate_store_errors_total{kind=\"timeout\"} 1")
    })
    .await;
    assert!(
        m.contains("tollgate_store_errors_total{kind=\"timeout\"} 1"),
        "{m}"
    );
}

/// How many times Redis has run `command` (`evalsha`, `incrby`) successfully so far.
fn calls(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .unwrap_or("");
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|f| f.strip_prefix(name))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    field("calls=") - field("failed_calls=")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_known_to_be_full_refuses_without_asking_redis() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    rate_limit: {limit: 5, window: hour}\n",
    );
    let gws = vec![
        gateway(&yaml).await,
        gateway(&yaml).await,
        gateway(&yaml).await,
    ];
    for i in 0..5 {
        let got = get_via(&gws[i % 3], up.addr, "/x", &[]).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let before = calls(&redis, "incrby");
    for gw in &gws {
        for _ in 0..10 {
            let got = get_via(gw, up.addr, "/x", &[]).await;
            assert_eq!(got.error_code().as_deref(), Some("rate_limited"));
        }
    }
    // Each gateway asked Redis once (its first refusal) and then knew the window was full.
    let asked = calls(&redis, "incrby") - before;
    assert!(asked <= 3, "Redis asked {asked} times for 30 refusals");
    assert!(asked >= 1, "Redis was never asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_by_one_replicas_failures_is_open_on_the_others() {
    let redis = RedisServer::start();
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        if req.uri().path() == "/fail" {
            answer(503, &[], "down")
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    breaker: {consecutive_failures: 2, open_for: 1m}\n",
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    assert_eq!(
        get_via(&b, up.addr, "/ok", &[]).await.status,
        StatusCode::OK
    );
    // Two failures in a row, both seen by replica a …
    for _ in 0..2 {
        assert_eq!(
            get_via(&a, up.addr, "/fail", &[]).await.status.as_u16(),
            503
        );
    }
    // … open the breaker for replica b too.
    let refused = get_via(&b, up.addr, "/ok", &[]).await;
    assert_eq!(refused.error_code().as_deref(), Some("circuit_open"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_breaker_leaves_no_key_without_an_expiry() {
    let redis = RedisServer::start();
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        if req.uri().path() == "/fail" {
            answer(503, &[], "down")
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    breaker: {consecutive_failures: 1, open_for: 20ms}\n",
    );
    let gw = gateway(&yaml).await;
    // Six cycles: a failure opens it, a probe after `open_for` closes it.
    for _ in 0..6 {
        assert_eq!(
            get_via(&gw, up.addr, "/fail", &[]).await.status.as_u16(),
            503
        );
        let mut closed = false;
        for _ in 0..500 {
            if get_via(&gw, up.addr, "/ok", &[]).await.status == StatusCode::OK {
                closed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(closed, "the breaker never closed again");
    }
    let keys = redis.cli(&["--scan", "--pattern", "tollgate:{*"]);
    assert!(keys.lines().any(|k| k.contains(":probes")), "{keys}");
    for k in keys.lines() {
        let ttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
        assert!(ttl > 0, "{k} has no expiry (PTTL {ttl})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_one_replica_spent_is_spent_for_the_others() {
    let redis = RedisServer::start();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let up = upstream(move |_req| {
        h.fetch_add(1, Ordering::SeqCst);
        async { answer(503, &[], "down") }
    })
    .await;
    // Three retries per window in all, whatever the traffic.
    let yaml = store(
        &redis,
        "policies:\n  - name: p\n    retry: {statuses: ['503'], attempts: 2, base_delay: 0s, budget: 0%, budget_min: 3, budget_window: 1h}\n",
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    for _ in 0..3 {
        let got = get_via(&a, up.addr, "/x", &[]).await;
        assert_eq!(got.header("x-tollgate-retries"), Some("1"));
    }
    // Replica b has retried nothing, but the budget is the replicas' together.
    let got = get_via(&b, up.addr, "/x", &[]).await;
    assert_eq!(got.status.as_u16(), 503);
    assert_eq!(got.header("x-tollgate-retries"), None);
    assert_eq!(hits.load(Ordering::SeqCst), 3 * 2 + 1);
}

/// `n` GETs of `path` sent one after another through `gw`: how many passed.
async fn passed(gw: &tollgate::Gateway, up: std::net::SocketAddr, path: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if get_via(gw, up, path, &[]).await.status == StatusCode::OK {
            ok += 1;
        }
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_takes_blocks_never_admits_over_the_limit_and_loses_at_most_a_block_per_replica()
{
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    let yaml = store(
        &redis,
        "  sync: lease\n  lease_size: 10\nrate_limits:\n  a: {limit: 50, window: hour}\n  b: {limit: 50, window: hour}\npolicies:\n  - name: a\n    match: {path: '/a/*'}\n    rate_limit: a\n  - name: b\n    match: {path: '/b/*'}\n    rate_limit: b\n",
    );
    let gws = vec![
        gateway(&yaml).await,
        gateway(&yaml).await,
        gateway(&yaml).await,
    ];
    // 300 requests at once over three replicas: never more than the limit, at most a
    // block per replica less, and far fewer round trips than admissions.
    let before = calls(&redis, "evalsha");
    let statuses = spread(&gws, up.addr, "/a", 300).await;
    let asked = calls(&redis, "evalsha") - before;
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert!((50 - 3 * 10..=50).contains(&ok), "{ok} admitted of 50");
    assert!(asked < 50, "{asked} scripts for {ok} admissions");
    // The bound, met exactly: a replica that took a block and used one admission of it
    // keeps the other nine from the replicas that go on.
    assert_eq!(passed(&gws[0], up.addr, "/b/x", 1).await, 1);
    assert_eq!(passed(&gws[1], up.addr, "/b/x", 60).await, 50 - 10);
    // The first replica still has its nine.
    assert_eq!(passed(&gws[0], up.addr, "/b/x", 20).await, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_without_a_restart() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let mut redis = RedisSentinel::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // `deny` while Redis cannot answer: every 200 below was counted on Redis.
    let yaml = format!(
        "store:\n  backend: redis\n  sentinel: {{nodes: ['{}'], master: {}}}\n  timeout: 200ms\n  on_error: deny\npolicies:\n  - name: p\n    rate_limit: {{limit: 10, window: hour}}\n",
        redis.url(),
        RedisSentinel::MASTER
    );
    let gw = gateway(&yaml).await;
    assert_eq!(passed(&gw, up.addr, "/before", 4).await, 4);
    // The four are on the replica too before the primary dies.
    assert_eq!(redis.primary.cli(&["WAIT", "1", "2000"]), "1");
    redis.fail_over();
    // Refused (never a 5xx) until the gateway reaches the promoted replica…
    let mut first = None;
    for _ in 0..300 {
        let got = get_via(&gw, up.addr, "/after", &[]).await;
        match got.status.as_u16() {
            200 => {
                first = Some(());
                break;
            }
            429 => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            s => panic!("{s} during the failover"),
        }
    }
    assert!(first.is_some(), "the promoted primary was never used");
    // … where the count went on from 4: six in all after the failover, then refusals.
    assert_eq!(1 + passed(&gw, up.addr, "/after", 20).await, 6);
    let keys = redis.primary.cli(&["--scan", "--pattern", "tollgate:{*"]);
    let key = keys.lines().next().expect("a key on the new primary");
    assert_eq!(redis.primary.cli(&["GET", key]), "10");
    let store = admin_get(&gw, "/policies").await.json()["store"].clone();
    assert_eq!(store["answering"], true, "{store}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_paused_or_gone_costs_no_request_and_is_shared_again_when_back() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let mut cluster = RedisCluster::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    // Alone while the cluster is away: half the limit (two replicas expected).
    let yaml = format!(
        "store:\n  backend: redis\n  cluster: ['redis://127.0.0.1:{}']\n  timeout: 200ms\n  expected_replicas: 2\npolicies:\n  - name: p\n    rate_limit: {{limit: 10, window: hour}}\n",
        cluster.nodes[0]
    );
    let gw = gateway(&yaml).await;
    assert_eq!(passed(&gw, up.addr, "/x", 3).await, 3);
    // Every node paused: answered from memory within the store's timeout.
    for &p in &cluster.nodes {
        assert_eq!(cluster.cli(p, &["CLIENT", "PAUSE", "5000", "ALL"]), "OK");
    }
    let paused_at = std::time::Instant::now();
    assert_eq!(
        get_via(&gw, up.addr, "/x", &[]).await.status,
        StatusCode::OK
    );
    assert!(paused_at.elapsed() < std::time::Duration::from_secs(5));
    // Every node killed: no 5xx; this replica's share of 5 (one taken while paused).
    cluster.kill_all();
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..10 {
            v.push(get_via(&gw, up.addr, "/x", &[]).await.status.as_u16());
        }
        v
    };
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        4,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    // Back (empty: the nodes kept no data): counted on the cluster again, no restart.
    cluster.restart();
    let mut back = false;
    for _ in 0..600 {
        if get_via(&gw, up.addr, "/x", &[]).await.status == StatusCode::OK {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(back, "the cluster was never used again");
    assert_eq!(1 + passed(&gw, up.addr, "/x", 20).await, 10);
    let m = metrics_when(&gw, |t| {
        t.contains("tollgate_store_errors_total{kind=\"timeout\"}")
    })
    .await;
    assert!(
        m.contains("tollgate_store_errors_total{kind=\"timeout\"}"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_written_shared_false_is_each_replicas_own() {
    // Exact counts in an hour window: not across the hour's end.
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = upstream(|_req| async { answer(200, &[], "ok") }).await;
    let yaml = store(
        &redis,
        "rate_limits:\n  global: {limit: 3, window: hour}\n  each: {limit: 3, window: hour, shared: false}\nconcurrency_limits:\n  c: {max: 1, shared: false}\npolicies:\n  - name: g\n    match: {path: '/g/*'}\n    rate_limit: global\n  - name: e\n    match: {path: '/e/*'}\n    rate_limit: each\n    concurrency: c\n",
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    assert_eq!(passed(&a, up.addr, "/g/x", 5).await, 3);
    assert_eq!(passed(&b, up.addr, "/g/x", 5).await, 0);
    // Three on each replica, and nothing of it on Redis.
    assert_eq!(passed(&a, up.addr, "/e/x", 5).await, 3);
    assert_eq!(passed(&b, up.addr, "/e/x", 5).await, 3);
    let keys = redis.cli(&["--scan", "--pattern", "tollgate:{*"]);
    assert!(
        keys.contains("rate:global") && !keys.contains("each"),
        "{keys}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_quota_outlives_its_gateway_and_a_pause_holds_every_replica() {
    let cluster = RedisCluster::start();
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        if req.uri().path().ends_with("/slow-down") {
            answer(429, &[("retry-after", "120")], "")
        } else {
            answer(200, &[], "ok")
        }
    })
    .await;
    let yaml = format!(
        "store:\n  backend: redis\n  cluster: ['redis://127.0.0.1:{}']\n  timeout: 500ms\nquotas:\n  daily: {{limit: 3}}\npolicies:\n  - name: q\n    match: {{path: '/q/*'}}\n    quota: daily\n  - name: p\n    match: {{path: '/p/*'}}\n    provider_throttling: {{}}\n",
        cluster.nodes[0]
    );
    let first = gateway(&yaml).await;
    assert_eq!(passed(&first, up.addr, "/q/x", 2).await, 2);
    first.shutdown();
    first.wait().await;
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    // The quota's third and last, counted before the restart.
    assert_eq!(passed(&a, up.addr, "/q/x", 5).await, 1);
    // A 429 with Retry-After seen by a holds b.
    assert_eq!(
        get_via(&a, up.addr, "/p/slow-down", &[])
            .await
            .status
            .as_u16(),
        429
    );
    let paused = get_via(&b, up.addr, "/p/x", &[]).await;
    assert_eq!(paused.error_code().as_deref(), Some("provider_throttled"));
}
