//! The data plane on several workers: connections spread over them, each request served
//! start to end by one, and what must hold across all of them — reload, graceful
//! shutdown, metrics, request ids — holds. Connections here are fresh TCP connections
//! (one request each), so the kernel's `SO_REUSEPORT` hash spreads them.

use crate::support::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Gateway, StartOptions};

const WORKERS: usize = 4;
/// Enough fresh connections that every worker gets some (the chance that 4 workers see
/// all 64 land on one is 4 × 4⁻⁶⁴).
const CONNECTIONS: usize = 64;

/// One request on a connection of its own; the whole answer.
async fn fresh(addr: std::net::SocketAddr, path: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nHost: client\r\nConnection: close\r\n\r\n");
    raw_exchange(addr, req.as_bytes()).await
}

/// A gateway of [`WORKERS`] workers on a config file (reload tests).
async fn from_file(path: &std::path::Path) -> Gateway {
    start_on_local_ports(StartOptions {
        config_files: Some(tollgate::config::ConfigFiles::one(path)),
        workers: Some(WORKERS),
        ..Default::default()
    })
    .await
}

fn accepted_per_worker(metrics: &str) -> Vec<u64> {
    (0..WORKERS)
        .map(|w| {
            let prefix = format!("tollgate_worker_connections_accepted_total{{worker=\"{w}\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0, |v| v.trim().parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_over_workers_and_ids_stay_unique() {
    let up = echo_upstream().await;
    let gw = gateway_with_workers(
        &format!("routes:\n  - prefix: /\n    upstream: http://{}\n", up.addr),
        WORKERS,
    )
    .await;
    let mut tasks = Vec::new();
    for i in 0..CONNECTIONS {
        let addr = gw.proxy_addr;
        tasks.push(tokio::spawn(
            async move { fresh(addr, &format!("/n{i}")).await },
        ));
    }
    let mut ids = HashSet::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let answer = t.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(&format!("\"path\":\"/n{i}\"")), "{answer}");
        let id = answer
            .lines()
            .find_map(|l| l.strip_prefix("x-tollgate-request-id: "))
            .expect("request id")
            .to_owned();
        assert!(ids.insert(id.clone()), "request id {id} given twice");
    }
    let all_counted = format!(
        "tollgate_requests_total{{host=\"127.0.0.1\",method=\"GET\",status_class=\"2xx\"}} {CONNECTIONS}\n"
    );
    let text = metrics_when(&gw, |t| t.contains(&all_counted)).await;
    let per = accepted_per_worker(&text);
    assert_eq!(per.iter().sum::<u64>(), CONNECTIONS as u64, "{text}");
    assert!(
        per.iter().filter(|&&n| n > 0).count() >= 2,
        "connections spread over workers: {per:?}"
    );
    assert!(
        text.contains(&all_counted),
        "every worker's events reach the metrics: {text}"
    );
}

/// Each worker counts its own requests' metrics and its part of the dashboard's last
/// minute; `/metrics` and the dashboard sum them. None of it goes through the observer
/// thread's queue: with a queue of one event per worker, every request still counts and
/// no event is dropped (a plain request sends none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_worker_counts_its_requests_and_none_waits_on_the_observer() {
    let up = echo_upstream().await;
    let gw = gateway_with_workers(
        &format!(
            "routes:\n  - prefix: /\n    upstream: http://{}\nlog:\n  queue_capacity: 1\n",
            up.addr
        ),
        WORKERS,
    )
    .await;
    let addr = gw.proxy_addr;
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|i| tokio::spawn(async move { fresh(addr, &format!("/c{i}")).await }))
        .collect();
    for t in tasks {
        let answer = t.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let n = CONNECTIONS;
    let all = [
        format!(
            "tollgate_requests_total{{host=\"127.0.0.1\",method=\"GET\",status_class=\"2xx\"}} {n}\n"
        ),
        format!("tollgate_request_duration_seconds_count{{host=\"127.0.0.1\"}} {n}\n"),
        format!("tollgate_upstream_duration_seconds_count{{host=\"127.0.0.1\"}} {n}\n"),
    ];
    let text = metrics_when(&gw, |t| all.iter().all(|l| t.contains(l.as_str()))).await;
    assert!(text.contains("tollgate_events_dropped_total 0\n"), "{text}");
    let per = accepted_per_worker(&text);
    assert!(
        per.iter().filter(|&&n| n > 0).count() >= 2,
        "several workers counted: {per:?}"
    );
    // The last minute leaves out the second still filling: it shows them once it is over.
    let minute = eventually("every request in the dashboard's last minute", || async {
        let v = admin_get(&gw, "/ui/api/summary").await.json();
        match v["minute"]["requests"] == n as u64 {
            true => Ok(v),
            false => Err(v),
        }
    })
    .await;
    assert_eq!(minute["minute"]["errors"], 0, "{minute}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reaches_every_worker() {
    let a = echo_upstream().await;
    let b = upstream(|_req| async { answer(200, &[], "from b") }).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    let route =
        |up: std::net::SocketAddr| format!("routes:\n  - prefix: /\n    upstream: http://{up}\n");
    std::fs::write(file.path(), route(a.addr)).unwrap();
    let gw = from_file(file.path()).await;
    assert!(fresh(gw.proxy_addr, "/x").await.contains("\"path\":\"/x\""));
    std::fs::write(file.path(), route(b.addr)).unwrap();
    assert_eq!(post_reload(&gw).await.status, 200);
    for i in 0..CONNECTIONS {
        let answer = fresh(gw.proxy_addr, &format!("/y{i}")).await;
        assert!(answer.ends_with("from b"), "connection {i}: {answer}");
    }
    let per = accepted_per_worker(&String::from_utf8_lossy(
        &admin_get(&gw, "/metrics").await.body,
    ));
    assert!(
        per.iter().filter(|&&n| n > 0).count() >= 2,
        "the new config was seen on several workers: {per:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests_on_every_worker() {
    let (slow, arrived) = counting_upstream(|_req, _| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        answer(200, &[], "slow but whole")
    })
    .await;
    let gw = gateway_with_workers(
        &format!(
            "routes:\n  - prefix: /\n    upstream: http://{}\n",
            slow.addr
        ),
        WORKERS,
    )
    .await;
    let mut in_flight = Vec::new();
    for _ in 0..16 {
        let addr = gw.proxy_addr;
        in_flight.push(tokio::spawn(async move { fresh(addr, "/slow").await }));
    }
    // Every request is in flight (it reached the provider) before shutdown starts.
    for _ in 0..400 {
        if arrived.load(std::sync::atomic::Ordering::SeqCst) == 16 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(arrived.load(std::sync::atomic::Ordering::SeqCst), 16);
    let text = String::from_utf8_lossy(&admin_get(&gw, "/metrics").await.body).into_owned();
    assert!(
        accepted_per_worker(&text)
            .iter()
            .filter(|&&n| n > 0)
            .count()
            >= 2,
        "in flight on several workers: {text}"
    );
    gw.shutdown();
    let addr = gw.proxy_addr;
    tokio::time::timeout(Duration::from_secs(10), gw.wait())
        .await
        .expect("shutdown finishes once the requests are done");
    for t in in_flight {
        let answer = t.await.unwrap();
        assert!(answer.ends_with("slow but whole"), "{answer}");
    }
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "every worker's listener is closed"
    );
}

#[test]
fn the_workers_stop_with_the_runtime_that_started_the_gateway() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = rt.block_on(async { gateway_with_workers("", WORKERS).await.proxy_addr });
    assert!(std::net::TcpStream::connect(addr).is_ok(), "serving");
    drop(rt);
    // The workers see the stop and close their listeners; poll for it (a deadline, not a
    // speed assertion).
    let closed = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        std::net::TcpStream::connect(addr).is_err()
    });
    assert!(closed, "the workers' listeners outlived the runtime");
}

