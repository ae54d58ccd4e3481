//! HTTPS interception with the clients users run, each set up as docs/interception.md
//! says (the proxy from the environment where the client reads it, tollgate's CA in the
//! client's own trust setting), calling an HTTPS stand-in at `localhost` that tollgate
//! trusts through `upstream.tls.extra_ca_file`: Python `requests`, `httpx` (HTTP/1.1 and
//! h2), the OpenAI SDK with the cookbook's remedies, curl (HTTP/1.1 and h2), Node `fetch`,
//! Go `net/http` and Java's `HttpClient` (h2). Each must see the policy's key injected,
//! which only a decrypted request can carry. A missing runtime fails loudly (.ci/run
//! installs them).

use crate::intercept::Setup;
use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The key the policy injects: what the stand-in must see instead of the client's own.
const INJECTED: &str = r#"["authorization","Bearer sk-from-tollgate"]"#;

/// An intercepting gateway in front of a TLS echo stand-in (h2 and http/1.1).
struct Stand {
    s: Setup,
    _up: Server,
    gw: tollgate::Gateway,
    /// `https://localhost:PORT`, the stand-in as clients name it.
    url: String,
}

impl Stand {
    async fn new() -> Self {
        let s = Setup::new();
        let up = tls_upstream(&s.pki, &[b"h2", b"http/1.1"], echo_json).await;
        let gw = gateway(&s.config(
            "[localhost]",
            "policies:\n  - name: api\n    match: {host: localhost}\n    credentials: {bearer: sk-from-tollgate}\n",
        ))
        .await;
        let url = format!("https://localhost:{}", up.addr.port());
        Stand {
            s,
            _up: up,
            gw,
            url,
        }
    }

    fn ca(&self) -> PathBuf {
        self.s.dir.path().join("tollgate-ca.pem")
    }

    /// `cmd` with the proxy in the environment (both spellings, no `NO_PROXY`), `URL` set.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        let proxy = format!("http://{}", self.gw.proxy_addr);
        c.env("HTTPS_PROXY", &proxy)
            .env("https_proxy", &proxy)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env("URL", &self.url);
        c
    }
}

/// Asserts every answer the client printed carries the injected key, and that the
/// client spoke each of `protocols` (one printed line each, before its answer).
fn assert_decrypted(out: &str, protocols: &[&str]) {
    assert_eq!(out.matches(INJECTED).count(), protocols.len(), "{out}");
    for p in protocols {
        assert!(out.contains(&format!("protocol {p}\n")), "{p}: {out}");
    }
}

/// `h2` for httpx's HTTP/2, beside the pinned SDKs (tests/it/sdks.rs).
fn python_path() -> String {
    let h2 = pip_once("python-h2", &["h2==4.2.0"]);
    format!("{}:{}", crate::sdks::sdks().display(), h2.display())
}

