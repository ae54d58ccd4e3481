//! The response cache: hit and miss, `Age`, single-flight, streaming while storing,
//! `Cache-Control`, POST bodies in the key, revalidation with 304, and its place in the
//! chain (a hit does not count against the rate limit; credentials never in the key).

use crate::support::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn cached(extra: &str) -> String {
    format!(
        "policies:\n  - name: c\n    match: {{host: 127.0.0.1}}\n    cache: {{ttl: 1h{extra}}}\n"
    )
}

#[tokio::test]
async fn miss_then_hit_with_age() {
    let (up, hits) =
        counting_upstream(
            |_, i| async move { answer(200, &[("x-call", &i.to_string())], "payload") },
        )
        .await;
    let gw = gateway(&cached("")).await;
    let miss = get_via(&gw, up.addr, "/r?b=2&a=1", &[]).await;
    assert_eq!(miss.header("x-tollgate-cache"), Some("miss"));
    let mut hit = get_via(&gw, up.addr, "/r?a=1&b=2", &[]).await;
    for _ in 0..100 {
        if hit.header("x-tollgate-cache") == Some("hit") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        hit = get_via(&gw, up.addr, "/r?a=1&b=2", &[]).await;
    }
    assert_eq!(
        hit.header("x-tollgate-cache"),
        Some("hit"),
        "query order does not change the key"
    );
    assert_eq!(&hit.body[..], b"payload");
    assert_eq!(hit.header("x-call"), Some("0"));
    assert!(hit.header("age").is_some());
    assert!(hit.header("x-tollgate-generated").is_none());
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // Another path, a POST without key_body, and a client asking for no-cache bypass or miss.
    let bypass = get_via(&gw, up.addr, "/r?a=1&b=2", &[("cache-control", "no-cache")]).await;
    assert_eq!(bypass.header("x-tollgate-cache"), Some("bypass"));
    let state = admin_get(&gw, "/policies").await.json();
    let c = &state["policies"][0]["state"]["cache"];
    assert_eq!(
        (c["entries"].as_u64(), c["hits"].as_u64()),
        (Some(1), Some(1))
    );
}