/// One request with `headers` on a connection of its own: `x-tollgate-cache` and the body.
async fn fresh_cached(addr: std::net::SocketAddr, headers: &str) -> (String, String) {
    let req = format!("GET /c HTTP/1.1\r\nHost: client\r\n{headers}Connection: close\r\n\r\n");
    let answer = raw_exchange(addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let status = answer
        .lines()
        .find_map(|l| l.strip_prefix("x-tollgate-cache: "))
        .unwrap_or("none")
        .to_owned();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

fn cache_config(up: std::net::SocketAddr) -> String {
    format!(
        "routes:\n  - prefix: /\n    upstream: http://{up}\npolicies:\n  - name: c\n    match: {{host: 127.0.0.1}}\n    cache: {{ttl: 1h}}\n"
    )
}

/// Each worker serves hits from a copy of its own; a copy never outlives what the cache
/// holds: once another variant replaced the entry, no worker serves the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_serves_hits_and_none_serves_a_replaced_entry() {
    let (up, calls) = counting_upstream(|req, i| async move {
        let enc = req
            .headers()
            .get("accept-encoding")
            .map_or("identity".to_owned(), |v| v.to_str().unwrap().to_owned());
        answer(
            200,
            &[("vary", "Accept-Encoding")],
            &format!("call {i} for {enc}"),
        )
    })
    .await;
    let gw = gateway_with_workers(&cache_config(up.addr), WORKERS).await;
    let gzip = "Accept-Encoding: gzip\r\n";
    // Until the first response is stored (in the background), requests may miss.
    let mut first = fresh_cached(gw.proxy_addr, gzip).await;
    for _ in 0..200 {
        if first.0 == "hit" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        first = fresh_cached(gw.proxy_addr, gzip).await;
    }
    assert_eq!(first.0, "hit");
    let mut hits = 1;
    // Every worker's connections are served the entry: from copies of their own.
    for _ in 0..CONNECTIONS {
        assert_eq!(fresh_cached(gw.proxy_addr, gzip).await, first);
        hits += 1;
    }
    let text = admin_get(&gw, "/metrics").await;
    let per = accepted_per_worker(&String::from_utf8_lossy(&text.body));
    assert!(
        per.iter().filter(|&&n| n > 1).count() >= 2,
        "hits on several workers: {per:?}"
    );
    // Another variant replaces the entry under the same key.
    let calls_now = || calls.load(std::sync::atomic::Ordering::SeqCst);
    let n = calls_now();
    let mut plain = fresh_cached(gw.proxy_addr, "").await;
    assert_eq!(plain, ("miss".to_owned(), format!("call {n} for identity")));
    for _ in 0..200 {
        if plain.0 == "hit" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        plain = fresh_cached(gw.proxy_addr, "").await;
    }
    assert_eq!(plain.0, "hit");
    hits += 1;
    // No worker serves its copy of the replaced gzip entry: the first gzip request
    // misses, and the hits after it are of the new call.
    let n = calls_now();
    assert_eq!(
        fresh_cached(gw.proxy_addr, gzip).await,
        ("miss".to_owned(), format!("call {n} for gzip"))
    );
    let mut new_hits = 0;
    for _ in 0..CONNECTIONS {
        let (status, body) = fresh_cached(gw.proxy_addr, gzip).await;
        assert_ne!(
            body, first.1,
            "a worker served its copy of a replaced entry"
        );
        if status == "hit" {
            new_hits += 1;
        }
    }
    assert!(new_hits > CONNECTIONS / 2, "{new_hits} hits");
    hits += new_hits;
    // Each worker counted its hits in its own shard; the metric is their sum.
    let line = format!(
        "tollgate_remedy_actions_total{{policy=\"c\",remedy=\"cache\",action=\"hit\"}} {hits}\n"
    );
    let text = admin_get(&gw, "/metrics").await;
    let text = String::from_utf8_lossy(&text.body);
    assert!(text.contains(&line), "{line} in:\n{text}");
}

/// A key whose responses could not be stored is passed by every worker without looking
/// the cache up; when the provider's responses become storable, the first one is stored
/// and every worker serves it from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_key_is_cached_on_every_worker_once_its_responses_can_be() {
    let storable = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = storable.clone();
    let (up, calls) = counting_upstream(move |_, i| {
        let store = s.load(std::sync::atomic::Ordering::SeqCst);
        async move {
            let cc = if store { "max-age=600" } else { "no-store" };
            answer(200, &[("cache-control", cc)], &format!("call {i}"))
        }
    })
    .await;
    let gw = gateway_with_workers(&cache_config(up.addr), WORKERS).await;
    for n in 0..CONNECTIONS {
        let (status, body) = fresh_cached(gw.proxy_addr, "").await;
        assert_eq!((status.as_str(), body), ("miss", format!("call {n}")));
    }
    storable.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, stored) = fresh_cached(gw.proxy_addr, "").await;
    assert_eq!((status.as_str(), stored.as_str()), ("miss", "call 64"));
    let mut hit = fresh_cached(gw.proxy_addr, "").await;
    for _ in 0..200 {
        if hit.0 == "hit" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        hit = fresh_cached(gw.proxy_addr, "").await;
    }
    let before = calls.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..CONNECTIONS {
        let (status, body) = fresh_cached(gw.proxy_addr, "").await;
        assert_eq!(
            status, "hit",
            "every worker's mark gave way to the stored entry"
        );
        assert_eq!(body, hit.1);
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), before);
}

