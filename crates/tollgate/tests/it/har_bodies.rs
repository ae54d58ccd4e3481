//! HAR bodies are evidence: recorded as the bytes that were sent (only decoded from
//! gzip), with secrets replaced in place — JSON members, form-encoded and multipart
//! fields under a secret name, a basic credential's user id and password quoted back by
//! the provider, secrets inside binary bodies — and with obfuscation on, a secret echoed
//! back is `REDACTED`, not its hash.

use crate::support::*;
use base64::Engine as _;
use http::Request;
use serde_json::Value;
use std::io::Write;
use std::path::Path;

const STRIPE_KEY: &str = "sk_test_STRIPEKEY0123456789";
const BEARER: &str = "sk-live-BEARER0123456789";

/// Answers fixed bytes by path; echoes the request otherwise.
async fn provider() -> Server {
    upstream(|req: Request<hyper::body::Incoming>| async move {
        match req.uri().path() {
            "/numbers" => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(RESPONSE.as_bytes()).unwrap();
                let mut r = http::Response::new(tollgate::body::full(e.finish().unwrap()));
                r.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                r.headers_mut()
                    .insert("content-encoding", "gzip".parse().unwrap());
                r
            }
            "/whoami" => answer(
                200,
                &[("content-type", "application/json")],
                &format!(r#"{{"api_key": "{STRIPE_KEY}", "note": "key {STRIPE_KEY} used"}}"#),
            ),
            "/binary" => {
                let mut body = vec![0u8, 159, 146, 150, 255];
                body.extend_from_slice(STRIPE_KEY.as_bytes());
                body.push(0);
                let mut r = http::Response::new(tollgate::body::full(body));
                r.headers_mut()
                    .insert("content-type", "application/octet-stream".parse().unwrap());
                r
            }
            _ => echo_json(req).await,
        }
    })
    .await
}

const REQUEST: &str = "{ \"z\":1E3,\n  \"amount\" : 19.990, \"id\": 123456789012345678901234567890,\n  \"password\": \"hunter2-secret\", \"a\":[ 1 ,2 ] }";
const RESPONSE: &str = "{\"b\":0.1000000000000000055511151231257827,  \"a\" : \"x\",\"big\":123456789012345678901234567890}\n";

fn config(dir: &Path, extra: &str) -> String {
    format!(
        r#"
policies:
  - name: stripe
    match: {{ host: 127.0.0.1 }}
    credentials:
      accounts:
        - basic: {{ username: {STRIPE_KEY}, password: "" }}
diagnosis:
  har:
    enabled: true
    max_body_bytes: 64KiB
    redact: [password, client_secret]
    file: {{ dir: {} }}
{extra}"#,
        dir.display()
    )
}

async fn post(
    gw: &tollgate::Gateway,
    up: std::net::SocketAddr,
    path: &str,
    content_type: &str,
    body: &str,
) -> Got {
    let b = via_header(gw, up, path)
        .method("POST")
        .header("content-type", content_type);
    send(&client(), b.body(bytes_body(body.to_owned())).unwrap()).await
}

