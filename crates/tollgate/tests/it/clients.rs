//! Real clients that users use: curl (`-x` forward proxy, header mode, CONNECT via
//! `-p`) and Python `requests` through `HTTP_PROXY` and `proxies=`. Both must be
//! installed (CI installs them); a missing client fails the test loudly.

use crate::support::config::config;
use crate::support::*;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_forward_proxy_header_mode_and_connect() {
    let up = echo_upstream().await;
    let gw = gateway(ANY_CONNECT_PORT).await;
    let proxy = format!("http://{}", gw.proxy_addr);

    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--fail",
        "-x",
        &proxy,
        &format!("http://{}/via/curl-x?a=1", up.addr),
    ]);
    let out = stdout_of(c).await;
    assert!(out.contains("\"path\":\"/via/curl-x?a=1\""), "{out}");

    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--fail",
        "-H",
        &format!("x-tollgate-host: {}", up.addr),
        "-H",
        "x-tollgate-scheme: http",
    ])
    .args(["-d", "hello=world", &format!("{proxy}/via/header")]);
    let out = stdout_of(c).await;
    assert!(
        out.contains("\"path\":\"/via/header\"") && out.contains("\"body\":\"hello=world\""),
        "{out}"
    );

    // -p makes curl tunnel with CONNECT even for http:// URLs.
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--fail",
        "-p",
        "-x",
        &proxy,
        &format!("http://{}/via/connect", up.addr),
    ]);
    let out = stdout_of(c).await;
    assert!(out.contains("\"path\":\"/via/connect\""), "{out}");

    // Errors are readable from curl too.
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %header{x-tollgate-error}",
        &format!("{proxy}/nowhere"),
    ]);
    assert_eq!(stdout_of(c).await, "400 missing_target");
}

const PY: &str = r#"
import os, sys, json, requests
upstream = sys.argv[1]
# HTTP_PROXY from the environment, as applications use it unchanged.
r = requests.get(f"http://{upstream}/env/proxy", params={"q": "1"}, headers={"X-App": "py"}, timeout=10)
assert r.status_code == 200, r.text
seen = r.json()
assert seen["path"] == "/env/proxy?q=1", seen
assert ["x-app", "py"] in seen["headers"], seen
assert "x-tollgate-request-id" in r.headers
# proxies= explicitly, with a JSON body.
s = requests.Session()
s.trust_env = False
r = s.post(f"http://{upstream}/explicit", json={"k": [1, 2]}, proxies={"http": os.environ["HTTP_PROXY"]}, timeout=10)
assert r.status_code == 200, r.text
assert json.loads(r.json()["body"]) == {"k": [1, 2]}
# A provider error passes through untouched.
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_through_http_proxy() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let mut c = Command::new("python3");
    c.args(["-c", PY, &up.addr.to_string()])
        .env("HTTP_PROXY", format!("http://{}", gw.proxy_addr))
        .env("http_proxy", format!("http://{}", gw.proxy_addr))
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    assert_eq!(stdout_of(c).await.trim(), "ok");
}

const PY_LIMITED: &str = r#"
import sys, requests
upstream = sys.argv[1]
codes = []
for _ in range(3):
    r = requests.get(f"http://{upstream}/limited", timeout=10)
    codes.append(r.status_code)
assert codes == [200, 200, 429], codes
assert r.headers["x-tollgate-error"] == "rate_limited", r.headers
assert 1 <= int(r.headers["Retry-After"]) <= 86400, r.headers
assert r.headers["RateLimit-Limit"] == "2", r.headers
assert r.json()["error"]["code"] == "rate_limited", r.text
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_sees_the_rate_limit_and_retry_after() {
    let up = echo_upstream().await;
    let gw = gateway(
        &config()
            .local_policy(&[("rate_limit", "{limit: 2, window: day}")])
            .yaml(),
    )
    .await;
    let mut c = Command::new("python3");
    c.args(["-c", PY_LIMITED, &up.addr.to_string()])
        .env("HTTP_PROXY", format!("http://{}", gw.proxy_addr))
        .env("http_proxy", format!("http://{}", gw.proxy_addr))
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    assert_eq!(stdout_of(c).await.trim(), "ok");
}

/// Kept-alive POSTs from `requests` (urllib3 leaves Nagle on towards a proxy and writes
/// the head and the body apart): the median time of 15, in ms, after one to connect.
pub const PY_POSTS: &str = r#"
import os, sys, time, statistics, requests
url = sys.argv[1]
s = requests.Session()
headers = {k: v for k, v in (h.split(": ", 1) for h in sys.argv[2:])}
s.post(url, json={"warm": True}, headers=headers, timeout=10).raise_for_status()
took = []
for i in range(15):
    t = time.perf_counter()
    r = s.post(url, json={"i": i, "text": "x" * 200}, headers=headers, timeout=10)
    took.append((time.perf_counter() - t) * 1000)
    r.raise_for_status()
print(f"{statistics.median(took):.1f}")
"#;

/// The one timing a test asserts, because the defect is a timer: a delayed ACK holds each
/// such POST for at least 40 ms (Linux's minimum), where an answered one takes about 1 ms
/// here, so a median under 20 ms tells them apart on any machine that runs the suite.
pub fn assert_no_delayed_ack(mode: &str, median_ms: &str) {
    let ms: f64 = median_ms
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{median_ms}"));
    assert!(
        ms < 20.0,
        "{mode}: a requests POST took {ms} ms at the median (a delayed ACK is 40 ms)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_posts_are_not_held_by_a_delayed_ack() {
    let up = echo_upstream().await;
    let gw = gateway("").await;
    let proxy = format!("http://{}", gw.proxy_addr);
    // Forward proxy, from HTTP_PROXY.
    let mut c = Command::new("python3");
    c.args(["-c", PY_POSTS, &format!("http://{}/post", up.addr)])
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    assert_no_delayed_ack("forward proxy", &stdout_of(c).await);
    // Header mode: straight to tollgate.
    let mut c = Command::new("python3");
    c.args(["-c", PY_POSTS, &format!("{proxy}/post")])
        .arg(format!("x-tollgate-host: {}", up.addr))
        .arg("x-tollgate-scheme: http")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy");
    assert_no_delayed_ack("header mode", &stdout_of(c).await);
}
