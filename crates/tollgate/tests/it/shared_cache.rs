//! `cache: {store: shared}` on `store.backend: redis`: an answer one gateway fetched serves
//! the others from a real `redis-server`, a revalidation by one refreshes the entry for
//! all, `Vary` still holds, no secret reaches Redis, a value that is not an entry is a
//! miss, and a Redis that goes away costs no request.

use crate::support::redis_procs::RedisServer;
use crate::support::*;
use http::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn config(redis: &RedisServer, cache: &str) -> String {
    format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 200ms\npolicies:\n  - name: gh\n    cache: {cache}\n",
        redis.url()
    )
}

/// An upstream counting its calls, answering `body` with `headers`.
async fn counted(headers: &'static [(&'static str, &'static str)]) -> (Server, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let up = upstream(move |req: http::Request<hyper::body::Incoming>| {
        let n = c.fetch_add(1, Ordering::SeqCst) + 1;
        let conditional = req.headers().contains_key("if-none-match");
        async move {
            if conditional {
                return answer(304, &[("etag", "\"v1\"")], "");
            }
            let mut h: Vec<(&str, &str)> = headers.to_vec();
            h.push(("content-type", "application/json"));
            answer(200, &h, &format!("{{\"call\":{n}}}"))
        }
    })
    .await;
    (up, calls)
}

/// The entry on Redis once it is there and differs from `before` (the store is written as
/// the answer's last byte goes, so a client may read it first); fails if it never comes.
async fn entry_on_redis(redis: &RedisServer, before: Option<&str>) -> (String, String) {
    entry_of(redis, "gh", before).await
}

/// [`entry_on_redis`] for the cache of `policy`.
async fn entry_on_redis_with(redis: &RedisServer, policy: &str) -> (String, String) {
    entry_of(redis, policy, None).await
}