/// From the fourth request of a key on one worker, hits come from the worker's copy of
/// the entry, whose head holds the fields a hit adds ready for their values. They answer
/// with the same head as a hit from the store, each with its own request id, and the HAR
/// records what the provider's answer had, not a field made ready ahead.
#[tokio::test]
async fn hits_from_a_workers_copy_answer_the_head_a_stored_hit_does() {
    let dir = tempfile::tempdir().unwrap();
    let (up, hits) = counting_upstream(|_, _| async move {
        answer(
            200,
            &[("x-first", "1"), ("etag", "\"v\""), ("x-last", "2")],
            "payload",
        )
    })
    .await;
    let yaml = format!(
        "{}diagnosis:\n  har:\n    enabled: true\n    file: {{dir: {}}}\n",
        cached(""),
        dir.path().display()
    );
    let gw = gateway_with_workers(&yaml, 1).await;
    let mut got = vec![get_via(&gw, up.addr, "/r", &[]).await];
    for _ in 0..100 {
        if got.last().unwrap().header("x-tollgate-cache") == Some("hit") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        got.push(get_via(&gw, up.addr, "/r", &[]).await);
    }
    for _ in 0..4 {
        got.push(get_via(&gw, up.addr, "/r", &[]).await);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let names = |r: &Got| -> Vec<String> {
        r.headers
            .keys()
            .map(|n| n.as_str().to_owned())
            .filter(|n| !["date", "content-length"].contains(&n.as_str()))
            .collect()
    };
    let hits_seen = &got[got.len() - 5..];
    let mut ids = std::collections::HashSet::new();
    for h in hits_seen {
        assert_eq!(h.header("x-tollgate-cache"), Some("hit"));
        assert_eq!(&h.body[..], b"payload");
        assert!(h.header("age").unwrap().parse::<u64>().is_ok());
        let id = h.header("x-tollgate-request-id").unwrap();
        assert!(!id.is_empty() && ids.insert(id.to_owned()), "{id:?}");
        assert_eq!(
            names(h),
            names(&hits_seen[0]),
            "the same fields in the same order"
        );
    }
    assert_eq!(
        names(&hits_seen[0]),
        [
            "x-first",
            "etag",
            "x-last",
            "age",
            "x-tollgate-cache",
            "x-tollgate-request-id"
        ]
    );
    let entries = har_entries_in(dir.path(), got.len()).await;
    for e in &entries {
        let recorded: Vec<&str> = e["response"]["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap())
            .collect();
        assert!(!recorded.contains(&"x-tollgate-request-id"), "{recorded:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_make_one_provider_call() {
    let (up, hits) = counting_upstream(|_, _| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        answer(200, &[], "slow but shared")
    })
    .await;
    let gw = Arc::new(gateway(&cached("")).await);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let gw = gw.clone();
            let addr = up.addr;
            tokio::spawn(async move { get_via(&gw, addr, "/same", &[]).await })
        })
        .collect();
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(&got.body[..], b"slow but shared");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn provider_cache_control_is_honoured() {
    let (up, hits) = counting_upstream(|req, _| async move {
        let cc = match req.uri().path() {
            "/no-store" => "no-store",
            "/private" => "private, max-age=60",
            _ => "max-age=60",
        };
        answer(200, &[("cache-control", cc)], "x")
    })
    .await;
    let private_cache = gateway(&cached("")).await;
    let shared_cache = gateway(&cached(", shared: true")).await;
    for (gw, path, stored) in [
        (&private_cache, "/no-store", false),
        (&private_cache, "/private", true),
        (&shared_cache, "/private", false),
        (&shared_cache, "/public", true),
    ] {
        let before = hits.load(Ordering::SeqCst);
        get_via(gw, up.addr, path, &[]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = get_via(gw, up.addr, path, &[]).await;
        let calls = hits.load(Ordering::SeqCst) - before;
        assert_eq!(
            calls == 1,
            stored,
            "{path}: {calls} calls, {:?}",
            second.header("x-tollgate-cache")
        );
    }
}

#[tokio::test]
async fn post_bodies_in_the_key_are_canonical_json() {
    let (up, hits) = counting_upstream(|req, _| echo_json(req)).await;
    let gw = gateway(
        "policies:\n  - name: llm\n    match: {host: 127.0.0.1, path: /v1/completions}\n    cache: {ttl: 1h, methods: [POST], key_body: true, sampled: true}\n",
    )
    .await;
    let post = |body: &'static str| {
        let req = via_header(&gw, up.addr, "/v1/completions")
            .method("POST")
            .header("content-type", "application/json")
            .body(bytes_body(body))
            .unwrap();
        async move { send(&client(), req).await }
    };
    let first = post(r#"{"model": "m", "prompt": "hi"}"#).await;
    assert_eq!(first.header("x-tollgate-cache"), Some("miss"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let same = post(r#"{"prompt":"hi","model":"m"}"#).await;
    assert_eq!(same.header("x-tollgate-cache"), Some("hit"));
    assert_eq!(same.json()["body"], r#"{"model": "m", "prompt": "hi"}"#);
    let other = post(r#"{"prompt":"bye","model":"m"}"#).await;
    assert_eq!(other.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn stale_entries_are_revalidated_and_304_is_served_from_the_cache() {
    let (up, hits) = counting_upstream(|req, _| async move {
        if req
            .headers()
            .get("if-none-match")
            .is_some_and(|v| v == "\"v1\"")
        {
            return answer(304, &[("etag", "\"v1\""), ("x-fresh", "yes")], "");
        }
        answer(
            200,
            &[("etag", "\"v1\""), ("content-type", "text/plain")],
            "the body",
        )
    })
    .await;
    let gw =
        gateway("policies:\n  - name: c\n    match: {host: 127.0.0.1}\n    cache: {ttl: 1s}\n")
            .await;
    assert_eq!(
        get_via(&gw, up.addr, "/doc", &[])
            .await
            .header("x-tollgate-cache"),
        Some("miss")
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let revalidated = get_via(&gw, up.addr, "/doc", &[]).await;
    assert_eq!(revalidated.status, 200);
    assert_eq!(&revalidated.body[..], b"the body");
    assert_eq!(revalidated.header("x-tollgate-cache"), Some("hit"));
    assert_eq!(revalidated.header("x-fresh"), Some("yes"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let m = metrics_when(&gw, |t| t.contains("action=\"revalidated\"")).await;
    assert!(
        m.contains("remedy=\"cache\",action=\"revalidated\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn hits_spend_no_rate_limit_and_credentials_stay_out_of_the_key() {
    unsafe { std::env::set_var("TG_CACHE_TOKEN", "tok-secret") };
    let (up, hits) = counting_upstream(|req, _| echo_json(req)).await;
    let gw = gateway(
        "policies:\n  - name: c\n    match: {host: 127.0.0.1}\n    cache: {ttl: 1h}\n    rate_limit: {limit: 1, window: day}\n    credentials: {bearer: '${TG_CACHE_TOKEN}'}\n",
    )
    .await;
    let first = get_via(&gw, up.addr, "/x", &[]).await;
    assert_eq!(first.status, 200);
    assert!(
        first.json()["headers"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["authorization", "Bearer tok-secret"]))
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..3 {
        let hit = get_via(&gw, up.addr, "/x", &[]).await;
        assert_eq!(
            (hit.status.as_u16(), hit.header("x-tollgate-cache")),
            (200, Some("hit"))
        );
    }
    assert_eq!(
        get_via(&gw, up.addr, "/y", &[])
            .await
            .error_code()
            .as_deref(),
        Some("rate_limited")
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn large_responses_stream_through_uncached() {
    let big = "z".repeat(64 * 1024);
    let b = big.clone();
    let (up, hits) = counting_upstream(move |_, _| {
        let b = b.clone();
        async move { answer(200, &[], &b) }
    })
    .await;
    let gw = gateway(&cached(", max_entry: 1KiB")).await;
    for _ in 0..2 {
        let got = get_via(&gw, up.addr, "/big", &[]).await;
        assert_eq!(got.body.len(), big.len());
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn vary_keeps_variants_apart() {
    let (up, hits) = counting_upstream(|req, _| async move {
        let enc = req
            .headers()
            .get("accept-encoding")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_else(|| "identity".into());
        answer(
            200,
            &[("vary", "Accept-Encoding")],
            &format!("body for {enc}"),
        )
    })
    .await;
    let gw = gateway(&cached("")).await;
    let gzip = get_via(&gw, up.addr, "/v", &[("accept-encoding", "gzip")]).await;
    assert_eq!(&gzip.body[..], b"body for gzip");
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Another encoding is never served the stored gzip variant.
    let plain = get_via(&gw, up.addr, "/v", &[]).await;
    assert_eq!(&plain.body[..], b"body for identity");
    assert_eq!(plain.header("x-tollgate-cache"), Some("miss"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let again = get_via(&gw, up.addr, "/v", &[]).await;
    assert_eq!(
        (&again.body[..], again.header("x-tollgate-cache")),
        (&b"body for identity"[..], Some("hit"))
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn each_callers_authorization_has_its_own_entries() {
    let (up, hits) = counting_upstream(|req, _| async move {
        let who = req
            .headers()
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        answer(
            200,
            &[("cache-control", "private, max-age=60")],
            &format!("repos of {who}"),
        )
    })
    .await;
    let gw =
        gateway("policies:\n  - name: gh\n    match: {host: 127.0.0.1}\n    cache: {ttl: 60s}\n")
            .await;
    let get = |auth: &'static str| {
        let gw = &gw;
        let addr = up.addr;
        async move { get_via(gw, addr, "/user/repos", &[("authorization", auth)]).await }
    };
    assert_eq!(
        get("Bearer alice").await.body,
        "repos of Bearer alice".as_bytes()
    );
    // Before: Bob was served Alice's repositories from the cache.
    assert_eq!(
        get("Bearer bob").await.body,
        "repos of Bearer bob".as_bytes()
    );
    let again = get("Bearer alice").await;
    assert_eq!(again.body, "repos of Bearer alice".as_bytes());
    assert_eq!(again.header("x-tollgate-cache"), Some("hit"));
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A key marked hit-for-pass keeps no copy of its requests' headers. When its answers
/// become storable but vary on a request header, the first is relayed unstored and the
/// marks give way; the next request stores its answer under its own variant.
#[tokio::test]
async fn a_passed_key_that_starts_to_vary_is_stored_by_the_next_request() {
    let storable = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = storable.clone();
    let (up, hits) = counting_upstream(move |req, i| {
        let store = s.load(Ordering::SeqCst);
        let enc = req
            .headers()
            .get("accept-encoding")
            .map_or("identity".to_owned(), |v| v.to_str().unwrap().to_owned());
        async move {
            match store {
                true => answer(
                    200,
                    &[
                        ("cache-control", "max-age=600"),
                        ("vary", "Accept-Encoding"),
                    ],
                    &format!("call {i} for {enc}"),
                ),
                false => answer(200, &[("cache-control", "no-store")], "not stored"),
            }
        }
    })
    .await;
    let gw = gateway(&cached("")).await;
    let gzip = [("accept-encoding", "gzip")];
    // Not storable: the first miss marks the key hit-for-pass, the next ones pass.
    for _ in 0..3 {
        let got = get_via(&gw, up.addr, "/p", &gzip).await;
        assert_eq!(got.header("x-tollgate-cache"), Some("miss"));
    }
    storable.store(true, Ordering::SeqCst);
    let first = get_via(&gw, up.addr, "/p", &gzip).await;
    assert_eq!(
        (&first.body[..], first.header("x-tollgate-cache")),
        (&b"call 3 for gzip"[..], Some("miss"))
    );
    // Relayed unstored while this worker's mark held (the mark is checked against the
    // shared cache once a second: past that, it was stored as any miss is).
    let next = get_via(&gw, up.addr, "/p", &gzip).await;
    let (variant, calls): (&[u8], _) = match next.header("x-tollgate-cache") {
        Some("hit") => (b"call 3 for gzip", 5),
        _ => {
            assert_eq!(
                (&next.body[..], next.header("x-tollgate-cache")),
                (&b"call 4 for gzip"[..], Some("miss"))
            );
            (b"call 4 for gzip", 6)
        }
    };
    let hit = eventually("the stored variant served", || async {
        let got = get_via(&gw, up.addr, "/p", &gzip).await;
        match got.header("x-tollgate-cache") {
            Some("hit") => Ok(got),
            _ => Err(String::from_utf8_lossy(&got.body).into_owned()),
        }
    })
    .await;
    assert_eq!(&hit.body[..], variant);
    // Another encoding is not that variant.
    let plain = get_via(&gw, up.addr, "/p", &[]).await;
    assert_eq!(plain.header("x-tollgate-cache"), Some("miss"));
    assert!(plain.body.ends_with(b"for identity"), "{:?}", plain.body);
    // Three passes, the stored answer (and the one relayed before it), the other variant.
    assert_eq!(hits.load(Ordering::SeqCst), calls);
}

#[tokio::test]
async fn a_purge_drops_every_entry_and_the_next_request_fetches_again() {
    let (up, hits) =
        counting_upstream(
            |_, i| async move { answer(200, &[("x-call", &i.to_string())], "payload") },
        )
        .await;
    let gw = gateway(&cached("")).await;
    for _ in 0..2 {
        get_via(&gw, up.addr, "/r", &[]).await;
    }
    let hit = eventually("the entry stored", || async {
        let g = get_via(&gw, up.addr, "/r", &[]).await;
        match g.header("x-tollgate-cache") {
            Some("hit") => Ok(g),
            _ => Err(g.status),
        }
    })
    .await;
    assert_eq!(hit.header("x-call"), Some("0"));
    let done = admin_post(&gw, "/cache/purge?policy=c").await;
    assert_eq!(done.status, http::StatusCode::OK);
    let done = done.json();
    assert_eq!(done["purged"][0]["policy"], "c", "{done}");
    assert_eq!(done["purged"][0]["purged"]["entries"], 1, "{done}");
    assert_eq!(done["purged"][0]["purged"]["store"], "local", "{done}");
    let after = get_via(&gw, up.addr, "/r", &[]).await;
    assert_eq!(after.header("x-tollgate-cache"), Some("miss"));
    assert_eq!(after.header("x-call"), Some("1"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // A policy without a cache, or none of that name: 404, saying what to do.
    let none = admin_post(&gw, "/cache/purge?policy=nope").await;
    assert_eq!(none.status, http::StatusCode::NOT_FOUND);
    assert_eq!(none.json()["error"]["code"], "no_such_cache");
    // Without a policy: every cache.
    let all = admin_post(&gw, "/cache/purge").await.json();
    assert_eq!(all["purged"].as_array().map(Vec::len), Some(1), "{all}");
}
