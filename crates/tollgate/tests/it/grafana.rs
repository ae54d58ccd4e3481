//! The Grafana dashboard (deploy/grafana/tollgate.json) and the alerting rules
//! (deploy/prometheus/tollgate-alerts.yaml), both shipped by the Helm chart too: every
//! metric their queries read and every label they match or group by exists in `/metrics`
//! of a running gateway that carried traffic through every kind of remedy, and so does
//! every series the rules' `promtool` tests feed them; `promtool test rules` passes. A
//! real Prometheus scrapes that gateway from before the first event: every query of the
//! dashboard answers with data, the rare events' increases included, and every rule
//! evaluates without error.

use crate::support::config::config;
use crate::support::redis_procs::RedisServer;
use crate::support::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Labels Prometheus adds when it scrapes (the target's), not the exporter.
const SCRAPE_LABELS: [&str; 2] = ["job", "instance"];

fn dashboard() -> Value {
    let text = std::fs::read_to_string(format!("{ROOT}/deploy/grafana/tollgate.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every query of the dashboard's panels.
fn queries(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    out
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The metric names a PromQL expression reads, and the label names it matches on or
/// groups by.
fn parse(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut metrics, mut labels) = (BTreeSet::new(), BTreeSet::new());
    let b = expr.as_bytes();
    let mut i = 0;
    while i < expr.len() {
        if expr[i..].starts_with("tollgate_") && (i == 0 || !is_name(b[i - 1] as char)) {
            let end = expr[i..]
                .find(|c| !is_name(c))
                .map_or(expr.len(), |n| i + n);
            metrics.insert(expr[i..end].to_owned());
            i = end;
            if expr[i..].starts_with('{') {
                let close = i + expr[i..].find('}').unwrap();
                for m in expr[i + 1..close].split(',') {
                    let name: String = m.trim().chars().take_while(|c| is_name(*c)).collect();
                    labels.insert(name);
                }
                i = close;
            }
        } else if (expr[i..].starts_with("by (") || expr[i..].starts_with("without ("))
            && (i == 0 || !is_name(b[i - 1] as char))
        {
            let open = i + expr[i..].find('(').unwrap();
            let close = open + expr[open..].find(')').unwrap();
            labels.extend(
                expr[open + 1..close]
                    .split(',')
                    .map(|l| l.trim().to_owned()),
            );
            i = close;
        }
        i += 1;
    }
    labels.retain(|l| !SCRAPE_LABELS.contains(&l.as_str()));
    (metrics, labels)
}

/// Each series' metric name and label names, in an exposition.
fn series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let entry = out.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let close = line.rfind('}').unwrap();
            // Label values may hold commas: take each `name="` start.
            for part in line[name_end + 1..close].split("\",") {
                if let Some((name, _)) = part.split_once("=\"") {
                    entry.insert(name.trim().to_owned());
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_reads_metrics_and_labels_a_running_gateway_exports() {
    let redis = RedisServer::start();
    let har = tempfile::tempdir().unwrap();
    let yaml = config()
        .section("store", &format!("{{backend: redis, url: '{}'}}", redis.url()))
        .section("diagnosis", &format!(
            "{{discovery: {{enabled: true, metrics: true}}, har: {{enabled: true, file: {{dir: '{}'}}}}}}",
            har.path().display()
        ))
        // A client that stops reading is cut at once (tollgate_stalls_total).
        .section("listen", "{send_timeout: 10ms}")
        .section("rate_limits", "{users: {limit: 1, window: minute, queue: {size: 10, max_wait: 50ms}}}")
        .section("quotas", "{month: {limit: 1000, per: month}}")
        .section("breakers", "{down: {consecutive_failures: 2, open_for: 1h}}")
        .section("token_limits", "{tpm: {limit: 100000, window: minute}}")
        .section("budgets", "{daily: {limit: $5, per: day}}")
        .policy("users", "{host: 127.0.0.1, path: '/v1/users/{id}'}", &[
            ("cache", "{ttl: 1h}"),
            ("rate_limit", "users"),
            ("quota", "month"),
        ])
        .policy("flaky", "{host: 127.0.0.1, path: /v1/fail}", &[("breaker", "down")])
        .policy("ai", "{host: 127.0.0.1, path: /v1/chat/completions}", &[
            ("llm", "{}"),
            ("token_limit", "tpm"),
            ("budget", "daily"),
        ])
        .yaml();
    let gw = gateway(&yaml).await;
    // The rare events' series exist at 0 before they happen: the first reload, stall or
    // error of a code is an increase() Prometheus sees, not a new series starting at 1.
    let before = String::from_utf8_lossy(&admin_get(&gw, "/metrics").await.body).into_owned();
    for line in [
        "tollgate_reloads_total{result=\"ok\"} 0\n",
        "tollgate_stalls_total{kind=\"connection\"} 0\n",
        "tollgate_errors_total{code=\"rate_limited\",status_class=\"4xx\"} 0\n",
        "tollgate_har_dropped_total{sink=\"queue\"} 0\n",
    ] {
        assert!(before.contains(line), "{line} before any event:\n{before}");
    }
    // Prometheus scrapes from now on, so the first events are increases it sees.
    let prom = Prometheus::start(gw.admin_addr).await;
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        match req.uri().path() {
            "/v1/fail" => answer(503, &[], "down"),
            "/v1/big" => answer(200, &[], &"x".repeat(16 << 20)),
            _ => answer(200, &[("content-type", "application/json")], "{}"),
        }
    })
    .await;
    let llm = tollgate_provider::Provider::start(local0()).await.unwrap();
    for i in 0..3 {
        // The second and third wait in the rate limit's queue and time out there.
        get_via(&gw, up.addr, &format!("/v1/users/{i}"), &[]).await;
    }
    for _ in 0..3 {
        get_via(&gw, up.addr, "/v1/fail", &[]).await;
    }
    let chat = serde_json::json!({"model": "gpt-4o-mini", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]});
    send(
        &client(),
        http::Request::post(format!("http://{}/v1/chat/completions", gw.proxy_addr))
            .header("content-type", "application/json")
            .header("x-tollgate-host", llm.addr.to_string())
            .header("x-tollgate-scheme", "http")
            .body(bytes_body(chat.to_string()))
            .unwrap(),
    )
    .await;
    post_reload(&gw).await;
    // A client that asks for a large body and never reads it.
    let mut stalled = tokio::net::TcpStream::connect(gw.proxy_addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut stalled,
        format!(
            "GET http://{}/v1/big HTTP/1.1\r\nhost: {}\r\n\r\n",
            up.addr, up.addr
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    metrics_when(&gw, |m| {
        m.contains("tollgate_stalls_total{kind=\"connection\"} 1\n")
            // The reload of a gateway started without a file is refused: its first.
            && m.contains("tollgate_reloads_total{result=\"error\"} 1\n")
    })
    .await;
    // Redis gone: the next admission's operation fails (tollgate_store_errors_total).
    redis.kill();
    get_via(&gw, up.addr, "/v1/users/9", &[]).await;
    let live = metrics_when(&gw, |m| {
        [
            "tollgate_llm_calls_total{",
            "tollgate_endpoint_requests_total{",
            "tollgate_store_errors_total{",
        ]
        .iter()
        .all(|f| m.contains(f))
    })
    .await;
    // The families the live gateway exports (a family shows once it has a series).
    let families: BTreeSet<String> = live
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();
    let live = series(&live);

    let d = dashboard();
    let rules = alert_rules();
    for expr in queries(&d).iter().chain(&rules) {
        let (metrics, labels) = parse(expr);
        assert!(!metrics.is_empty(), "no tollgate metric in {expr}");
        for m in &metrics {
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| m.strip_suffix(s))
                .unwrap_or(m);
            assert!(
                families.contains(family) && live.contains_key(m),
                "{m} (in {expr}) is not in the running gateway's /metrics"
            );
        }
        let known: BTreeSet<&String> = metrics
            .iter()
            .filter_map(|m| live.get(m))
            .flatten()
            .collect();
        for l in &labels {
            assert!(
                known.contains(l),
                "label {l} of {expr}: the metrics have {known:?}"
            );
        }
    }
    // What the rules' tests feed them is what the gateway exports: each series' name
    // and label names.
    for (name, labels) in alert_test_series() {
        let exported = live
            .get(&name)
            .unwrap_or_else(|| panic!("the alert tests feed {name}, which /metrics lacks"));
        assert_eq!(&labels, exported, "the labels of {name} in the alert tests");
    }
    // Prometheus has scraped the events: every query answers, with the rare events'
    // first increases, and every rule evaluates.
    prom.wait_for("tollgate_reloads_total{result=\"error\"} == 1")
        .await;
    prom.wait_for("tollgate_stalls_total{kind=\"connection\"} == 1")
        .await;
    // Three more scrapes: the newest series has the two samples a rate needs.
    let scrapes = prom.scrapes().await;
    prom.wait_for(&format!(
        "count_over_time(up{{job=\"tollgate\"}}[1h]) >= {}",
        scrapes + 3
    ))
    .await;
    for expr in queries(&d) {
        let q = expr
            .replace("$__rate_interval", "1m")
            .replace("$job", "tollgate");
        let answer = prom.query(&q).await;
        assert!(!answer.is_empty(), "no data for {q}");
    }
    let increased = |answer: &[Value], label: &str, value: &str| {
        answer
            .iter()
            .any(|s| s["metric"][label] == value && s["value"][1].as_str().unwrap() != "0")
    };
    let reloads = prom
        .query("sum by (result) (increase(tollgate_reloads_total{job=~\"tollgate\"}[1h]))")
        .await;
    assert!(increased(&reloads, "result", "error"), "{reloads:?}");
    let stalls = prom
        .query("sum by (kind) (increase(tollgate_stalls_total{job=~\"tollgate\"}[1h]))")
        .await;
    assert!(increased(&stalls, "kind", "connection"), "{stalls:?}");
    prom.rules_evaluated().await;

    // The datasource is a variable: importable as is into any Grafana.
    let vars = d["templating"]["list"].as_array().unwrap();
    assert!(
        vars.iter()
            .any(|v| v["type"] == "datasource" && v["query"] == "prometheus")
    );
    for p in d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
    {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
    }
}

/// A Prometheus (Debian's `prometheus`) scraping the gateway's admin listener every
/// 200 ms as job `tollgate`, with the alerting rules loaded; stopped when dropped.
struct Prometheus {
    addr: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    async fn start(target: std::net::SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "global: {{scrape_interval: 200ms, evaluation_interval: 200ms}}\n\
             rule_files: ['{ROOT}/deploy/prometheus/tollgate-alerts.yaml']\n\
             scrape_configs: [{{job_name: tollgate, static_configs: [{{targets: ['{target}']}}]}}]\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let addr = format!("127.0.0.1:{}", crate::support::redis_procs::free_port());
        let child = std::process::Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus on PATH (apt-get install prometheus; scripts/test does)");
        let p = Prometheus {
            addr,
            child,
            _dir: dir,
        };
        p.wait_for("up{job=\"tollgate\"} == 1").await;
        p
    }

    /// The JSON answer of an API call, once Prometheus answers with JSON (while it
    /// starts it answers 503 in plain text).
    async fn api(&self, path_and_query: &str) -> Value {
        let url = format!("http://{}{path_and_query}", self.addr);
        let mut last = String::new();
        for _ in 0..300 {
            if let Ok(r) = client()
                .request(http::Request::get(&url).body(empty()).unwrap())
                .await
                && let Ok(body) = http_body_util::BodyExt::collect(r.into_body()).await
            {
                let body = body.to_bytes();
                match serde_json::from_slice(&body) {
                    Ok(v) => return v,
                    Err(_) => last = String::from_utf8_lossy(&body).into_owned(),
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("prometheus never answered {url} with JSON; last: {last:?}");
    }

    /// An instant query's samples; a query Prometheus refuses fails the test.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let encoded = tollgate::policy::path::percent_encode(expr);
        let v = self.api(&format!("/api/v1/query?query={encoded}")).await;
        assert_eq!(v["status"], "success", "{expr}: {v}");
        v["data"]["result"].as_array().unwrap().clone()
    }

    /// How many times it has scraped the gateway.
    async fn scrapes(&self) -> u64 {
        let v = self
            .query("count_over_time(up{job=\"tollgate\"}[1h])")
            .await;
        v[0]["value"][1].as_str().unwrap().parse().unwrap()
    }

    /// Waits (30 s at most) until `expr` has a sample.
    async fn wait_for(&self, expr: &str) {
        for _ in 0..300 {
            if !self.query(expr).await.is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("prometheus never saw {expr} within 30 s");
    }

    /// Waits until every rule has been evaluated, and fails on one that erred.
    async fn rules_evaluated(&self) {
        for _ in 0..300 {
            let v = self.api("/api/v1/rules").await;
            let rules: Vec<Value> = v["data"]["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["rules"].as_array().unwrap().clone())
                .collect();
            for r in &rules {
                assert_ne!(r["health"], "err", "{r}");
            }
            if !rules.is_empty() && rules.iter().all(|r| r["health"] == "ok") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("prometheus never evaluated every rule within 30 s");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The expressions of the alerting rules.
fn alert_rules() -> Vec<String> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/deploy/prometheus/tollgate-alerts.yaml")).unwrap();
    let rules: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    let mut out = Vec::new();
    for g in rules["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            out.push(r["expr"].as_str().unwrap().to_owned());
        }
    }
    assert!(out.len() >= 10, "{out:?}");
    out
}

/// The series the rules' promtool tests feed them: each name with its label names
/// (Prometheus's own `job` and `instance` left out).
fn alert_test_series() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(format!(
        "{ROOT}/deploy/prometheus/tollgate-alerts.test.yaml"
    ))
    .unwrap();
    let tests: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    let mut out = BTreeMap::new();
    for t in tests["tests"].as_sequence().unwrap() {
        for s in t["input_series"].as_sequence().unwrap() {
            let exposition = format!("{} 0\n", s["series"].as_str().unwrap().replace(", ", ","));
            for (name, mut labels) in series(&exposition) {
                labels.retain(|l| !SCRAPE_LABELS.contains(&l.as_str()));
                out.insert(name, labels);
            }
        }
    }
    out
}

/// `promtool` checks the rules and runs their tests: each alert fires when it should and
/// stays quiet when it should not.
#[test]
fn the_alerting_rules_pass_their_promtool_tests() {
    for args in [
        ["check", "rules", "tollgate-alerts.yaml"],
        ["test", "rules", "tollgate-alerts.test.yaml"],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(format!("{ROOT}/deploy/prometheus"))
            .output()
            .expect("promtool on PATH (apt-get install prometheus; scripts/test does)");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_chart_ships_the_same_dashboard() {
    let shipped = std::fs::read(format!(
        "{ROOT}/deploy/helm/tollgate/dashboards/tollgate.json"
    ))
    .unwrap();
    let canonical = std::fs::read(format!("{ROOT}/deploy/grafana/tollgate.json")).unwrap();
    assert!(
        shipped == canonical,
        "copy deploy/grafana/tollgate.json to deploy/helm/tollgate/dashboards/"
    );
}

#[test]
fn parses_metrics_and_labels_of_a_query() {
    let (m, l) = parse(
        r#"histogram_quantile(0.99, sum by (le, host) (rate(tollgate_request_duration_seconds_bucket{job=~"$job", status_class="5xx"}[5m])))"#,
    );
    assert_eq!(
        m.into_iter().collect::<Vec<_>>(),
        ["tollgate_request_duration_seconds_bucket"]
    );
    assert_eq!(
        l.into_iter().collect::<Vec<_>>(),
        ["host", "le", "status_class"]
    );
}