async fn entry_of(redis: &RedisServer, policy: &str, before: Option<&str>) -> (String, String) {
    let pattern = format!("tollgate:{{cache:{policy}:*}}:entry:0");
    for _ in 0..100 {
        let keys = redis.cli(&["--scan", "--pattern", &pattern]);
        if let Some(key) = keys.lines().next() {
            let value = redis.cli(&["GET", key]);
            if before != Some(value.as_str()) {
                return (key.to_owned(), value);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no (new) entry on Redis");
}

fn cache_header(g: &Got) -> String {
    g.headers
        .get("x-tollgate-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_one_gateway_fetched_serves_the_others_from_redis() {
    let redis = RedisServer::start();
    let (up, calls) = counted(&[]).await;
    let yaml = config(&redis, "{ttl: 60s, store: shared}");
    let gws = three(&yaml).await;
    let first = get_via(&gws[0], up.addr, "/repos/o/r", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(cache_header(&first), "miss");
    let (key, _) = entry_on_redis(&redis, None).await;
    let mut seen = Vec::new();
    for gw in &gws[1..] {
        let g = get_via(gw, up.addr, "/repos/o/r", &[]).await;
        assert_eq!(g.body, first.body, "the same bytes from another replica");
        seen.push(cache_header(&g));
    }
    assert_eq!(seen, ["shared-hit", "shared-hit"]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "one provider call for three replicas"
    );
    // Read once from Redis, the entry is the replica's own: its next hit is a plain hit.
    let again = get_via(&gws[1], up.addr, "/repos/o/r", &[]).await;
    assert_eq!(cache_header(&again), "hit");
    // The entry expires on Redis (never a key without one) and `/policies` says where
    // entries live and how many hits came from the other replicas.
    let ttl: i64 = redis.cli(&["PTTL", &key]).trim().parse().unwrap();
    assert!(ttl > 0 && ttl <= 120_000, "{ttl}");
    let p = admin_get(&gws[1], "/policies").await.json();
    let cache = &p["policies"][0]["state"]["cache"];
    assert_eq!(cache["store"], "shared", "{p}");
    assert_eq!(cache["shared_hits"], 1, "{p}");
    let m = metrics_when(&gws[2], |t| t.contains("action=\"shared_hit\"")).await;
    assert!(m.contains("action=\"shared_hit\""), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revalidation_by_one_replica_refreshes_the_entry_for_the_others() {
    let redis = RedisServer::start();
    let (up, calls) = counted(&[("etag", "\"v1\""), ("cache-control", "max-age=1")]).await;
    let yaml = config(&redis, "{ttl: 60s, store: shared}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    assert_eq!(cache_header(&get_via(&a, up.addr, "/r", &[]).await), "miss");
    let (_, stored) = entry_on_redis(&redis, None).await;
    // Stale after its max-age: A revalidates, the provider answers 304.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let revalidated = get_via(&a, up.addr, "/r", &[]).await;
    assert_eq!(revalidated.status, StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    entry_on_redis(&redis, Some(&stored)).await;
    // B never saw the entry: it reads the refreshed one, fresh, from Redis.
    let g = get_via(&b, up.addr, "/r", &[]).await;
    assert_eq!(cache_header(&g), "shared-hit");
    assert_eq!(g.body, revalidated.body);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "no call for B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vary_holds_across_replicas_and_no_secret_reaches_redis() {
    let redis = RedisServer::start();
    let (up, calls) = counted(&[("vary", "accept")]).await;
    let yaml = config(&redis, "{ttl: 60s, store: shared, key_headers: [x-tenant]}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    let token = "Bearer ghp_secretvalue1234567890";
    let json = [
        ("accept", "application/json"),
        ("authorization", token),
        ("x-tenant", "acme-tenant-77"),
    ];
    assert_eq!(
        cache_header(&get_via(&a, up.addr, "/v", &json).await),
        "miss"
    );
    entry_on_redis(&redis, None).await;
    assert_eq!(
        cache_header(&get_via(&b, up.addr, "/v", &json).await),
        "shared-hit"
    );
    // Another `Accept`: the entry varied on it, so B fetches.
    let other = [
        ("accept", "text/plain"),
        ("authorization", token),
        ("x-tenant", "acme-tenant-77"),
    ];
    assert_eq!(
        cache_header(&get_via(&b, up.addr, "/v", &other).await),
        "miss"
    );
    // Another caller's credential is another key: not served the first caller's answer.
    let stranger = [
        ("accept", "application/json"),
        ("authorization", "Bearer someone-else-000"),
    ];
    assert_eq!(
        cache_header(&get_via(&b, up.addr, "/v", &stranger).await),
        "miss"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Everything on Redis, keys and values: neither the credential nor the key header.
    let keys = redis.cli(&["--scan", "--pattern", "*"]);
    assert!(keys.lines().count() >= 2, "{keys}");
    for key in keys.lines() {
        let value = redis.cli(&["GET", key]);
        for secret in [
            "ghp_secretvalue1234567890",
            "acme-tenant-77",
            "someone-else",
        ] {
            assert!(!key.contains(secret), "{key}");
            assert!(!value.contains(secret), "{key}: {value}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_that_is_not_an_entry_is_a_miss_and_a_dead_redis_costs_no_request() {
    let redis = RedisServer::start();
    let (up, calls) = counted(&[]).await;
    let yaml = config(&redis, "{ttl: 60s, store: shared}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    assert_eq!(cache_header(&get_via(&a, up.addr, "/c", &[]).await), "miss");
    let (key, _) = entry_on_redis(&redis, None).await;
    redis.cli(&["SET", &key, "not an entry", "PX", "60000"]);
    let g = get_via(&b, up.addr, "/c", &[]).await;
    assert_eq!(
        (g.status, cache_header(&g).as_str()),
        (StatusCode::OK, "miss")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let m = metrics_when(&b, |t| {
        t.contains("tollgate_cache_shared_corrupt_total{name=\"gh\"} 1")
    })
    .await;
    assert!(
        m.contains("tollgate_cache_shared_corrupt_total{name=\"gh\"} 1"),
        "{m}"
    );
    // Redis gone: every call answered, from memory or the provider.
    let _port = redis.kill();
    let mut statuses = Vec::new();
    for (gw, path) in [(&a, "/c"), (&b, "/c"), (&a, "/d"), (&b, "/d"), (&b, "/d")] {
        statuses.push(get_via(gw, up.addr, path, &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200; 5]);
}

/// An upstream whose first answer takes `first`, the others `rest`: its calls counted.
async fn slow(first: u64, rest: u64) -> (Server, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let up = upstream(move |_req| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move {
            let wait = if n == 0 { first } else { rest };
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            answer(
                200,
                &[("content-type", "application/json")],
                "{\"listing\":[1,2,3]}",
            )
        }
    })
    .await;
    (up, calls)
}

/// `n` GETs of `path` at once, spread over `gws`: the `x-tollgate-cache` of each (all 200).
async fn at_once_cached(
    gws: &[tollgate::Gateway],
    up: std::net::SocketAddr,
    path: &str,
    n: usize,
) -> Vec<String> {
    let got = at_once(gws, up, n, |_| path.to_owned()).await;
    assert!(got.iter().all(|g| g.status == StatusCode::OK));
    got.iter().map(cache_header).collect()
}

/// Three gateways on `yaml`, as three replicas.
async fn three(yaml: &str) -> [tollgate::Gateway; 3] {
    [
        gateway(yaml).await,
        gateway(yaml).await,
        gateway(yaml).await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_identical_calls_across_three_replicas_make_one_provider_call() {
    let redis = RedisServer::start();
    thirty_calls_make_one(&config(&redis, "{ttl: 60s, store: shared}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_redis_cluster_thirty_identical_calls_across_three_replicas_make_one_call() {
    let cluster = crate::support::redis_procs::RedisCluster::start();
    thirty_calls_make_one(&format!(
        "store:\n  backend: redis\n  cluster: ['redis://127.0.0.1:{}']\n  timeout: 500ms\npolicies:\n  - name: gh\n    cache: {{ttl: 60s, store: shared}}\n",
        cluster.nodes[0]
    ))
    .await;
}

async fn thirty_calls_make_one(yaml: &str) {
    let (up, calls) = slow(300, 300).await;
    let gws = three(yaml).await;
    let seen = at_once_cached(&gws, up.addr, "/listing", 30).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| *s == "miss").count(), 1, "{seen:?}");
    // The two other replicas waited for the first's entry and read it from Redis.
    assert!(seen.iter().any(|s| s == "shared-hit"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fetch_past_max_wait_costs_at_most_one_call_per_replica() {
    let redis = RedisServer::start();
    // The first fetch takes far past `max_wait` (as a replica that died holding the key
    // would): each other replica waits `max_wait`, then fetches once for its own waiters.
    let (up, calls) = slow(1500, 50).await;
    let gws = three(&config(
        &redis,
        "{ttl: 60s, store: shared, max_wait: 200ms}",
    ))
    .await;
    let seen = at_once_cached(&gws, up.addr, "/listing", 30).await;
    let n = calls.load(Ordering::SeqCst);
    assert!((2..=3).contains(&n), "{n} calls: {seen:?}");
}

/// The token limit's `used_tokens` in `gw`'s `/policies`.
async fn used_tokens(gw: &tollgate::Gateway) -> u64 {
    admin_get(gw, "/policies").await.json()["policies"][0]["state"]["token_limit"]["used_tokens"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_llm_answer_from_the_cache_is_charged_nothing_and_counts_what_it_saved() {
    clear_of_the_hour_end(30).await;
    let redis = RedisServer::start();
    let up = crate::llm::stand_in().await;
    let yaml = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 200ms\ndiagnosis:\n  discovery: {{enabled: true}}\npolicies:\n  - name: ai\n    llm: {{tokenizer: false}}\n    cache: {{methods: [POST], key_body: true, ignore_cache_control: true, store: shared}}\n    token_limit: {{limit: 100000, window: hour}}\n",
        redis.url()
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    let path = "/v1/chat/completions";
    for (i, stream) in [false, true].into_iter().enumerate() {
        // A stream asks its usage itself: the client gets the usage chunk.
        let mut body = crate::llm::chat(stream, stream, 9);
        body["temperature"] = serde_json::json!(0);
        let first = crate::llm::post(Some(&a), &up, path, &body, &[]).await;
        assert_eq!(
            (first.status, cache_header(&first).as_str()),
            (StatusCode::OK, "miss")
        );
        let ended = format!(
            "tollgate_llm_calls_total{{policy=\"ai\",model=\"gpt-4o-mini-2025-01-01\"}} {}\n",
            i + 1
        );
        metrics_when(&a, |t| t.contains(&ended)).await;
        // The reservation settles at the answer's usage (on Redis, by a task of its own).
        let usage = match stream {
            true => crate::llm::streamed_usage(&first.body).expect("the usage chunk"),
            false => first.json()["usage"].clone(),
        };
        let total = usage["total_tokens"].as_u64().unwrap();
        assert!(total > 0);
        let charged = eventually("the call settled at its usage", || async {
            match used_tokens(&a).await {
                n if n == total => Ok(n),
                n => Err(n),
            }
        })
        .await;
        entry_on_redis_with(&redis, "ai").await;
        let replayed = crate::llm::post(Some(&b), &up, path, &body, &[]).await;
        assert_eq!(cache_header(&replayed), "shared-hit", "stream: {stream}");
        // The same bytes (a stream's events as the first caller got them), charged 0.
        assert_eq!(
            String::from_utf8_lossy(&replayed.body),
            String::from_utf8_lossy(&first.body)
        );
        assert_eq!(used_tokens(&b).await, charged, "stream: {stream}");
        // The token limit's count goes with the flush: the next case starts from 0.
        redis.cli(&["FLUSHALL"]);
    }
    // A sampled call (no temperature: the providers' default is 1) is not cached.
    let sampled = crate::llm::chat(false, false, 9);
    let got = crate::llm::post(Some(&a), &up, path, &sampled, &[]).await;
    assert_eq!(cache_header(&got), "bypass");
    // Both hits counted what the provider's answers had: 9 output tokens each.
    let line = "tollgate_cache_saved_tokens_total{policy=\"ai\",model=\"gpt-4o-mini-2025-01-01\",kind=\"output\"} 18";
    let m = metrics_when(&b, |t| t.contains(line)).await;
    assert!(m.contains(line), "{m}");
    assert!(
        m.contains(
            "tollgate_cache_saved_usd_total{policy=\"ai\",model=\"gpt-4o-mini-2025-01-01\"}"
        ),
        "{m}"
    );
    // Discovery counts what the endpoint's hits saved, beside what its calls used.
    let saved = eventually("discovery counted the saving", || async {
        match crate::llm::discovered(&b, "/v1/chat/completions").await {
            Some(r) if r["llm"]["saved"]["calls"] == 2 => Ok(r["llm"]["saved"].clone()),
            other => Err(other),
        }
    })
    .await;
    assert_eq!(saved["output_tokens"], 18, "{saved}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_redis_cluster_entries_spread_over_the_nodes_and_serve_every_replica() {
    let cluster = crate::support::redis_procs::RedisCluster::start();
    let (up, calls) = counted(&[]).await;
    let yaml = format!(
        "store:\n  backend: redis\n  cluster: ['redis://127.0.0.1:{}']\n  timeout: 500ms\npolicies:\n  - name: gh\n    cache: {{ttl: 60s, store: shared}}\n",
        cluster.nodes[0]
    );
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    let paths: Vec<String> = (0..12).map(|i| format!("/repos/o/r{i}")).collect();
    for p in &paths {
        assert_eq!(cache_header(&get_via(&a, up.addr, p, &[]).await), "miss");
    }
    let on = |port: u16| {
        cluster
            .cli(
                port,
                &["--scan", "--pattern", "tollgate:{cache:gh:*}:entry:0"],
            )
            .lines()
            .count()
    };
    eventually("every entry on the cluster", || async {
        match cluster.nodes.iter().map(|&p| on(p)).sum::<usize>() {
            12 => Ok(()),
            n => Err(n),
        }
    })
    .await;
    // Each entry is its own hash tag: a cache is not one node's load.
    let holding = cluster.nodes.iter().filter(|&&p| on(p) > 0).count();
    assert!(holding >= 2, "entries on {holding} node(s)");
    for p in &paths {
        assert_eq!(
            cache_header(&get_via(&b, up.addr, p, &[]).await),
            "shared-hit",
            "{p}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_or_killed_redis_under_load_fails_no_call() {
    let redis = RedisServer::start();
    let (up, _calls) = counted(&[]).await;
    let yaml = format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 100ms\npolicies:\n  - name: gh\n    cache: {{ttl: 60s, store: shared, max_wait: 300ms}}\n",
        redis.url()
    );
    let gws = three(&yaml).await;
    let load = |round: usize| {
        let gws = &gws;
        async move {
            // Misses and hits alike: 60 calls over 20 paths, all at once.
            at_once(gws, up.addr, 60, |i| format!("/load/{round}/{}", i % 20)).await
        }
    };
    assert!(load(0).await.iter().all(|g| g.status == StatusCode::OK));
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "3000", "ALL"]), "OK");
    let paused = std::time::Instant::now();
    let during = load(1).await;
    assert!(
        during.iter().all(|g| g.status == StatusCode::OK),
        "{:?}",
        during.iter().map(|g| g.status).collect::<Vec<_>>()
    );
    // Answered within the store's timeout (and max_wait), not the pause.
    assert!(
        paused.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        paused.elapsed()
    );
    let _ = redis.kill();
    let gone = load(2).await;
    assert!(gone.iter().all(|g| g.status == StatusCode::OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_holds_no_entry_past_max_entry_and_no_key_without_an_expiry() {
    let redis = RedisServer::start();
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        let size = if req.uri().path() == "/big" {
            4096
        } else {
            100
        };
        answer(200, &[("content-type", "text/plain")], &"x".repeat(size))
    })
    .await;
    let yaml = config(&redis, "{ttl: 60s, store: shared, max_entry: 1KiB}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    for path in ["/big", "/small"] {
        assert_eq!(get_via(&a, up.addr, path, &[]).await.status, StatusCode::OK);
    }
    let (key, value) = entry_on_redis(&redis, None).await;
    // Only the small answer is there, its record about its size: the head, the body.
    let keys = redis.cli(&["--scan", "--pattern", "tollgate:{cache:gh:*}:entry:0"]);
    assert_eq!(keys.lines().count(), 1, "{keys}");
    assert!(value.len() < 1024, "{}", value.len());
    assert_eq!(
        cache_header(&get_via(&b, up.addr, "/small", &[]).await),
        "shared-hit"
    );
    assert_eq!(
        cache_header(&get_via(&b, up.addr, "/big", &[]).await),
        "miss"
    );
    // Every key the cache wrote expires (the fetch leases too).
    for k in redis.cli(&["--scan", "--pattern", "*"]).lines() {
        let ttl: i64 = redis.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(ttl > 0, "{k} ({key}) has no expiry: {ttl}");
    }
}

/// The value of the counter `name{labels}` in a `/metrics` text (0 when absent).
fn counter(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_holds_no_more_of_a_cache_than_its_byte_budget() {
    let redis = RedisServer::start();
    let up = upstream(|_req: http::Request<hyper::body::Incoming>| async move {
        answer(200, &[("content-type", "text/plain")], &"x".repeat(300))
    })
    .await;
    let yaml = config(&redis, "{ttl: 60s, store: shared, shared_max_size: 2KiB}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    let paths: Vec<String> = (0..20).map(|i| format!("/item/{i}")).collect();
    for p in &paths {
        assert_eq!(get_via(&a, up.addr, p, &[]).await.status, StatusCode::OK);
    }
    // Every entry was written or kept back: 20 results, some of each.
    let written = r#"tollgate_cache_shared_writes_total{name="gh",result="written"}"#;
    let over = r#"tollgate_cache_shared_writes_total{name="gh",result="over_budget"}"#;
    let text = metrics_when(&a, |t| counter(t, written) + counter(t, over) == 20).await;
    let (w, o) = (counter(&text, written), counter(&text, over));
    assert!(w > 0 && o > 0, "written {w}, over budget {o}");
    // What Redis holds of the cache's entries is within the budget, and is what was
    // written.
    let keys = redis.cli(&["--scan", "--pattern", "tollgate:{cache:gh:*}:entry:0"]);
    let held: usize = keys
        .lines()
        .map(|k| redis.cli(&["STRLEN", k]).trim().parse::<usize>().unwrap())
        .sum();
    assert_eq!(keys.lines().count() as u64, w, "{keys}");
    assert!(held <= 2048, "{held} bytes on Redis");
    let state = admin_get(&a, "/policies").await.json();
    let cache = &state["policies"][0]["state"]["cache"];
    assert_eq!(cache["shared_max_size"], 2048, "{cache}");
    let counted = cache["shared_bytes"].as_u64().unwrap();
    assert!(
        held as u64 <= counted && counted <= 2048,
        "{held} held, {cache}"
    );
    // Every entry still serves its own replica; only those on Redis serve the other.
    let mut shared = 0;
    for p in &paths {
        assert_eq!(cache_header(&get_via(&a, up.addr, p, &[]).await), "hit");
        if cache_header(&get_via(&b, up.addr, p, &[]).await) == "shared-hit" {
            shared += 1;
        }
    }
    assert_eq!(shared, w, "shared hits on the other replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paced_replay_on_another_replica_keeps_the_streams_events_and_their_gaps() {
    use http_body_util::BodyExt;
    let redis = RedisServer::start();
    const GAP: std::time::Duration = std::time::Duration::from_millis(150);
    let up = upstream(|_req: http::Request<hyper::body::Incoming>| async move {
        let events = futures_util::stream::unfold(0, |i| async move {
            if i == 3 {
                return None;
            }
            if i > 0 {
                tokio::time::sleep(GAP).await;
            }
            let event = bytes::Bytes::from(format!("data: {{\"n\":{i}}}\n\n"));
            Some((
                Ok::<_, tollgate::body::BoxError>(http_body::Frame::data(event)),
                i + 1,
            ))
        });
        let mut resp = http::Response::new(
            http_body_util::StreamBody::new(events).boxed_unsync() as tollgate::body::Body
        );
        resp.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        resp
    })
    .await;
    let yaml = config(&redis, "{ttl: 60s, store: shared, replay: paced}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    let first = get_via(&a, up.addr, "/stream", &[]).await;
    assert_eq!(cache_header(&first), "miss");
    entry_on_redis(&redis, None).await;
    // The replay on the other replica: frame by frame, timed from its head.
    let resp = client()
        .request(via_header(&b, up.addr, "/stream").body(empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-tollgate-cache"], "shared-hit");
    let head = std::time::Instant::now();
    let mut body = resp.into_body();
    let mut replayed = Vec::new();
    while let Some(f) = body.frame().await {
        replayed.extend_from_slice(&f.unwrap().into_data().unwrap());
    }
    let took = head.elapsed();
    assert_eq!(replayed, first.body, "the same bytes and events");
    // Each event waited for its time: the last came two gaps after the head at the
    // earliest (a lower bound the replay's sleeps guarantee; no upper bound asserted).
    assert!(took >= 2 * GAP, "replayed in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purge_on_one_replica_reaches_the_others() {
    let redis = RedisServer::start();
    let (up, calls) = counted(&[]).await;
    let yaml = config(&redis, "{ttl: 60s, store: shared}");
    let (a, b) = (gateway(&yaml).await, gateway(&yaml).await);
    assert_eq!(cache_header(&get_via(&a, up.addr, "/r", &[]).await), "miss");
    entry_on_redis(&redis, None).await;
    // b reads it from Redis once, then serves it from its own memory.
    assert_eq!(
        cache_header(&get_via(&b, up.addr, "/r", &[]).await),
        "shared-hit"
    );
    let kept = get_via(&b, up.addr, "/r", &[]).await;
    assert_eq!(
        (cache_header(&kept), &kept.body[..]),
        ("hit".into(), &b"{\"call\":1}"[..])
    );
    let done = admin_post(&a, "/cache/purge?policy=gh").await.json();
    assert_eq!(done["purged"][0]["purged"]["replicas"], "all", "{done}");
    // a fetches anew: the entry from before the purge is unreachable, on Redis too.
    let after = get_via(&a, up.addr, "/r", &[]).await;
    assert_eq!(cache_header(&after), "miss");
    assert_eq!(&after.body[..], b"{\"call\":2}");
    // b follows within a second of its next request: it drops its copy and reads the
    // new entry (or fetches, were it not there yet); never the purged answer again.
    eventually("b follows the purge", || async {
        let got = get_via(&b, up.addr, "/r", &[]).await;
        match &got.body[..] {
            b"{\"call\":1}" => Err(cache_header(&got)),
            _ => Ok(()),
        }
    })
    .await;
    assert!(calls.load(Ordering::SeqCst) <= 3);
    // The purge's mark: the one key without an expiry (it must outlive every entry).
    assert_eq!(
        redis.cli(&["PTTL", "tollgate:{cache:gh}:purged:0"]).trim(),
        "-1"
    );
}