const REQUESTS_AND_HTTPX: &str = r#"
import os, requests, httpx
url = os.environ["URL"] + "/v1/models"
app = {"authorization": "Bearer sk-app-own-key"}
# requests: HTTPS_PROXY from the environment, the CA from REQUESTS_CA_BUNDLE.
r = requests.get(url, headers=app)
r.raise_for_status()
print("protocol requests-HTTP/1.1"); print(r.text)
# httpx (trust_env): HTTPS_PROXY and SSL_CERT_FILE from the environment.
for h2 in (False, True):
    with httpx.Client(http2=h2) as c:
        r = c.get(url, headers=app)
        r.raise_for_status()
        print("protocol httpx-" + r.http_version); print(r.text)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_and_httpx_through_https_proxy() {
    let st = Stand::new().await;
    let path = tokio::task::spawn_blocking(python_path).await.unwrap();
    let mut c = st.command("python3");
    c.env("PYTHONPATH", path)
        .env("REQUESTS_CA_BUNDLE", st.ca())
        .env("SSL_CERT_FILE", st.ca())
        .args(["-c", REQUESTS_AND_HTTPX]);
    let out = stdout_of(c).await;
    assert_decrypted(
        &out,
        &["requests-HTTP/1.1", "httpx-HTTP/1.1", "httpx-HTTP/2"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_requests_posts_through_interception_are_not_held_by_a_delayed_ack() {
    let st = Stand::new().await;
    let mut c = st.command("python3");
    c.env("REQUESTS_CA_BUNDLE", st.ca()).args([
        "-c",
        crate::clients::PY_POSTS,
        &format!("{}/v1/chat", st.url),
    ]);
    crate::clients::assert_no_delayed_ack("interception", &stdout_of(c).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_https_proxy_over_http1_and_h2() {
    let st = Stand::new().await;
    let mut out = String::new();
    for flag in ["--http1.1", "--http2"] {
        let mut c = st.command("curl");
        c.args(["-sS", "--fail", flag, "--cacert"])
            .arg(st.ca())
            .args(["-H", "authorization: Bearer sk-app-own-key"])
            .args(["-w", "\nprotocol curl-%{http_version}\n"])
            .arg(format!("{}/v1/models", st.url));
        out += &stdout_of(c).await;
    }
    assert_decrypted(&out, &["curl-1.1", "curl-2"]);
}

/// undici's `EnvHttpProxyAgent` (Node's own `fetch` reads no proxy variable before Node
/// 24's `NODE_USE_ENV_PROXY`), installed once under target/.
fn undici() -> PathBuf {
    npm_once("node-undici", "undici@6.21.3")
}

const NODE: &str = r#"
const { EnvHttpProxyAgent, setGlobalDispatcher } = require("undici");
setGlobalDispatcher(new EnvHttpProxyAgent());
(async () => {
  const r = await fetch(process.env.URL + "/v1/models", {
    headers: { authorization: "Bearer sk-app-own-key" },
  });
  if (!r.ok) throw new Error("status " + r.status);
  console.log("protocol node-fetch");
  console.log(await r.text());
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fetch_with_node_extra_ca_certs() {
    let st = Stand::new().await;
    let dir = tokio::task::spawn_blocking(undici).await.unwrap();
    let mut c = st.command("node");
    c.env("NODE_PATH", dir.join("node_modules"))
        .env("NODE_EXTRA_CA_CERTS", st.ca())
        .args(["-e", NODE]);
    assert_decrypted(&stdout_of(c).await, &["node-fetch"]);
}

const GO: &str = r#"package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
)

func main() {
	// http.ProxyFromEnvironment never proxies localhost (net/http's rule), so the
	// stand-in at localhost needs the proxy named; a real provider's host would not.
	proxy, _ := url.Parse(os.Getenv("HTTPS_PROXY"))
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), ForceAttemptHTTP2: true}}
	req, _ := http.NewRequest("GET", os.Getenv("URL")+"/v1/models", nil)
	req.Header.Set("authorization", "Bearer sk-app-own-key")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		fmt.Fprintln(os.Stderr, err, resp)
		os.Exit(1)
	}
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("protocol go-%s\n%s\n", resp.Proto, body)
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_net_http_with_ssl_cert_file_over_h2() {
    let st = Stand::new().await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("main.go"), GO).unwrap();
    let mut c = st.command("go");
    // Go reads extra roots from SSL_CERT_FILE on Linux (crypto/x509).
    c.env("SSL_CERT_FILE", st.ca())
        .env("GOFLAGS", "-mod=mod")
        .env("GOCACHE", go_cache())
        .arg("run")
        .arg(src.path().join("main.go"));
    assert_decrypted(&stdout_of(c).await, &["go-HTTP/2.0"]);
}

/// Go's build cache under target/, so a test run does not rebuild the standard library.
fn go_cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/go-cache")
}

const JAVA: &str = r#"
import java.net.InetSocketAddress;
import java.net.ProxySelector;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Main {
    public static void main(String[] args) throws Exception {
        // Java reads no HTTPS_PROXY; the proxy is the client's ProxySelector.
        URI proxy = URI.create(System.getenv("HTTPS_PROXY"));
        HttpClient client = HttpClient.newBuilder()
            .proxy(ProxySelector.of(new InetSocketAddress(proxy.getHost(), proxy.getPort())))
            .build();
        HttpRequest req = HttpRequest.newBuilder(URI.create(System.getenv("URL") + "/v1/models"))
            .header("authorization", "Bearer sk-app-own-key")
            .build();
        HttpResponse<String> resp = client.send(req, HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() != 200) { System.err.println(resp); System.exit(1); }
        System.out.println("protocol java-" + resp.version());
        System.out.println(resp.body());
    }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_http_client_with_a_keytool_trust_store_over_h2() {
    let st = Stand::new().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("trust.p12");
    // The CA into a trust store of its own, as docs/interception.md says.
    let mut k = Command::new("keytool");
    k.args([
        "-importcert",
        "-noprompt",
        "-alias",
        "tollgate",
        "-storetype",
        "PKCS12",
    ])
    .args(["-storepass", "changeit", "-file"])
    .arg(st.ca())
    .arg("-keystore")
    .arg(&store);
    stdout_of(k).await;
    std::fs::write(dir.path().join("Main.java"), JAVA).unwrap();
    let mut c = st.command("java");
    c.arg(format!("-Djavax.net.ssl.trustStore={}", store.display()))
        .arg("-Djavax.net.ssl.trustStorePassword=changeit")
        .arg(dir.path().join("Main.java"));
    assert_decrypted(&stdout_of(c).await, &["java-HTTP_2"]);
}

const OPENAI: &str = r#"
import os, openai
# The application's own key and base URL; only HTTPS_PROXY and the CA are set around it.
c = openai.OpenAI(base_url=os.environ["URL"] + "/v1", api_key="sk-app-own-key", max_retries=0)
ask = dict(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
first = c.chat.completions.with_raw_response.create(**ask)
print("first", first.headers.get("x-tollgate-retries"), first.headers.get("x-tollgate-cache"))
print("content", first.parse().choices[0].message.content)
again = c.chat.completions.with_raw_response.create(**ask)
print("again", again.headers.get("x-tollgate-cache"))
print("content", again.parse().choices[0].message.content)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_gets_key_injection_retries_and_a_post_cache_through_https_proxy() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let s = Setup::new();
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    // The provider: 429 with Retry-After on the first call, then a completion that says
    // which key it got.
    let up = tls_upstream(&s.pki, &[b"h2", b"http/1.1"], move |req| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        let key = req.headers()["authorization"].to_str().unwrap().to_owned();
        async move {
            if n == 0 {
                return answer(
                    429,
                    &[("content-type", "application/json"), ("retry-after", "1")],
                    r#"{"error": {"message": "slow down", "type": "requests", "code": null}}"#,
                );
            }
            let body = format!(
                r#"{{"id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini", "choices": [{{"index": 0, "finish_reason": "stop", "message": {{"role": "assistant", "content": "{key}"}}}}]}}"#
            );
            answer(200, &[("content-type", "application/json")], &body)
        }
    })
    .await;
    // The cookbook's OpenAI policy, matched on the stand-in's host.
    let gw = gateway(&s.config(
        "[localhost]",
        "policies:\n  - name: openai-chat\n    match: {host: localhost, path: /v1/chat/completions, methods: [POST]}\n    cache: {ttl: 1h, methods: [POST], key_body: true, sampled: true}\n    credentials: {bearer: sk-from-tollgate}\n    retry: {attempts: 3, base_delay: 10ms, max_delay: 5s, statuses: [429], methods: [POST]}\n",
    ))
    .await;
    let path = tokio::task::spawn_blocking(python_path).await.unwrap();
    let proxy = format!("http://{}", gw.proxy_addr);
    let mut c = Command::new("python3");
    c.env("HTTPS_PROXY", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("URL", format!("https://localhost:{}", up.addr.port()))
        .env("SSL_CERT_FILE", s.dir.path().join("tollgate-ca.pem"))
        .env("PYTHONPATH", path)
        .args(["-c", OPENAI]);
    let out = stdout_of(c).await;
    assert!(
        out.contains("first 1 miss\n"),
        "retried once after the 429: {out}"
    );
    assert!(
        out.contains("again hit\n"),
        "the same POST from the cache: {out}"
    );
    assert_eq!(
        out.matches("content Bearer sk-from-tollgate\n").count(),
        2,
        "the policy's key, not the application's: {out}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "429, then the answer cached"
    );
}
