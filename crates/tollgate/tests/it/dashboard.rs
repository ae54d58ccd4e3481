//! The dashboard (`/ui`) in a real browser: Debian's Chromium driven by playwright-core
//! (tests/dashboard/drive.js) against a gateway carrying known traffic. The views must
//! show what `/discover` and `/policies` say; a new call must reach the live view within
//! a second and open its HAR entry; login and logout must keep the token out of URLs;
//! hostile values in paths, headers, hosts and bodies must never run. Screenshots go to
//! target/dashboard-screenshots (with TOLLGATE_BLESS=1, to docs/dashboard/ too).

use crate::support::config::config;
use crate::support::*;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tollgate_provider::Provider;

const CHROMIUM: &str = "/usr/bin/chromium";
const TOKEN: &str = "dash-board-token-123";

/// Runs scenario `name` of drive.js with `settings`: what the pages showed.
async fn drive(name: &str, gw: &tollgate::Gateway, mut settings: Value) -> Value {
    assert!(
        Path::new(CHROMIUM).exists(),
        "these tests need Debian's chromium (apt-get install chromium; scripts/test does)"
    );
    let modules = npm_once("playwright-core", "playwright-core@1.56.1");
    let shots = shots_dir();
    settings["base"] = json!(format!("http://{}", gw.admin_addr));
    settings["proxy"] = json!(gw.proxy_addr.to_string());
    settings["chromium"] = json!(CHROMIUM);
    settings["shots"] = json!(shots);
    settings["token"] = json!(TOKEN);
    let mut cmd = std::process::Command::new("node");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard/drive.js"))
        .arg(name)
        .env("NODE_PATH", modules.join("node_modules"))
        .env("DASH", settings.to_string());
    let out = stdout_of(cmd).await;
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v.get("failure").is_none(), "{name}: {}", v["failure"]);
    v
}

fn shots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dashboard-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// With TOLLGATE_BLESS=1, the screenshots docs/dashboard.md shows are replaced.
fn bless(names: &[&str]) {
    if std::env::var_os("TOLLGATE_BLESS").is_none() {
        return;
    }
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard");
    std::fs::create_dir_all(&docs).unwrap();
    for n in names {
        std::fs::copy(shots_dir().join(format!("{n}.png")), docs.join(format!("{n}.png"))).unwrap();
    }
}