/// The blocks of 128 bytes (a cache line and the one the CPU fetches beside it) that hold
/// the reference counts of `ptrs`' allocations (an `Arc`'s counts are the 16 bytes
/// before its value).
fn count_blocks(ptrs: &[usize]) -> Vec<usize> {
    ptrs.iter().map(|p| (p - 16) / 128).collect()
}

/// What each worker's requests clone (its chain, its policy's name) are copies of its
/// own, and no two workers' copies share a cache line, at start and after a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_workers_copies_share_a_cache_line() {
    let up = echo_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.yaml");
    let yaml = format!(
        "routes:\n  - prefix: /\n    upstream: http://{}\npolicies:\n  - name: p\n    match: {{host: 127.0.0.1}}\n    cache: {{ttl: 1h}}\n",
        up.addr
    );
    std::fs::write(&path, &yaml).unwrap();
    let gw = from_file(&path).await;
    for round in 0..2 {
        let (mut names, mut chains) = (Vec::new(), Vec::new());
        for local in &gw.shared().locals {
            let rt = local.runtime.load();
            let chain = &rt.engine.chains[0];
            names.push(std::sync::Arc::as_ptr(&chain.policy) as *const u8 as usize);
            chains.push(std::sync::Arc::as_ptr(chain) as usize);
        }
        // A worker's name and chain may share a line (one core writes both); no line
        // holds two workers' copies.
        let mut owner = std::collections::HashMap::new();
        let blocks = count_blocks(&names)
            .into_iter()
            .chain(count_blocks(&chains));
        for (i, block) in blocks.enumerate() {
            let worker = i % WORKERS;
            let first = *owner.entry(block).or_insert(worker);
            assert_eq!(
                first, worker,
                "round {round}: workers {first} and {worker} share block {block:x}: {names:x?} {chains:x?}"
            );
        }
        assert!(owner.len() >= WORKERS, "round {round}: {owner:?}");
        std::fs::write(&path, yaml.replace("name: p", "name: q")).unwrap();
        assert_eq!(post_reload(&gw).await.status, 200);
    }
}

