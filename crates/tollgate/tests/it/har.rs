//! HAR capture: entries validated against the HAR 1.2 schema by `har-validator` (npm,
//! run in the test), redaction (no injected secret in the bytes of any sink), obfuscation
//! with exclusions, truncation at the cap, gzip decoding, rotation and retention, the
//! collector sink (down, then back), and `tollgate har` turning an entry into a mock.

use crate::support::*;
use http::Request;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::diagnosis::har::{file::har_files, read};

const SECRET: &str = "sk-live-SECRET0123456789";
const QUERY_SECRET: &str = "qk-SECRET9876543210";

/// `har-validator` from npm, installed once under target/ (needs node and npm).
fn validator() -> PathBuf {
    npm_once("har-validator", "har-validator@5.1.5")
}

/// Validates a HAR document with har-validator; panics with its errors.
fn validate(doc: &str) {
    let dir = validator();
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(doc.as_bytes()).unwrap();
    let script = "const v=require('har-validator');const fs=require('fs');\
        v.har(JSON.parse(fs.readFileSync(process.argv[1],'utf8')))\
        .then(()=>console.log('valid'))\
        .catch(e=>{console.error(JSON.stringify(e.errors||e.message));process.exit(1)})";
    let out = Command::new("node")
        .env("NODE_PATH", dir.join("node_modules"))
        .args(["-e", script])
        .arg(f.path())
        .output()
        .expect("node runs (apt-get install nodejs npm)");
    assert!(
        out.status.success(),
        "har-validator rejected the document: {}\n{doc}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An upstream with a JSON echo (headers included, so an injected secret comes back in
/// the body), a gzip-encoded JSON answer, a large body and a binary one.
async fn provider() -> Server {
    upstream(|req: Request<hyper::body::Incoming>| async move {
        match req.uri().path() {
            "/gzip" => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(br#"{"greeting":"hello from gzip"}"#).unwrap();
                let body = e.finish().unwrap();
                let mut r = http::Response::new(tollgate::body::full(body));
                r.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                r.headers_mut()
                    .insert("content-encoding", "gzip".parse().unwrap());
                r
            }
            "/large" => answer(200, &[("content-type", "text/plain")], &"x".repeat(5000)),
            "/binary" => {
                let mut r =
                    http::Response::new(tollgate::body::full(vec![0u8, 159, 146, 150, 255]));
                r.headers_mut()
                    .insert("content-type", "application/octet-stream".parse().unwrap());
                r
            }
            _ => {
                let mut r = echo_json(req).await;
                r.headers_mut()
                    .insert("set-cookie", "session=abc123; Path=/".parse().unwrap());
                r
            }
        }
    })
    .await
}

/// A collector that keeps every batch it is sent.
async fn collector() -> (Server, Arc<Mutex<Vec<Vec<u8>>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let server = upstream(move |req: Request<hyper::body::Incoming>| {
        let g = g.clone();
        async move {
            use http_body_util::BodyExt;
            let body = req.into_body().collect().await.unwrap().to_bytes();
            g.lock().unwrap().push(body.to_vec());
            answer(200, &[], "")
        }
    })
    .await;
    (server, got)
}

fn config(dir: &Path, collector: std::net::SocketAddr, extra: &str) -> String {
    format!(
        r#"
policies:
  - name: provider
    match: {{ host: 127.0.0.1 }}
    credentials:
      accounts:
        - bearer: {SECRET}
        - query: {{ name: api_key, value: {QUERY_SECRET} }}
diagnosis:
  har:
    enabled: true
    max_body_bytes: 1KiB
    redact: [password, x-session-token]
    file: {{ dir: {} }}
    collector: {{ url: "http://{collector}/har", interval: 20ms }}
{extra}"#,
        dir.display()
    )
}

async fn post_json(
    gw: &tollgate::Gateway,
    up: std::net::SocketAddr,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Got {
    let mut b = via_header(gw, up, path)
        .method("POST")
        .header("content-type", "application/json");
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    send(&client(), b.body(bytes_body(body.to_owned())).unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_valid_har_and_no_secret_reaches_any_sink() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let (col, batches) = collector().await;
    let gw = gateway(&config(dir.path(), col.addr, "")).await;

    // Two attempts rotate the accounts: one bearer, one query key.
    let a = post_json(
        &gw,
        up.addr,
        "/anything/users/42?email=ann%40example.com",
        r#"{"email":"ann@example.com","password":"hunter2","nested":{"password":"x"}}"#,
        &[
            ("cookie", "sid=s3cr3t; theme=dark"),
            ("x-session-token", "tok-abcdef"),
        ],
    )
    .await;
    assert_eq!(a.status, 200);
    let b = get_via(&gw, up.addr, "/gzip", &[]).await;
    assert_eq!(b.status, 200);
    let c = get_via(&gw, up.addr, "/large", &[]).await;
    assert_eq!(
        c.body.len(),
        5000,
        "the client gets the whole body; only the capture is capped"
    );
    let d = get_via(&gw, up.addr, "/binary", &[]).await;
    assert_eq!(d.body.len(), 5);

    let entries = har_entries_in(dir.path(), 4).await;
    // Every file is a complete HAR document, valid by a validator others wrote.
    for f in har_files(dir.path()).unwrap() {
        validate(&std::fs::read_to_string(f).unwrap());
    }

    let by_path = |p: &str| {
        entries
            .iter()
            .find(|e| e["request"]["url"].as_str().unwrap().contains(p))
            .unwrap_or_else(|| panic!("no entry for {p}"))
    };
    let echo = by_path("/anything/users/42");
    assert_eq!(echo["request"]["method"], "POST");
    assert_eq!(echo["_tollgatePolicy"], "provider");
    assert_eq!(
        echo["_tollgateRequestId"],
        a.header("x-tollgate-request-id").unwrap()
    );
    let header = |h: &Value, name: &str| {
        h.as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"].as_str().unwrap().eq_ignore_ascii_case(name))
            .map(|x| x["value"].as_str().unwrap().to_owned())
    };
    assert_eq!(
        header(&echo["request"]["headers"], "cookie").as_deref(),
        Some("REDACTED")
    );
    assert_eq!(
        header(&echo["request"]["headers"], "x-session-token").as_deref(),
        Some("REDACTED")
    );
    assert_eq!(echo["request"]["cookies"][0]["name"], "sid");
    assert_eq!(echo["request"]["cookies"][0]["value"], "REDACTED");
    assert_eq!(echo["response"]["cookies"][0]["value"], "REDACTED");
    let post: Value =
        serde_json::from_str(echo["request"]["postData"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(post["password"], "REDACTED");
    assert_eq!(post["nested"]["password"], "REDACTED");
    assert_eq!(
        post["email"], "ann@example.com",
        "not a secret name, no obfuscation: kept"
    );
    assert_eq!(echo["request"]["queryString"][0]["name"], "email");
    assert_eq!(
        echo["request"]["queryString"][0]["value"],
        "ann@example.com"
    );
    assert!(echo["timings"]["wait"].as_f64().unwrap() >= 0.0);
    assert_eq!(echo["timings"]["connect"], -1);

    let gz = by_path("/gzip");
    assert_eq!(
        gz["response"]["content"]["text"], r#"{"greeting":"hello from gzip"}"#,
        "decoded from gzip"
    );
    assert!(gz["response"]["content"]["compression"].is_number());

    let large = by_path("/large");
    assert_eq!(large["response"]["content"]["_tollgateTruncated"], true);
    assert_eq!(large["response"]["content"]["_tollgateSize"], 5000);
    assert_eq!(
        large["response"]["content"]["text"].as_str().unwrap().len(),
        1024
    );
    assert_eq!(large["response"]["bodySize"], 5000);

    let bin = by_path("/binary");
    assert_eq!(bin["response"]["content"]["encoding"], "base64");
    assert_eq!(bin["response"]["content"]["text"], "AJ+Slv8=");

    // The collector got the same entries, in batches of JSON arrays.
    let mut collected = 0;
    for _ in 0..500 {
        collected = batches
            .lock()
            .unwrap()
            .iter()
            .map(|b| serde_json::from_slice::<Vec<Value>>(b).unwrap().len())
            .sum();
        if collected >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(collected, 4);

    // No secret in the bytes of any sink: neither the injected bearer token, nor the
    // query key, nor the client's cookie, in any form.
    let mut sinks: Vec<(String, Vec<u8>)> = har_files(dir.path())
        .unwrap()
        .into_iter()
        .map(|f| (f.display().to_string(), std::fs::read(f).unwrap()))
        .collect();
    sinks.extend(
        batches
            .lock()
            .unwrap()
            .iter()
            .map(|b| ("collector".to_owned(), b.clone())),
    );
    for (name, bytes) in &sinks {
        let text = String::from_utf8_lossy(bytes);
        for secret in [
            SECRET,
            QUERY_SECRET,
            "s3cr3t",
            "hunter2",
            "tok-abcdef",
            "abc123",
        ] {
            assert!(!text.contains(secret), "{secret} found in {name}");
        }
        assert!(text.contains("REDACTED"));
    }
    // The provider did get the credentials (the capture is what was sent, redacted).
    let seen = a.json();
    let sent = seen["headers"].to_string() + seen["uri"].as_str().unwrap();
    assert!(sent.contains(SECRET) || sent.contains(QUERY_SECRET));
    assert_eq!(admin_get(&gw, "/metrics").await.status, 200);
    let m = metrics_when(&gw, |m| {
        m.contains("tollgate_har_entries_total{sink=\"collector\"} 4")
    })
    .await;
    assert!(
        m.contains("tollgate_har_dropped_total{sink=\"queue\"} 0") || !m.contains("sink=\"queue\""),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obfuscation_hashes_values_with_the_key_and_keeps_exclusions() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let (col, _) = collector().await;
    let yaml = format!(
        r#"
policies:
  - name: users
    match: {{ host: 127.0.0.1, path: "/anything/users/{{user}}/orders/{{order}}" }}
diagnosis:
  har:
    enabled: true
    file: {{ dir: {} }}
    collector: {{ url: "http://{}/har" }}
    obfuscate:
      enabled: true
      key: a-long-installation-key-0123456789
      exclude_headers: [content-type, accept]
      exclude_query: [page]
      exclude_path_params: [order]
      exclude_json_paths: ["$.items[*].sku"]
"#,
        dir.path().display(),
        col.addr
    );
    let gw = gateway(&yaml).await;
    let body = r#"{"email":"bob@example.com","items":[{"sku":"A-1","qty":2}]}"#;
    for _ in 0..2 {
        let r = post_json(
            &gw,
            up.addr,
            "/anything/users/bob@example.com/orders/77?page=2&phone=5551234",
            body,
            &[
                ("accept", "application/json"),
                ("x-customer", "bob@example.com"),
            ],
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let entries = har_entries_in(dir.path(), 2).await;
    let text = serde_json::to_string(&entries).unwrap();
    for clear in ["bob@example.com", "5551234"] {
        assert!(!text.contains(clear), "{clear} left in clear");
    }
    let e = &entries[0];
    let url = e["request"]["url"].as_str().unwrap();
    assert!(
        url.contains("/anything/users/") && url.contains("/orders/77?page=2&phone="),
        "{url}"
    );
    let hash = |s: &str| s.len() == 32 && s.bytes().all(|c| c.is_ascii_hexdigit());
    let user_seg = url.split('/').nth(5).unwrap();
    assert!(hash(user_seg), "path parameter `user` obfuscated: {url}");
    let post: Value =
        serde_json::from_str(e["request"]["postData"]["text"].as_str().unwrap()).unwrap();
    assert!(hash(post["email"].as_str().unwrap()));
    assert_eq!(post["items"][0]["sku"], "A-1", "excluded JSON path kept");
    assert!(
        hash(post["items"][0]["qty"].as_str().unwrap()),
        "numbers are leaves too"
    );
    let headers = e["request"]["headers"].as_array().unwrap();
    let h = |n: &str| {
        headers.iter().find(|x| x["name"] == n).unwrap()["value"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(h("accept"), "application/json", "excluded header kept");
    assert!(hash(&h("x-customer")));
    // Equal values stay equal (correlatable), across places and entries.
    assert_eq!(h("x-customer"), post["email"].as_str().unwrap());
    assert_eq!(user_seg, post["email"].as_str().unwrap());
    assert_eq!(entries[1]["request"]["url"], e["request"]["url"]);
    // A keyed hash, not a plain one: SHA-256 of the value is not what is written.
    let plain: String = ring::digest::digest(&ring::digest::SHA256, b"bob@example.com").as_ref()
        [..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_ne!(plain, user_seg);
    validate(
        &serde_json::to_string(&tollgate::diagnosis::har::entry::document(entries.clone()))
            .unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_rotate_by_size_and_keep_the_retention_count() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let yaml = format!(
        "diagnosis:\n  har:\n    enabled: true\n    file: {{ dir: {}, max_bytes: 2KiB, retain: 3 }}\n",
        dir.path().display()
    );
    let gw = gateway(&yaml).await;
    for i in 0..12 {
        let r = get_via(&gw, up.addr, &format!("/anything/{i}"), &[]).await;
        assert_eq!(r.status, 200);
        // Each entry is its own batch, so files fill one entry at a time.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // The last entry written, and the oldest files deleted (the publisher thread closes,
    // renames and deletes after the writer moved on): retention keeps 3 files.
    let files = eventually("the last entry in the newest of 3 files", || async {
        let files = har_files(dir.path()).unwrap();
        let last = read::load(files.last().unwrap()).unwrap_or_default();
        let written = last.iter().any(|e| {
            e["request"]["url"]
                .as_str()
                .unwrap()
                .ends_with("/anything/11")
        });
        match written && files.len() == 3 {
            true => Ok(files),
            false => Err(files),
        }
    })
    .await;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        validate(&text);
        let n = read::load(f).unwrap().len();
        assert!(n >= 1);
    }
    // The oldest entries were in deleted files.
    let all = read::load(dir.path()).unwrap();
    assert!(all.len() < 12);
    assert!(!all.iter().any(|e| {
        e["request"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/anything/0")
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_down_then_back_gets_the_entries() {
    // A port with nothing listening yet.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let up = provider().await;
    let yaml = format!(
        "diagnosis:\n  har:\n    enabled: true\n    collector: {{ url: \"http://127.0.0.1:{port}/har\", interval: 20ms, max_backoff: 200ms }}\n"
    );
    let gw = gateway(&yaml).await;
    for i in 0..3 {
        assert_eq!(
            get_via(&gw, up.addr, &format!("/anything/{i}"), &[])
                .await
                .status,
            200
        );
    }
    // Failing sends are retried with backoff while the entries wait in the buffer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let g = got.clone();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            let g = g.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let g = g.clone();
                    async move {
                        use http_body_util::BodyExt;
                        let b = req.into_body().collect().await.unwrap().to_bytes();
                        g.lock().unwrap().push(b.to_vec());
                        Ok::<_, std::convert::Infallible>(answer(204, &[], ""))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    let mut n = 0;
    for _ in 0..500 {
        n = got
            .lock()
            .unwrap()
            .iter()
            .map(|b| serde_json::from_slice::<Vec<Value>>(b).unwrap().len())
            .sum::<usize>();
        if n >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(n, 3, "every entry arrived once the collector came back");
    let m = admin_get(&gw, "/metrics").await;
    let text = String::from_utf8_lossy(&m.body);
    assert!(
        !text.contains("tollgate_har_dropped_total{sink=\"collector\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_entry_becomes_a_mock_policy() {
    let dir = tempfile::tempdir().unwrap();
    let up = provider().await;
    let yaml = format!(
        "diagnosis:\n  har:\n    enabled: true\n    file: {{ dir: {} }}\n",
        dir.path().display()
    );
    let gw = gateway(&yaml).await;
    let r = get_via(&gw, up.addr, "/gzip", &[]).await;
    assert_eq!(r.status, 200);
    let entries = har_entries_in(dir.path(), 1).await;
    let listing = read::list(&entries, &read::Filter::default());
    assert!(
        listing.contains("GET") && listing.contains("/gzip") && listing.contains("200"),
        "{listing}"
    );
    let id = r.header("x-tollgate-request-id").unwrap();
    let e = read::find(&entries, id).expect("found by request id");
    assert_eq!(read::find(&entries, "1"), Some(e));
    let yaml = read::mock(e).unwrap();
    // The snippet is a valid config, and the mock answers like the provider did.
    let mock_gw = gateway(&yaml).await;
    let replay = get_via(&mock_gw, up.addr, "/gzip", &[]).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.json()["greeting"], "hello from gzip");
    assert_eq!(replay.header("x-tollgate-generated"), Some("true"));
    assert!(
        replay.header("content-encoding").is_none(),
        "the mock body is the decoded text"
    );
    // The documented workflow, twice into one dev config: both mocks land under its one
    // `policies:` list, the user's comments stay, and the second gets its own name.
    let dev = dir.path().join("dev.yaml");
    std::fs::write(&dev, "# my dev config\nlisten:\n  address: 127.0.0.1:0\n").unwrap();
    // (`tollgate har mock DIR ENTRY --append FILE` does this; tollgate-cli's tests drive it.)
    let entries = read::load(dir.path()).unwrap();
    for which in ["1", id] {
        let entry = read::find(&entries, which).unwrap();
        tollgate::config::append::append_to_file(&dev, entry).unwrap();
    }
    let text = std::fs::read_to_string(&dev).unwrap();
    assert!(text.starts_with("# my dev config\n"), "{text}");
    assert_eq!(text.matches("policies:").count(), 1, "{text}");
    let c = tollgate::Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let names: Vec<String> = c
        .policies
        .policies
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    assert_eq!(names.len(), 2, "{text}");
    assert_eq!(names[1], format!("{}-2", names[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_is_captured_with_its_error_and_sampling_zero_captures_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let yaml = format!(
        "policies:\n  - name: quiet\n    match: {{ path: /quiet/* }}\ndiagnosis:\n  har:\n    enabled: true\n    policies: [quiet]\n    file: {{ dir: {} }}\n",
        dir.path().display()
    );
    let gw = gateway(&yaml).await;
    let up = provider().await;
    // Not matched by `quiet`: not captured.
    assert_eq!(get_via(&gw, up.addr, "/anything/x", &[]).await.status, 200);
    let r = get_via(&gw, dead, "/quiet/down", &[]).await;
    assert_eq!(r.status, 502);
    let entries = har_entries_in(dir.path(), 1).await;
    assert_eq!(entries.len(), 1, "only the selected policy's calls");
    let e = &entries[0];
    assert_eq!(e["response"]["status"], 502);
    assert_eq!(e["_tollgateError"], r.header("x-tollgate-error").unwrap());
    let text: Value =
        serde_json::from_str(e["response"]["content"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["error"]["code"], e["_tollgateError"]);
    validate(&std::fs::read_to_string(&har_files(dir.path()).unwrap()[0]).unwrap());

    let dir0 = tempfile::tempdir().unwrap();
    let gw0 = gateway(&format!(
        "diagnosis:\n  har:\n    enabled: true\n    sample: 0\n    file: {{ dir: {} }}\n",
        dir0.path().display()
    ))
    .await;
    for _ in 0..5 {
        assert_eq!(get_via(&gw0, up.addr, "/anything/y", &[]).await.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        har_files(dir0.path()).unwrap().is_empty(),
        "sample 0 captures nothing"
    );
}
