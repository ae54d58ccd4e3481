//! The provider SDKs users call through tollgate, installed by the test from PyPI
//! (`openai`, `stripe`, `PyGithub`, pinned) under target/, configured as the cookbook
//! says: tollgate's own errors must surface as each SDK's own error type, carrying
//! tollgate's code and message.

use crate::support::*;
use std::path::PathBuf;
use std::process::Command;

/// The pinned SDKs, installed once with `pip install --target` (no virtualenv needed).
pub fn sdks() -> PathBuf {
    pip_once(
        "python-sdks",
        &["openai==1.109.1", "stripe==12.5.1", "PyGithub==2.8.1"],
    )
}

/// Runs a Python script with the SDKs on its path; its stdout, or a panic with both
/// streams.
async fn python(script: &str, env: &[(&str, String)]) -> String {
    let dir = tokio::task::spawn_blocking(sdks).await.unwrap();
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", dir).args(["-c", script]);
    for (k, v) in env {
        c.env(k, v);
    }
    stdout_of(c).await
}

/// A route to a provider stand-in and a rate limit of one call a day on it: the second
/// call is tollgate's 429 `rate_limited`.
async fn limited(prefix: &str, answer_body: &'static str) -> (Server, tollgate::Gateway) {
    let up = upstream(move |_| async move {
        answer(200, &[("content-type", "application/json")], answer_body)
    })
    .await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: {prefix}\n    upstream: http://{}\npolicies:\n  - name: limited\n    match: {{ host: 127.0.0.1 }}\n    rate_limit: {{ limit: 1, window: day }}\n",
        up.addr
    ))
    .await;
    (up, gw)
}

const OPENAI: &str = r#"
import os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key="sk-test", max_retries=0)
c.models.list()
try:
    c.models.list()
    raise SystemExit("the second call should be refused")
except openai.RateLimitError as e:
    assert e.status_code == 429, e.status_code
    assert e.code == "rate_limited", e.code
    assert e.type == "tollgate_error", e.type
    assert "rate limit" in e.message, e.message
    assert e.response.headers["x-tollgate-error"] == "rate_limited"
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_raises_its_rate_limit_error_with_tollgates_code_and_message() {
    let (_up, gw) = limited("/openai", r#"{"object": "list", "data": []}"#).await;
    let base = format!("http://{}/openai/v1", gw.proxy_addr);
    assert_eq!(python(OPENAI, &[("BASE", base)]).await.trim(), "ok");
}

const STRIPE: &str = r#"
import os, stripe
stripe.api_key = "sk_test_123"
stripe.api_base = os.environ["BASE"]
stripe.max_network_retries = 0
stripe.Customer.retrieve("cus_1")
try:
    stripe.Customer.retrieve("cus_1")
    raise SystemExit("the second call should be refused")
except stripe.RateLimitError as e:
    assert e.http_status == 429, e.http_status
    # stripe-python does not copy `code` onto a RateLimitError; the parsed error object
    # carries it (`e.error`), as it does for Stripe's own errors.
    assert e.error.code == "rate_limited", e.error
    assert e.error.type == "tollgate_error", e.error
    assert "rate limit" in e.user_message, e.user_message
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_raises_its_rate_limit_error_with_tollgates_code_and_message() {
    let (_up, gw) = limited("/stripe", r#"{"id": "cus_1", "object": "customer"}"#).await;
    let base = format!("http://{}/stripe", gw.proxy_addr);
    assert_eq!(python(STRIPE, &[("BASE", base)]).await.trim(), "ok");
}

const OPENAI_RETRIES: &str = r#"
import os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key="sk-test")  # the SDK's 2 retries
try:
    c.models.list()
    raise SystemExit("the provider always answers 429")
except openai.RateLimitError as e:
    assert e.response.headers["x-should-retry"] == "false", dict(e.response.headers)
    assert e.response.headers["x-tollgate-retries"] == "2", dict(e.response.headers)
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_do_not_multiply_with_the_sdks_own() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let up = upstream(move |_| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async {
            answer(
                429,
                &[("content-type", "application/json")],
                r#"{"error": {"message": "slow down", "type": "requests", "code": null}}"#,
            )
        }
    })
    .await;
    let gw = gateway(&format!(
        "routes:\n  - prefix: /openai\n    upstream: http://{}\npolicies:\n  - name: openai\n    match: {{ host: 127.0.0.1 }}\n    retry: {{ attempts: 3, base_delay: 1ms, max_delay: 5ms, statuses: [429] }}\n",
        up.addr
    ))
    .await;
    let base = format!("http://{}/openai/v1", gw.proxy_addr);
    assert_eq!(python(OPENAI_RETRIES, &[("BASE", base)]).await.trim(), "ok");
    // tollgate's three attempts, and no SDK retry on top (3 × 3 = 9 before).
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