fn by_path<'a>(entries: &'a [Value], path: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| {
            e["request"]["url"]
                .as_str()
                .is_some_and(|u| u.ends_with(path))
        })
        .unwrap_or_else(|| panic!("no entry for {path}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_the_bytes_as_sent_with_secrets_replaced_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let gw = gateway(&config(dir.path(), "")).await;
    assert_eq!(
        post(&gw, up.addr, "/numbers", "application/json", REQUEST)
            .await
            .status,
        200
    );
    let entries = har_entries_in(dir.path(), 1).await;
    let e = &entries[0];
    // Key order, whitespace and numbers as written; the secret replaced where it stood.
    assert_eq!(
        e["request"]["postData"]["text"].as_str().unwrap(),
        REQUEST.replace("\"hunter2-secret\"", "\"REDACTED\"")
    );
    assert_eq!(e["request"]["bodySize"], REQUEST.len());
    let content = &e["response"]["content"];
    assert_eq!(content["text"].as_str().unwrap(), RESPONSE);
    assert_eq!(content["size"], RESPONSE.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_multipart_basic_and_binary_secrets_are_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let gw = gateway(&config(dir.path(), "")).await;
    // An OAuth token request: form-encoded, the secret echoed back by the provider.
    let form = "grant_type=client_credentials&client_id=app&client_secret=cs-SECRET-42%2F7";
    let r = post(
        &gw,
        up.addr,
        "/oauth/token",
        "application/x-www-form-urlencoded",
        form,
    )
    .await;
    assert_eq!(r.status, 200);
    let multipart = "--XyZ\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nalice\r\n--XyZ\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nmp-SECRET-pass\r\n--XyZ--\r\n";
    let r = post(
        &gw,
        up.addr,
        "/upload",
        "multipart/form-data; boundary=XyZ",
        multipart,
    )
    .await;
    assert_eq!(r.status, 200);
    for path in ["/whoami", "/binary"] {
        assert_eq!(get_via(&gw, up.addr, path, &[]).await.status, 200);
    }
    let entries = har_entries_in(dir.path(), 4).await;
    let all = serde_json::to_string(&entries).unwrap();
    for secret in ["cs-SECRET-42", "mp-SECRET-pass", STRIPE_KEY] {
        assert!(!all.contains(secret), "{secret} left in clear: {all}");
    }
    let oauth = by_path(&entries, "/oauth/token");
    assert_eq!(
        oauth["request"]["postData"]["text"],
        "grant_type=client_credentials&client_id=app&client_secret=REDACTED"
    );
    let upload = by_path(&entries, "/upload");
    assert_eq!(
        upload["request"]["postData"]["text"].as_str().unwrap(),
        multipart.replace("mp-SECRET-pass", "REDACTED")
    );
    let whoami = by_path(&entries, "/whoami");
    assert_eq!(
        whoami["response"]["content"]["text"],
        r#"{"api_key": "REDACTED", "note": "key REDACTED used"}"#
    );
    let binary = by_path(&entries, "/binary");
    assert_eq!(binary["response"]["content"]["encoding"], "base64");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(binary["response"]["content"]["text"].as_str().unwrap())
        .unwrap();
    let mut expected = vec![0u8, 159, 146, 150, 255];
    expected.extend_from_slice(b"REDACTED\0");
    assert_eq!(bytes, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_obfuscation_an_echoed_secret_is_redacted_not_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let yaml = format!(
        r#"
policies:
  - name: openai
    match: {{ host: 127.0.0.1 }}
    credentials:
      accounts:
        - bearer: {BEARER}
diagnosis:
  har:
    enabled: true
    max_body_bytes: 64KiB
    file: {{ dir: {} }}
    obfuscate:
      enabled: true
      key: a-long-installation-key-0123456789
"#,
        dir.path().display()
    );
    let gw = gateway(&yaml).await;
    assert_eq!(get_via(&gw, up.addr, "/echo", &[]).await.status, 200);
    let entries = har_entries_in(dir.path(), 1).await;
    let text = entries[0]["response"]["content"]["text"].as_str().unwrap();
    let echoed: Value = serde_json::from_str(text).unwrap();
    // Header names and values are leaves, all hashed — but for the injected credential
    // the provider quoted back: redacted, not hashed (a hash would hide that a secret was
    // there).
    let values: Vec<&Value> = echoed["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h[1])
        .collect();
    assert!(values.contains(&&Value::from("REDACTED")), "{echoed:#}");
    assert!(!serde_json::to_string(&entries).unwrap().contains(BEARER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_file_lists_entries_in_start_order() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(|req: Request<hyper::body::Incoming>| async move {
        if req.uri().path() == "/slow" {
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        }
        answer(200, &[], "ok")
    })
    .await;
    let gw = gateway(&format!(
        "diagnosis:\n  har:\n    enabled: true\n    file: {{ dir: {} }}\n",
        dir.path().display()
    ))
    .await;
    // The slow call starts first and completes last: the fast ones are written (in their
    // own batches) before it.
    let slow = get_via(&gw, up.addr, "/slow", &[]);
    let fast = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        for _ in 0..3 {
            assert_eq!(get_via(&gw, up.addr, "/fast", &[]).await.status, 200);
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
    };
    let (s, ()) = tokio::join!(slow, fast);
    assert_eq!(s.status, 200);
    har_entries_in(dir.path(), 4).await;
    gw.shutdown();
    gw.wait().await;
    let files = tollgate::diagnosis::har::file::har_files(dir.path()).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].to_string_lossy().ends_with(".har"), "{files:?}");
    let doc: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let urls: Vec<&str> = doc["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["request"]["url"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(urls, ["slow", "fast", "fast", "fast"]);
}