/// An upstream with a fast endpoint, a slower one and one that fails.
async fn api() -> Server {
    upstream(|req: Request<hyper::body::Incoming>| async move {
        let path = req.uri().path().to_owned();
        if path.starts_with("/v1/slow") {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        if path.starts_with("/v1/fail") {
            return answer(503, &[("content-type", "application/json")], r#"{"error":"down"}"#);
        }
        answer(200, &[("content-type", "application/json")], r#"{"ok":true}"#)
    })
    .await
}

fn dashboard_config(har_dir: &Path, token: bool) -> String {
    let mut c = config()
        .section("diagnosis", &format!(
            "{{discovery: {{enabled: true}}, har: {{enabled: true, file: {{dir: '{}'}}}}}}",
            har_dir.display()
        ))
        .section("rate_limits", "{users: {limit: 1000, window: minute}}")
        .section("breakers", "{down: {consecutive_failures: 3, open_for: 1h}}")
        .section("budgets", "{ai-daily: {limit: $5, per: day}}")
        .policy("users", "{host: 127.0.0.1, path: '/v1/users/{id}'}", &[
            ("cache", "{ttl: 1h}"),
            ("rate_limit", "users"),
        ])
        .policy("flaky", "{host: 127.0.0.1, path: /v1/fail}", &[("breaker", "down")])
        .policy("ai", "{host: 127.0.0.1, path: /v1/chat/completions}", &[
            ("llm", "{}"),
            ("budget", "ai-daily"),
        ]);
    if token {
        c = c.section("admin", &format!("{{token: {TOKEN}}}"));
    }
    c.yaml()
}

async fn get(gw: &tollgate::Gateway, up: &Server, path: &str) -> Got {
    get_via(gw, up.addr, path, &[]).await
}

async fn admin_json(gw: &tollgate::Gateway, path: &str) -> Value {
    let r = send(
        &client(),
        Request::get(format!("http://{}{path}", gw.admin_addr))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{path}");
    r.json()
}

async fn chat(gw: &tollgate::Gateway, llm: &Provider, model: &str) -> Got {
    let body = json!({"model": model, "max_tokens": 20,
        "messages": [{"role": "user", "content": "Hello there, gateway."}]});
    send(
        &client(),
        Request::post(format!("http://{}/v1/chat/completions", gw.proxy_addr))
            .header("content-type", "application/json")
            .header("x-tollgate-host", llm.addr.to_string())
            .header("x-tollgate-scheme", "http")
            .body(bytes_body(body.to_string()))
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_view_shows_what_the_admin_api_says() {
    let har = tempfile::tempdir().unwrap();
    let gw = gateway(&dashboard_config(har.path(), true)).await;
    let up = api().await;
    let llm = Provider::start(local0()).await.unwrap();
    for i in 0..6 {
        assert_eq!(get(&gw, &up, &format!("/v1/users/{}", i % 3)).await.status, StatusCode::OK);
    }
    for _ in 0..4 {
        get(&gw, &up, "/v1/slow/report").await;
    }
    for _ in 0..4 {
        get(&gw, &up, "/v1/fail").await;
    }
    assert_eq!(chat(&gw, &llm, "gpt-4o-mini").await.status, StatusCode::OK);
    // What the admin API says once every call is counted.
    let discover = eventually("every call counted", || async {
        let d = admin_json(&gw, "/discover").await;
        let n: u64 = d["endpoints"].as_array().unwrap().iter().map(|e| e["count"].as_u64().unwrap()).sum();
        if n == 15 { Ok(d) } else { Err(d) }
    })
    .await;
    let v = drive("views", &gw, json!({})).await;
    let policies = admin_json(&gw, "/policies").await;

    // Endpoints: every row of /discover, with its counts and percentiles as rendered.
    let rows = v["endpoints"].as_array().unwrap();
    let endpoints = discover["endpoints"].as_array().unwrap();
    assert_eq!(rows.len(), endpoints.len(), "{v:#}");
    for e in endpoints {
        let key = format!("{} {} {}", e["method"].as_str().unwrap(), e["host"].as_str().unwrap(), e["endpoint"].as_str().unwrap());
        let row = rows.iter().find(|r| r["key"] == key.as_str()).unwrap_or_else(|| panic!("no row {key}: {v:#}"));
        let cells = &row["cells"];
        assert_eq!(cells["count"], e["count"].to_string(), "{key}");
        for q in ["p50", "p95", "p99"] {
            let ms = e["latency_ms"][q].as_f64().unwrap();
            let shown: f64 = cells[q].as_str().unwrap().parse().unwrap_or_else(|_| panic!("{key} {q}: {cells}"));
            // Rendered to 2 decimals under 10 ms, 1 under 100, whole above.
            assert!((shown - ms).abs() <= ms * 0.05 + 0.005, "{key} {q}: shown {shown}, /discover {ms}");
        }
        for (status, n) in e["status"].as_object().unwrap() {
            assert!(cells["mix-cell"].as_str().unwrap().contains(&format!("{status}×{n}")), "{key}: {cells}");
        }
    }
    let users = rows.iter().find(|r| r["key"] == "GET 127.0.0.1 /v1/users/{id}").unwrap();
    assert_eq!(users["cells"]["count"], "6");
    assert!(v["sparklines"].as_u64().unwrap() >= endpoints.len() as u64, "a sparkline per endpoint: {v:#}");
    // Sorted by p99, largest first: the slow endpoint leads.
    assert_eq!(v["sortedByP99"][0], "GET 127.0.0.1 /v1/slow/report", "{v:#}");
    let spend = v["llmSpend"].as_str().unwrap_or_default();
    let cost = discover["endpoints"].as_array().unwrap().iter().find_map(|e| e["llm"]["cost_usd"].as_f64()).unwrap();
    assert!(spend.contains(&format!("${cost:.4}")), "{spend} vs {cost}");

    // The header: a rate and an error share over the last minute, the version.
    assert_eq!(v["header"]["version"], format!("v{}", env!("CARGO_PKG_VERSION")));
    assert_ne!(v["header"]["errors"], "0 %", "four 503s were answered: {v:#}");

    // Remedies: each policy's state as /policies reports it.
    let shown = v["remedies"].as_array().unwrap();
    for p in policies["policies"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let card = shown.iter().find(|c| c["policy"] == name).unwrap_or_else(|| panic!("no card for {name}: {v:#}"));
        for remedy in p["state"].as_object().unwrap().keys() {
            assert!(card["remedies"].get(remedy).is_some(), "{name}.{remedy}: {card}");
        }
    }
    let users_state = &policies["policies"][0]["state"];
    let cache = shown[0]["remedies"]["cache"].as_str().unwrap();
    assert!(cache.contains(&format!("entries{}", users_state["cache"]["entries"])), "{cache} vs {users_state}");
    assert!(cache.contains("hit ratio %: 50 of 100"), "{cache}");
    let limit = shown[0]["remedies"]["rate_limit"].as_str().unwrap();
    let used = &users_state["rate_limit"];
    assert!(limit.contains(&format!("used: {} of 1,000", used["used"])), "{limit} vs {used}");
    let breaker = shown[1]["remedies"]["breaker"].as_str().unwrap();
    let open = &policies["policies"][1]["state"]["breaker"]["state"]["state"];
    assert_eq!(open, "open", "{policies:#}");
    assert!(breaker.contains("stateopen"), "{breaker}");
    let budget = shown[2]["remedies"]["budget"].as_str().unwrap();
    let spent = policies["policies"][2]["state"]["budget"]["spent_usd"].as_str().unwrap();
    assert!(budget.contains(&format!("spent usd: {spent} of $5")), "{budget}");
    // Remedy statistics as bars: the cache's hits and misses, counted as /remedy-stats does.
    let stats = admin_json(&gw, "/remedy-stats").await;
    for scope in stats["policies"].as_array().unwrap() {
        for a in scope["actions"].as_array().unwrap() {
            let action = format!("{}:{}", a["remedy"].as_str().unwrap(), a["action"].as_str().unwrap());
            let bar = v["stats"].as_array().unwrap().iter()
                .find(|b| b["policy"] == scope["policy"] && b["action"] == action.as_str())
                .unwrap_or_else(|| panic!("no bar for {action}: {v:#}"));
            assert_eq!(bar["count"], a["count"].to_string());
        }
    }
    assert!(v["store"].as_str().unwrap().contains("memory"), "{v:#}");

    // Config: the effective config with the token masked, and the reload's outcome (this
    // gateway runs without a file, so the reload is refused and says why).
    let config = v["config"].as_str().unwrap();
    assert!(config.contains("\"users\"") && !config.contains(TOKEN), "{config}");
    assert!(v["reloadState"].as_str().unwrap().starts_with("refused"), "{v:#}");
    assert!(v["lastReload"].as_str().unwrap().contains("nothing to reload"), "{v:#}");

    // The last failures: the four 503s.
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 4, "{v:#}");
    // On a phone the page does not scroll sideways (only the tables do).
    assert!(v["phone"]["pageWidth"].as_u64() <= v["phone"]["viewport"].as_u64(), "{v:#}");
    assert_eq!(v["phone"]["rpsVisible"], true);
    bless(&["endpoints", "remedies", "config", "phone"]);
}