const OPENAI_HEADER_MODE: &str = r#"
import os, openai
# The cookbook's second way: tollgate as the base URL, the provider named in a header.
c = openai.OpenAI(
    base_url=os.environ["BASE"],
    api_key="unused",
    max_retries=0,
    default_headers={"x-tollgate-host": os.environ["PROVIDER"], "x-tollgate-scheme": "http"},
)
print(c.models.list().data[0].id)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_reaches_the_policy_through_default_headers() {
    let up = upstream(|req: hyper::Request<hyper::body::Incoming>| async move {
        // The policy's key, not the application's placeholder.
        let auth = req.headers()["authorization"].to_str().unwrap().to_owned();
        let body = format!(r#"{{"object": "list", "data": [{{"id": "{auth}", "object": "model", "created": 0, "owned_by": "x"}}]}}"#);
        answer(200, &[("content-type", "application/json")], &body)
    })
    .await;
    let gw = gateway(
        "policies:\n  - name: openai\n    match: { host: 127.0.0.1 }\n    credentials: { bearer: sk-from-tollgate }\n",
    )
    .await;
    let env = [
        ("BASE", format!("http://{}/v1", gw.proxy_addr)),
        ("PROVIDER", up.addr.to_string()),
    ];
    assert_eq!(
        python(OPENAI_HEADER_MODE, &env).await.trim(),
        "Bearer sk-from-tollgate"
    );
}

const PYGITHUB: &str = r#"
import os, github
g = github.Github(auth=github.Auth.Token("unused"), base_url=os.environ["BASE"], retry=None)
g.get_user("octocat").login
try:
    g.get_user("octocat").login
    raise SystemExit("the hour's budget is spent")
except github.GithubException as e:
    assert e.status == 429, e.status
    assert e.data["error"]["code"] == "rate_limited", e.data
    # The real time to the next window, not "1": a client honouring it does not re-queue.
    print(e.headers["retry-after"])
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pygithub_gets_the_real_retry_after_at_once() {
    let up = upstream(|_| async {
        answer(
            200,
            &[("content-type", "application/json")],
            r#"{"login": "octocat", "id": 1, "type": "User"}"#,
        )
    })
    .await;
    // The GitHub recipe's shape: an hour's budget and a queue that waits a minute. In the
    // hour's last minute the queue rightly waits for the next hour instead of refusing, so
    // its wait stays short of the hour's end (and the hour's last seconds are waited out).
    clear_of_the_hour_end(30).await;
    let max_wait = (secs_to_the_hour() - 20).min(60);
    let gw = gateway(&format!(
        "routes:\n  - prefix: /github\n    upstream: http://{}\npolicies:\n  - name: github\n    match: {{ host: 127.0.0.1 }}\n    rate_limit: {{ limit: 1, window: hour, refund_on: [304], queue: {{ size: 500, max_wait: {max_wait}s }} }}\n",
        up.addr
    ))
    .await;
    let base = format!("http://{}/github", gw.proxy_addr);
    let retry_after: u64 = python(PYGITHUB, &[("BASE", base)])
        .await
        .trim()
        .parse()
        .unwrap();
    let to_the_hour = secs_to_the_hour();
    assert!(
        retry_after.abs_diff(to_the_hour) <= 5,
        "Retry-After {retry_after}, the window ends in {to_the_hour}s"
    );
}
