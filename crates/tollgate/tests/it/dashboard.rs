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
    assert!(
        v.get("failure").is_none(),
        "{name}: {}\n{v:#}",
        v["failure"]
    );
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
        std::fs::copy(
            shots_dir().join(format!("{n}.png")),
            docs.join(format!("{n}.png")),
        )
        .unwrap();
    }
}

/// The key of a `/discover` endpoint's row in the endpoints view: `METHOD host endpoint`.
fn row_key(e: &Value) -> String {
    format!(
        "{} {} {}",
        e["method"].as_str().unwrap(),
        e["host"].as_str().unwrap(),
        e["endpoint"].as_str().unwrap()
    )
}

/// An upstream with a fast endpoint, a slower one and one that fails.
async fn api() -> Server {
    upstream(|req: Request<hyper::body::Incoming>| async move {
        let path = req.uri().path().to_owned();
        if path.starts_with("/v1/slow") {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        if path.starts_with("/v1/fail") {
            return answer(
                503,
                &[("content-type", "application/json")],
                r#"{"error":"down"}"#,
            );
        }
        answer(
            200,
            &[("content-type", "application/json")],
            r#"{"ok":true}"#,
        )
    })
    .await
}

fn dashboard_config(har_dir: &Path, token: bool) -> String {
    let mut c = config()
        .section(
            "diagnosis",
            &format!(
                "{{discovery: {{enabled: true}}, har: {{enabled: true, file: {{dir: '{}'}}}}}}",
                har_dir.display()
            ),
        )
        .section("rate_limits", "{users: {limit: 1000, window: minute}}")
        .section(
            "breakers",
            "{down: {consecutive_failures: 3, open_for: 1h}}",
        )
        .section("budgets", "{ai-daily: {limit: $5, per: day}}")
        .policy(
            "users",
            "{host: 127.0.0.1, path: '/v1/users/{id}'}",
            &[("cache", "{ttl: 1h}"), ("rate_limit", "users")],
        )
        .policy(
            "flaky",
            "{host: 127.0.0.1, path: /v1/fail}",
            &[("breaker", "down")],
        )
        .policy(
            "ai",
            "{host: 127.0.0.1, path: /v1/chat/completions}",
            &[
                (
                    "cache",
                    "{ttl: 1h, methods: [POST], key_body: true, sampled: true}",
                ),
                ("llm", "{}"),
                ("budget", "ai-daily"),
            ],
        );
    if token {
        c = c.section("admin", &format!("{{token: {TOKEN}}}"));
    }
    c.yaml()
}

/// A gateway on [`dashboard_config`], with its HAR folder (kept while the test runs).
async fn dashboard_gateway(token: bool) -> (tempfile::TempDir, tollgate::Gateway) {
    let har = tempfile::tempdir().unwrap();
    let gw = gateway(&dashboard_config(har.path(), token)).await;
    (har, gw)
}

async fn get(gw: &tollgate::Gateway, up: &Server, path: &str) -> Got {
    get_via(gw, up.addr, path, &[]).await
}

/// A request to the admin API with the bearer token.
async fn with_token(gw: &tollgate::Gateway, method: http::Method, path: &str) -> Got {
    send(
        &client(),
        Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", gw.admin_addr))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(empty())
            .unwrap(),
    )
    .await
}

async fn admin_json(gw: &tollgate::Gateway, path: &str) -> Value {
    let r = with_token(gw, http::Method::GET, path).await;
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
    let (_har, gw) = dashboard_gateway(true).await;
    let up = api().await;
    let llm = Provider::start(local0()).await.unwrap();
    for i in 0..6 {
        assert_eq!(
            get(&gw, &up, &format!("/v1/users/{}", i % 3)).await.status,
            StatusCode::OK
        );
    }
    for _ in 0..4 {
        get(&gw, &up, "/v1/slow/report").await;
    }
    for _ in 0..4 {
        get(&gw, &up, "/v1/fail").await;
    }
    assert_eq!(chat(&gw, &llm, "gpt-4o-mini").await.status, StatusCode::OK);
    // The same call again: answered by the cache, what it saved on the LLM card.
    let again = chat(&gw, &llm, "gpt-4o-mini").await;
    assert_eq!(again.header("x-tollgate-cache"), Some("hit"));
    // What the admin API says once every call is counted.
    let discover = eventually("every call counted", || async {
        let d = admin_json(&gw, "/discover").await;
        let n: u64 = d["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["count"].as_u64().unwrap())
            .sum();
        if n == 16 { Ok(d) } else { Err(d) }
    })
    .await;
    // The rate limit's minute window may roll over while the browser reads: its card
    // then shows the count /policies gave before the browser, or the one after.
    let before = admin_json(&gw, "/policies").await;
    let v = drive("views", &gw, json!({})).await;
    let policies = admin_json(&gw, "/policies").await;

    // Endpoints: every row of /discover, with its counts and percentiles as rendered.
    let rows = v["endpoints"].as_array().unwrap();
    let endpoints = discover["endpoints"].as_array().unwrap();
    assert_eq!(rows.len(), endpoints.len(), "{v:#}");
    for e in endpoints {
        let key = row_key(e);
        let row = rows
            .iter()
            .find(|r| r["key"] == key.as_str())
            .unwrap_or_else(|| panic!("no row {key}: {v:#}"));
        let cells = &row["cells"];
        assert_eq!(cells["count"], e["count"].to_string(), "{key}");
        for q in ["p50", "p95", "p99"] {
            let ms = e["latency_ms"][q].as_f64().unwrap();
            let shown: f64 = cells[q]
                .as_str()
                .unwrap()
                .parse()
                .unwrap_or_else(|_| panic!("{key} {q}: {cells}"));
            // Rendered to 2 decimals under 10 ms, 1 under 100, whole above.
            assert!(
                (shown - ms).abs() <= ms * 0.05 + 0.005,
                "{key} {q}: shown {shown}, /discover {ms}"
            );
        }
        for (status, n) in e["status"].as_object().unwrap() {
            assert!(
                cells["mix-cell"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("{status}×{n}")),
                "{key}: {cells}"
            );
        }
    }
    let users = rows
        .iter()
        .find(|r| r["key"] == format!("GET {} /v1/users/{{id}}", up.addr))
        .unwrap();
    assert_eq!(users["cells"]["count"], "6");
    assert!(
        v["sparklines"].as_u64().unwrap() >= endpoints.len() as u64,
        "a sparkline per endpoint: {v:#}"
    );
    // Sorted by p99, largest first: the endpoint whose p99 /discover says is the largest
    // leads (the 30 ms one, unless a loaded machine made another call slower).
    let p99_of = |key: &str| {
        endpoints
            .iter()
            .find(|e| row_key(e) == key)
            .and_then(|e| e["latency_ms"]["p99"].as_f64())
            .unwrap_or_else(|| panic!("no /discover endpoint {key}"))
    };
    let largest = endpoints
        .iter()
        .filter_map(|e| e["latency_ms"]["p99"].as_f64())
        .fold(0.0, f64::max);
    let first = v["sortedByP99"][0].as_str().unwrap_or_default();
    assert_eq!(p99_of(first), largest, "{v:#}");
    assert!(
        p99_of(&format!("GET {} /v1/slow/report", up.addr)) >= 30.0,
        "the slow endpoint's p99 is at least its delay"
    );
    let spend = v["llmSpend"].as_str().unwrap_or_default();
    let cost = discover["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["llm"]["cost_usd"].as_f64())
        .unwrap();
    assert!(spend.contains(&format!("${cost:.4}")), "{spend} vs {cost}");
    // The hit saved what the first call cost: one call, its tokens, its price.
    let saved = discover["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["llm"].get("saved"))
        .unwrap();
    assert_eq!(saved["calls"], 1, "{saved}");
    assert_eq!(v["llmSaved"]["calls"], "1 call", "{v:#}");
    assert_eq!(
        v["llmSaved"]["tokens"],
        format!("{} / {}", saved["input_tokens"], saved["output_tokens"]),
        "{v:#}"
    );
    assert!(saved["output_tokens"].as_u64() > Some(0), "{saved}");
    // Shown to two significant figures below a cent.
    let usd = saved["cost_usd"].as_f64().unwrap();
    let shown: f64 = v["llmSaved"]["usd"].as_str().unwrap()[1..].parse().unwrap();
    assert!(usd > 0.0 && (shown - usd).abs() <= usd * 0.05, "{v:#}");

    // The header: a rate and an error share over the last minute, the version.
    assert_eq!(
        v["header"]["version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    assert_ne!(
        v["header"]["errors"], "0 %",
        "four 503s were answered: {v:#}"
    );

    // Remedies: each policy's state as /policies reports it.
    let shown = v["remedies"].as_array().unwrap();
    for p in policies["policies"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let card = shown
            .iter()
            .find(|c| c["policy"] == name)
            .unwrap_or_else(|| panic!("no card for {name}: {v:#}"));
        for remedy in p["state"].as_object().unwrap().keys() {
            assert!(
                card["remedies"].get(remedy).is_some(),
                "{name}.{remedy}: {card}"
            );
        }
    }
    let users_state = &policies["policies"][0]["state"];
    // Entries as they were when the view was read (the browser then purged them).
    let users_before = &before["policies"][0]["state"];
    let cache = shown[0]["remedies"]["cache"].as_str().unwrap();
    assert!(
        cache.contains(&format!("entries{}", users_before["cache"]["entries"])),
        "{cache} vs {users_before}"
    );
    assert!(users_before["cache"]["entries"].as_u64() > Some(0));
    // The Purge button emptied the cache, as /policies says after.
    assert_eq!(users_state["cache"]["entries"], 0, "{users_state}");
    assert!(v["purged"].as_str().unwrap().contains("entries0"), "{v:#}");
    assert!(cache.contains("hit ratio %: 50 of 100"), "{cache}");
    let limit = shown[0]["remedies"]["rate_limit"].as_str().unwrap();
    let used = &users_state["rate_limit"];
    let used_before = &before["policies"][0]["state"]["rate_limit"];
    assert!(
        [used, used_before]
            .iter()
            .any(|u| limit.contains(&format!("used: {} of 1,000", u["used"]))),
        "{limit} vs {used_before} before and {used} after"
    );
    let breaker = shown[1]["remedies"]["breaker"].as_str().unwrap();
    let open = &policies["policies"][1]["state"]["breaker"]["state"]["state"];
    assert_eq!(open, "open", "{policies:#}");
    assert!(breaker.contains("stateopen"), "{breaker}");
    let budget = shown[2]["remedies"]["budget"].as_str().unwrap();
    let spent = policies["policies"][2]["state"]["budget"]["spent_usd"]
        .as_str()
        .unwrap();
    assert!(
        budget.contains(&format!("spent usd: {spent} of $5")),
        "{budget}"
    );
    // Remedy statistics as bars: the cache's hits and misses, counted as /remedy-stats does.
    let stats = admin_json(&gw, "/remedy-stats").await;
    for scope in stats["policies"].as_array().unwrap() {
        for a in scope["actions"].as_array().unwrap() {
            let action = format!(
                "{}:{}",
                a["remedy"].as_str().unwrap(),
                a["action"].as_str().unwrap()
            );
            let bar = v["stats"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["policy"] == scope["policy"] && b["action"] == action.as_str())
                .unwrap_or_else(|| panic!("no bar for {action}: {v:#}"));
            assert_eq!(bar["count"], a["count"].to_string());
        }
    }
    assert!(v["store"].as_str().unwrap().contains("memory"), "{v:#}");

    // Config: the effective config with the token masked, and the reload's outcome (this
    // gateway runs without a file, so the reload is refused and says why).
    let config = v["config"].as_str().unwrap();
    assert!(
        config.contains("\"users\"") && !config.contains(TOKEN),
        "{config}"
    );
    assert!(
        v["reloadState"].as_str().unwrap().starts_with("refused"),
        "{v:#}"
    );
    assert!(
        v["lastReload"]
            .as_str()
            .unwrap()
            .contains("nothing to reload"),
        "{v:#}"
    );

    // The last failures: the four 503s.
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 4, "{v:#}");
    // On a phone the page does not scroll sideways (only the tables do).
    assert!(
        v["phone"]["pageWidth"].as_u64() <= v["phone"]["viewport"].as_u64(),
        "{v:#}"
    );
    assert_eq!(v["phone"]["rpsVisible"], true);
    bless(&["endpoints", "remedies", "config", "phone"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_call_reaches_the_live_view_within_a_second_and_opens_its_har_entry() {
    let (_har, gw) = dashboard_gateway(true).await;
    let up = api().await;
    let v = drive(
        "live",
        &gw,
        json!({"upstream": up.addr.to_string(), "path": "/v1/users/42", "requestId": "live-call-1",
            "postBody": r#"{"name":"ada <b>"}"#,
            "more": ["/v1/slow/report", "/v1/fail", "/v1/users/7", "/v1/fail", "/v1/users/42"]}),
    )
    .await;
    assert_eq!(v["status"], 200);
    let after = v["appearedAfterMs"].as_u64().unwrap();
    assert!(after <= 1000, "the call showed {after} ms after its answer");
    let cells = &v["row"]["cells"];
    assert_eq!(cells["status"], "200", "{v:#}");
    assert_eq!(cells["host"], "127.0.0.1");
    assert_eq!(
        cells["path"], "/v1/users/{id}",
        "the endpoint as discovery counts it"
    );
    assert_eq!(cells["policy"], "users");
    assert_eq!(cells["actions"], "cache:missrate_limit:allowed", "{v:#}");
    assert_eq!(
        v["shownWhilePaused"], false,
        "a paused view holds new calls back"
    );
    assert_eq!(v["rowsWith5xxFilter"], 0);
    // The HAR entry is the one the file sink got: its URL, and its request id.
    assert_eq!(v["harUrl"], format!("GET http://{}/v1/users/42", up.addr));
    let entry: Value = serde_json::from_str(v["harJson"].as_str().unwrap()).unwrap();
    assert_eq!(entry["response"]["status"], 200);
    assert!(entry.to_string().contains("live-call-1"), "{entry:#}");
    // A request body is shown as its text (it was `[object HTMLHeadingElement],…`).
    assert_eq!(v["harRequestBody"], r#"{"name":"ada <b>"}"#, "{v:#}");
    assert_eq!(
        v["harBodyHeadings"],
        json!([
            "Request headers",
            "Request body",
            "Response headers",
            "Response body",
            "Entry"
        ])
    );
    bless(&["live"]);
}

/// axe-core on every view, the login page and an open HAR entry: no finding at all (the
/// serious ones were scrolling tables and `pre`s a keyboard could not reach); and the
/// live view's rows open with Enter as they do with a click.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_passes_axe_and_a_keyboard_opens_a_har_entry() {
    let (_har, gw) = dashboard_gateway(true).await;
    let up = api().await;
    let axe = npm_once("axe-core", "axe-core@4.11.0");
    let v = drive(
        "axe",
        &gw,
        json!({"upstream": up.addr.to_string(),
            "axe": axe.join("node_modules/axe-core/axe.min.js")}),
    )
    .await;
    let views = v["axe"].as_object().unwrap();
    assert_eq!(views.len(), 5, "{v:#}");
    for (view, found) in views {
        assert_eq!(found, &json!([]), "{view}: {found:#}");
    }
    assert!(
        v["keyboardHar"].as_str().unwrap().contains("/v1/users/3"),
        "{v:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_and_logout_keep_the_token_out_of_urls_and_history() {
    let (_har, gw) = dashboard_gateway(true).await;
    let v = drive("login", &gw, json!({})).await;
    let base = format!("http://{}", gw.admin_addr);
    assert_eq!(v["redirectedTo"], format!("{base}/ui/login"));
    let csp = v["csp"].as_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(
        v["failedMessage"]
            .as_str()
            .unwrap()
            .contains("not this gateway")
    );
    assert_eq!(v["urlAfterLogin"], format!("{base}/ui"));
    let cookies = v["cookies"].as_array().unwrap();
    assert_eq!(cookies.len(), 1, "{v:#}");
    let c = &cookies[0];
    assert_eq!(c["name"], "tollgate_session");
    assert_eq!(c["httpOnly"], true);
    assert_eq!(c["sameSite"], "Strict");
    let expires = c["expires"].as_f64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        expires > now && expires <= now + 12.0 * 3600.0 + 60.0,
        "expires with the session: {c}"
    );
    assert_ne!(c["value"], TOKEN);
    assert!(
        !v.to_string().contains(&format!("token={TOKEN}")),
        "no URL carried the token: {v:#}"
    );
    assert_eq!(v["summaryStatus"], 200);
    // The page's own POST (same origin) passes the cross-site check; the reload is
    // refused for having no file, which is not a 403.
    assert_eq!(v["reloadStatus"], 422);
    assert_eq!(v["afterLogout"], 401);
    assert!(
        v["cookiesAfterLogout"].as_array().unwrap().is_empty(),
        "{v:#}"
    );
    let metrics = eventually("both logins counted", || async {
        let m = with_token(&gw, http::Method::GET, "/metrics").await;
        let text = String::from_utf8_lossy(&m.body).into_owned();
        if text.contains("tollgate_ui_logins_total{result=\"ok\"} 1") {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert!(
        metrics.contains("tollgate_ui_logins_total{result=\"error\"} 1"),
        "{metrics}"
    );
    bless(&["login"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_are_shown_as_text_and_never_run() {
    let har = tempfile::tempdir().unwrap();
    // An LLM policy without a budget: an unknown (hostile) model name is relayed.
    let yaml = config()
        .section("admin", &format!("{{token: {TOKEN}}}"))
        .section(
            "diagnosis",
            &format!(
                "{{discovery: {{enabled: true}}, har: {{enabled: true, file: {{dir: '{}'}}}}}}",
                har.path().display()
            ),
        )
        .policy(
            "ai",
            "{host: 127.0.0.1, path: /v1/chat/completions}",
            &[("llm", "{}")],
        )
        .yaml();
    let gw = gateway(&yaml).await;
    let up = api().await;
    let llm = Provider::start(local0()).await.unwrap();
    // Some of these the proxy refuses before any record (a `<` in a request line is not
    // HTTP); what it carries reaches the views.
    let requests = json!([
        {"path": "/v1/\"onmouseover=\"__hit('quote')"},
        {"path": "/v1/<img/src=x/onerror=__hit('path')>"},
        {"path": "/v1/javascript:__hit('js')"},
        {"path": "/v1/users/%22onerror=%22__hit('encoded')"},
        {"path": "/v1/notes", "headers": {"x-note": "<script>__hit('header')</script>", "x-other": "\"><img src=x onerror=__hit('header2')>"}},
        {"target": "'onerror='__hit(1)'.invalid", "path": "/"},
        {"target": llm.addr.to_string(), "path": "/v1/chat/completions", "method": "POST",
         "headers": {"content-type": "application/json"},
         "body": json!({"model": "<img src=x onerror=__hit('model')>", "max_tokens": 3,
            "messages": [{"role": "user", "content": "<script>__hit('body')</script>"}]}).to_string()},
    ]);
    let v = drive(
        "hostile",
        &gw,
        json!({"upstream": up.addr.to_string(), "requests": requests}),
    )
    .await;
    assert_eq!(v["hits"], json!([]), "a payload ran: {v:#}");
    assert_eq!(v["injected"], 0, "no element came from a payload: {v:#}");
    // And they were shown, as text.
    let paths = v["livePaths"].to_string();
    assert!(paths.contains("javascript:__hit('js')"), "{v:#}");
    assert!(
        v["liveModels"]
            .to_string()
            .contains("<img src=x onerror=__hit('model')>"),
        "{v:#}"
    );
    let har_shown = v["harShown"].to_string();
    for shown in [
        "__hit('body')",
        "<script>__hit('header')</script>",
        "__hit('model')",
    ] {
        assert!(har_shown.contains(shown), "{shown}: {v:#}");
    }
    assert!(
        v["endpointTexts"].to_string().contains("__hit('js')"),
        "{v:#}"
    );
    assert_eq!(
        v["violations"],
        json!([]),
        "nothing even tried to run inline: {v:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_guards_the_dashboard() {
    let (_har, gw) = dashboard_gateway(true).await;
    let base = format!("http://{}", gw.admin_addr);
    let plain = |path: &str| Request::get(format!("{base}{path}")).body(empty()).unwrap();
    // Without a session: pages go to the login form, data answers 401, assets are open.
    let r = send(&client(), plain("/ui")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.header("location"), Some("/ui/login"));
    assert_eq!(
        send(&client(), plain("/ui/api/summary")).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&client(), plain("/ui/app.js")).await.status,
        StatusCode::OK
    );
    // Every admin answer carries the security headers.
    for path in ["/ui/login", "/healthz", "/ui/app.js"] {
        let r = send(&client(), plain(path)).await;
        assert!(
            r.header("content-security-policy")
                .unwrap()
                .contains("default-src 'none'"),
            "{path}"
        );
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
    }
    // A login by form; the cookie then opens the API, but not for a cross-site POST.
    let r = send(
        &client(),
        Request::post(format!("{base}/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(bytes_body(format!("token={TOKEN}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.header("location"), Some("/ui"));
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let with =
        |req: http::request::Builder| req.header("cookie", cookie.as_str()).body(empty()).unwrap();
    assert_eq!(
        send(&client(), with(Request::get(format!("{base}/discover"))))
            .await
            .status,
        StatusCode::OK
    );
    let host = gw.admin_addr.to_string();
    let cross = send(
        &client(),
        with(Request::post(format!("{base}/reload")).header("origin", "http://evil.example")),
    )
    .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    assert_eq!(cross.json()["error"]["code"], "cross_site_refused");
    let bare = send(&client(), with(Request::post(format!("{base}/reload")))).await;
    assert_eq!(
        bare.status,
        StatusCode::FORBIDDEN,
        "no Origin, no Sec-Fetch-Site: not proven"
    );
    let site = send(
        &client(),
        with(
            Request::post(format!("{base}/reload"))
                .header("sec-fetch-site", "cross-site")
                .header("origin", format!("http://{host}")),
        ),
    )
    .await;
    assert_eq!(
        site.status,
        StatusCode::FORBIDDEN,
        "the browser's word wins"
    );
    let same = send(
        &client(),
        with(Request::post(format!("{base}/reload")).header("origin", format!("http://{host}"))),
    )
    .await;
    assert_eq!(
        same.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "same origin: the reload ran (and had no file)"
    );
    // The bearer token still works as before, for scripts.
    let r = with_token(&gw, http::Method::POST, "/reload").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Logged out, the cookie opens nothing.
    let r = send(
        &client(),
        with(Request::post(format!("{base}/ui/logout")).header("origin", format!("http://{host}"))),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(
        send(&client(), with(Request::get(format!("{base}/discover"))))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwatched_calls_keep_no_har_entry_and_the_dashboard_can_be_off() {
    let (har, gw) = dashboard_gateway(false).await;
    let up = api().await;
    let r = get_via(
        &gw,
        up.addr,
        "/v1/users/1",
        &[("x-tollgate-request-id", "unwatched-1")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    har_entries_in(har.path(), 1).await;
    // The file sink has it; the dashboard kept nothing, since nobody watched.
    let r = admin_get(&gw, "/ui/api/har/unwatched-1").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("live view is open")
    );
    // Failures are kept, watched or not.
    get_via(&gw, up.addr, "/v1/fail", &[]).await;
    let s = eventually("the failure listed", || async {
        let s = admin_get(&gw, "/ui/api/summary").await.json();
        if s["failures"].as_array().unwrap().len() == 1 {
            Ok(s)
        } else {
            Err(s)
        }
    })
    .await;
    assert_eq!(s["failures"][0]["status"], 503);
    assert_eq!(s["failures"][0]["policy"], "flaky");
    assert_eq!(s["login"], false);

    // Without a token too, another site's page changes nothing (the browser says where
    // it comes from); a script (no such header) still reloads.
    let base = format!("http://{}", gw.admin_addr);
    let from_a_page = send(
        &client(),
        Request::post(format!("{base}/reload"))
            .header("sec-fetch-site", "cross-site")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(from_a_page.status, StatusCode::FORBIDDEN);
    assert_eq!(
        post_reload(&gw).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    let off = gateway("admin: {ui: {enabled: false}}\n").await;
    assert_eq!(admin_get(&off, "/ui").await.status, StatusCode::NOT_FOUND);
    assert_eq!(admin_get(&off, "/metrics").await.status, StatusCode::OK);
}