/// The requests of `part` in the remedy statistics (`None`: the observer thread's).
fn counted(gw: &Gateway, part: Option<usize>) -> u64 {
    let stats = &gw.shared().diagnostics.remedy_stats;
    let json = match part {
        Some(w) => stats.worker(w).to_json(),
        None => stats.observer().to_json(),
    };
    json["policies"][0]["requests"].as_u64().unwrap_or(0)
}

/// Without discovery each worker counts its matched requests' remedy statistics itself
/// (their records never go to the observer thread); with discovery, which names the
/// endpoint there, the observer counts them. Either way `/remedy-stats` is every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remedy_statistics_are_counted_where_the_record_is_and_summed() {
    let up = echo_upstream().await;
    for discovery in [false, true] {
        let yaml = format!(
            "routes:\n  - prefix: /\n    upstream: http://{}\npolicies:\n  - name: limited\n    match: {{path: \"/items/{{id}}\"}}\n    rate_limit: {{limit: 1000000, window: hour}}\ndiagnosis:\n  discovery: {{enabled: {discovery}}}\n",
            up.addr
        );
        let gw = gateway_with_workers(&yaml, WORKERS).await;
        for i in 0..CONNECTIONS {
            let answer = fresh(gw.proxy_addr, &format!("/items/{i}")).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        let want = CONNECTIONS as u64;
        let s = eventually("every request in /remedy-stats", || async {
            let s = admin_get(&gw, "/remedy-stats").await.json();
            match s["policies"][0]["requests"] == want {
                true => Ok(s),
                false => Err(s),
            }
        })
        .await;
        let endpoint = &s["endpoints"][0];
        // The policy's path template on the target's host (with its port where
        // discovery names the host, as it always has).
        let host = match discovery {
            true => up.addr.to_string(),
            false => up.addr.ip().to_string(),
        };
        assert_eq!(
            endpoint["endpoint"],
            format!("GET {host} /items/{{id}}"),
            "{s}"
        );
        assert_eq!(endpoint["requests"], want, "{s}");
        assert_eq!(s["statuses"][0]["status"], "200", "{s}");
        assert_eq!(s["statuses"][0]["actions"][0]["count"], want, "{s}");
        let per_worker: Vec<u64> = (0..WORKERS).map(|w| counted(&gw, Some(w))).collect();
        let observer = counted(&gw, None);
        if discovery {
            assert_eq!((per_worker.iter().sum::<u64>(), observer), (0, want));
        } else {
            assert_eq!(observer, 0, "{per_worker:?}");
            assert_eq!(per_worker.iter().sum::<u64>(), want);
            assert!(
                per_worker.iter().filter(|&&n| n > 0).count() >= 2,
                "several workers counted: {per_worker:?}"
            );
        }
    }
}

/// A failed matched request keeps its record for the observer thread: the dashboard's
/// last failures show its policy and actions, and its statistics count there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_matched_request_keeps_its_record_for_the_dashboard() {
    let up = echo_upstream().await;
    let yaml = format!(
        "routes:\n  - prefix: /\n    upstream: http://{}\npolicies:\n  - name: limited\n    match: {{path: \"/items/{{id}}\"}}\n    rate_limit: {{limit: 1, window: hour}}\n",
        up.addr
    );
    let gw = gateway_with_workers(&yaml, WORKERS).await;
    assert!(
        fresh(gw.proxy_addr, "/items/1")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        fresh(gw.proxy_addr, "/items/2")
            .await
            .starts_with("HTTP/1.1 429")
    );
    let failure = eventually("the 429 among the dashboard's failures", || async {
        let v = admin_get(&gw, "/ui/api/summary").await.json();
        match v["failures"].as_array().and_then(|f| f.first()).cloned() {
            Some(f) => Ok(f),
            None => Err(v),
        }
    })
    .await;
    assert_eq!(failure["status"], 429, "{failure}");
    assert_eq!(failure["policy"], "limited", "{failure}");
    assert_eq!(failure["actions"][0], "rate_limit:rejected", "{failure}");
    let s = admin_get(&gw, "/remedy-stats").await.json();
    assert_eq!(s["policies"][0]["requests"], 2, "{s}");
    let per_worker: u64 = (0..WORKERS).map(|w| counted(&gw, Some(w))).sum();
    assert_eq!((per_worker, counted(&gw, None)), (1, 1));
}
