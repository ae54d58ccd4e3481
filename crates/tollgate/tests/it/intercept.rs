//! HTTPS interception (#25): CONNECT tunnels to `intercept.hosts` are decrypted with the
//! local CA's leaves and their requests run the whole pipeline (policies, HAR, metrics);
//! the upstream is verified as ever; a client that refuses the CA is logged, counted and
//! (opted in) tunnelled; every other tunnel is relayed byte for byte, never decrypted.

use crate::support::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tollgate::intercept::ca::Ca;

/// tollgate's CA (made as `tollgate ca init` makes it), the test PKI the upstreams'
/// certificates come from, and the files the config names.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub pki: TestPki,
}

impl Setup {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create(dir.path(), false).unwrap();
        let pki = pki();
        std::fs::write(dir.path().join("upstream-ca.pem"), &pki.ca_pem).unwrap();
        Setup { dir, ca, pki }
    }

    /// A config intercepting `hosts`, trusting the upstreams' CA, any CONNECT port.
    pub fn config(&self, hosts: &str, extra: &str) -> String {
        let d = self.dir.path().display();
        format!(
            "egress:\n  connect_ports: ['*']\nupstream:\n  tls:\n    extra_ca_file: {d}/upstream-ca.pem\nintercept:\n  hosts: {hosts}\n  ca:\n    cert_file: {d}/tollgate-ca.pem\n    key_file: {d}/tollgate-ca-key.pem\n{extra}"
        )
    }

    /// An HTTP/1.1 client's TLS through a decrypted tunnel to `target` (a `localhost` port).
    async fn decrypted_h1(&self, proxy: SocketAddr, target: &str) -> TlsStream<TcpStream> {
        tls_via(proxy, target, "localhost", self.ca.pem(), &[b"http/1.1"])
            .await
            .expect("the client trusts the leaf")
    }
}

/// A TLS client through the proxy's CONNECT to `target`, trusting `roots` (PEM), offering
/// `alpn`, naming `sni`.
async fn tls_via(
    proxy: SocketAddr,
    target: &str,
    sni: &str,
    roots: &str,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<TcpStream>> {
    let (s, head) = connect_via(proxy, target).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut store = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(roots) {
        store.add(cert).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(sni.to_owned()).unwrap(), s)
        .await
}

fn rustls_pemfile_certs(pem: &str) -> Vec<CertificateDer<'static>> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(Result::unwrap)
        .collect()
}

/// Sends `req` on a fresh HTTP/1.1 or HTTP/2 connection (as ALPN settled) over `tls`.
async fn exchange(tls: TlsStream<TcpStream>, req: Request<Full<Bytes>>) -> Got {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let resp = if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn.with_upgrades());
        send.send_request(req).await.unwrap()
    };
    let (parts, body) = resp.into_parts();
    Got {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

fn get(uri: &str, host: &str) -> Request<Full<Bytes>> {
    Request::get(uri)
        .header("host", host)
        .body(Full::default())
        .unwrap()
}

#[tokio::test]
async fn a_decrypted_tunnel_runs_policies_and_diagnosis_over_h1_and_h2() {
    let s = Setup::new();
    let up = tls_upstream(&s.pki, &[b"h2", b"http/1.1"], echo_json).await;
    let har = tempfile::tempdir().unwrap();
    let policy = format!(
        "policies:\n  - name: api\n    match: {{host: localhost, path: /v1/*}}\n    request:\n      set_headers: {{authorization: Bearer injected}}\ndiagnosis:\n  har:\n    enabled: true\n    file: {{dir: {}}}\n",
        har.path().display()
    );
    let gw = gateway(&s.config("[localhost]", &policy)).await;
    let target = format!("localhost:{}", up.addr.port());
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let tls = tls_via(gw.proxy_addr, &target, "localhost", s.ca.pem(), &[alpn])
            .await
            .expect("the client trusts the leaf");
        let issuer = tls.get_ref().1.peer_certificates().unwrap()[1].clone();
        assert_eq!(
            issuer.as_ref(),
            s.ca.der(),
            "the client sees tollgate's leaf"
        );
        let uri = if alpn == b"h2" {
            format!("https://{target}/v1/models?x=1")
        } else {
            "/v1/models?x=1".to_owned()
        };
        let got = exchange(tls, get(&uri, &target)).await;
        assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
        let seen = got.json();
        assert_eq!(seen["path"], "/v1/models?x=1");
        let injected = serde_json::json!(["authorization", "Bearer injected"]);
        assert!(
            seen["headers"].as_array().unwrap().contains(&injected),
            "the policy ran on the decrypted request: {seen}"
        );
        assert!(got.header("x-tollgate-request-id").is_some());
    }
    let entries = har_entries_in(har.path(), 2).await;
    for e in &entries {
        assert_eq!(
            e["request"]["url"],
            format!("https://{target}/v1/models?x=1"),
            "HAR records the decrypted call as https"
        );
    }
    let text = metrics_when(&gw, |t| {
        t.contains("tollgate_intercepted_tunnels_total{kind=\"decrypted\"} 2")
    })
    .await;
    assert!(
        text.contains("tollgate_intercept_leaf_certificates_total 1"),
        "one leaf for the host, reused: {text}"
    );
}

#[tokio::test]
async fn an_ip_spelt_another_way_in_host_is_the_tunnels_own_address() {
    let s = Setup::new();
    let up = tls_upstream(&s.pki, &[b"http/1.1"], echo_json).await;
    let gw = gateway(&s.config("['127.0.0.1']", "")).await;
    let port = up.addr.port();
    // A GET in a tunnel CONNECTed to `target`, its Host `host`.
    let through = |target: String, host: String| {
        let (proxy, roots) = (gw.proxy_addr, s.ca.pem().to_owned());
        async move {
            let tls = tls_via(proxy, &target, "127.0.0.1", &roots, &[b"http/1.1"])
                .await
                .expect("the client trusts the leaf");
            exchange(tls, get("/v1/x", &host)).await
        }
    };
    for spelt in [
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
    ] {
        // curl sends the CONNECT's host again in Host.
        let target = format!("{spelt}:{port}");
        let got = through(target.clone(), target).await;
        assert_eq!(got.status, StatusCode::OK, "{spelt}: {:?}", got.body);
    }
    // Another address is still another host.
    let got = through(format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")).await;
    assert_eq!(got.status, StatusCode::MISDIRECTED_REQUEST);
}

#[tokio::test]
async fn a_provider_with_a_bad_certificate_gets_the_client_a_502_inside_its_tls() {
    let s = Setup::new();
    // An upstream whose CA tollgate does not trust (another test PKI).
    let stranger = pki();
    let up = tls_upstream(&stranger, &[b"http/1.1"], echo_json).await;
    let gw = gateway(&s.config("[localhost]", "")).await;
    let target = format!("localhost:{}", up.addr.port());
    let tls = s.decrypted_h1(gw.proxy_addr, &target).await;
    let got = exchange(tls, get("/v1/x", &target)).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert_eq!(got.error_code().as_deref(), Some("tls_error"));
}

#[tokio::test]
async fn a_request_for_another_host_in_a_decrypted_tunnel_is_misdirected() {
    let s = Setup::new();
    let up = tls_upstream(&s.pki, &[b"http/1.1"], echo_json).await;
    let gw = gateway(&s.config("[localhost]", "")).await;
    let target = format!("localhost:{}", up.addr.port());
    let tls = s.decrypted_h1(gw.proxy_addr, &target).await;
    let got = exchange(tls, get("/v1/x", "evil.example")).await;
    assert_eq!(got.status, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(got.error_code().as_deref(), Some("misdirected_request"));
    // An SNI naming another host than the CONNECT host gets no certificate at all.
    let refused = tls_via(gw.proxy_addr, &target, "other.test", s.ca.pem(), &[]).await;
    assert!(refused.is_err(), "no leaf for a host nobody chose");
    metrics_when(&gw, |t| {
        t.contains("tollgate_intercept_failures_total{kind=\"handshake\"} 1")
    })
    .await;
}

#[tokio::test]
async fn a_client_that_refuses_the_ca_is_counted_and_then_tunnelled_when_opted_in() {
    let s = Setup::new();
    let up = tls_upstream(&s.pki, &[b"http/1.1"], echo_json).await;
    let gw = gateway(&s.config("[localhost]", "  tunnel_refused_for: 10m\n")).await;
    let target = format!("localhost:{}", up.addr.port());
    // A client that trusts only the provider's CA (as one that pins would) refuses.
    let refused = tls_via(gw.proxy_addr, &target, "localhost", &s.pki.ca_pem, &[]).await;
    assert!(refused.is_err());
    metrics_when(&gw, |t| {
        t.contains("tollgate_intercept_failures_total{kind=\"refused\"} 1")
    })
    .await;
    // The next CONNECT to that host is a plain tunnel: the client reaches the provider's
    // own certificate.
    let tls = tls_via(gw.proxy_addr, &target, "localhost", &s.pki.ca_pem, &[])
        .await
        .expect("tunnelled untouched after the refusal");
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(leaf, s.pki.leaf_der, "the provider's own certificate");
    let got = exchange(tls, get("/after", &target)).await;
    assert_eq!(got.status, StatusCode::OK);
    metrics_when(&gw, |t| {
        t.contains("tollgate_intercepted_tunnels_total{kind=\"tunnelled\"} 1")
    })
    .await;
}

#[tokio::test]
async fn a_tunnel_to_a_host_not_intercepted_is_relayed_byte_for_byte() {
    let s = Setup::new();
    // A raw upstream that records every byte and answers with bytes of its own.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let up = raw_upstream(move |mut sock| {
        let record = record.clone();
        async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = sock.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                record.lock().unwrap().extend_from_slice(&buf[..n]);
                let _ = sock.write_all(b"\x16\x03\x01 not decrypted").await;
            }
        }
    })
    .await;
    let gw = gateway(&s.config("[localhost]", "")).await;
    // 127.0.0.1 is not in intercept.hosts (only `localhost` is).
    let (mut c, head) = connect_via(gw.proxy_addr, &up.addr.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A TLS ClientHello-shaped record and arbitrary bytes: relayed as they are.
    let sent: Vec<u8> = b"\x16\x03\x01\x00\x05hello"
        .iter()
        .copied()
        .chain(0u8..=255)
        .collect();
    c.write_all(&sent).await.unwrap();
    let mut back = [0u8; 17];
    c.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"\x16\x03\x01 not decrypted");
    wait_until("every byte reaches the upstream", || {
        seen.lock().unwrap().len() >= sent.len()
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), sent);
    let text = admin_get(&gw, "/metrics").await;
    let body = String::from_utf8_lossy(&text.body);
    assert!(
        body.contains("tollgate_intercept_leaf_certificates_total 0")
            && !body.contains("intercepted_tunnels_total{kind=\"decrypted\"} 1"),
        "nothing was decrypted: {body}"
    );
}

/// A TLS upstream that answers an upgrade with 101 and then echoes bytes.
async fn tls_websocket_upstream(p: &TestPki) -> Server {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![p.leaf_der.clone()], p.key_der.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    raw_upstream(move |sock| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(mut tls) = acceptor.accept(sock).await else {
                return;
            };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && tls.read_exact(&mut byte).await.is_ok() {
                head.push(byte[0]);
            }
            let _ = tls
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
                .await;
            let _ = tls.flush().await;
            let mut buf = [0u8; 1024];
            while let Ok(n) = tls.read(&mut buf).await {
                if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                let _ = tls.flush().await;
            }
        }
    })
    .await
}

#[tokio::test]
async fn websocket_upgrades_work_inside_a_decrypted_tunnel() {
    let s = Setup::new();
    let up = tls_websocket_upstream(&s.pki).await;
    let gw = gateway(&s.config("[localhost]", "")).await;
    let target = format!("localhost:{}", up.addr.port());
    let mut tls = s.decrypted_h1(gw.proxy_addr, &target).await;
    tls.write_all(format!("GET /ws HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for msg in [&b"ping"[..], b"second message"] {
        tls.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tls.read_exact(&mut back).await.unwrap();
        assert_eq!(back, msg);
    }
}

#[test]
fn the_config_names_a_missing_ca_and_a_bad_host_at_their_paths() {
    let e = tollgate::config::Config::from_yaml(
        "intercept:\n  hosts: ['api.x.com', 'a b']\n  ca: {cert_file: /nonexistent/ca.pem, key_file: /nonexistent/key.pem}\n",
    )
    .unwrap_err();
    let at = |p: &str| e.iter().find(|e| e.path == p).map(|e| e.message.clone());
    assert!(at("intercept.hosts[1]").is_some(), "{e:?}");
    assert!(
        at("intercept.ca").is_some_and(|m| m.contains("/nonexistent/ca.pem")),
        "{e:?}"
    );
    // With no host named, interception is off and the files are not read.
    tollgate::config::Config::from_yaml(
        "intercept:\n  ca: {cert_file: /nonexistent/ca.pem, key_file: /nonexistent/key.pem}\n",
    )
    .unwrap();
}

#[tokio::test]
async fn the_ca_key_is_never_shown_by_the_admin_api() {
    let s = Setup::new();
    let gw = gateway(&s.config("[localhost]", "")).await;
    let key = std::fs::read_to_string(s.dir.path().join("tollgate-ca-key.pem")).unwrap();
    let body_line = key.lines().nth(1).unwrap().to_owned();
    let config = admin_get(&gw, "/config").await;
    let text = String::from_utf8_lossy(&config.body);
    assert!(
        text.contains("tollgate-ca-key.pem"),
        "the path is shown: {text}"
    );
    assert!(!text.contains(&body_line), "the key is not");
}

#[tokio::test]
async fn a_reload_keeps_the_leaves_and_applies_new_hosts() {
    let s = Setup::new();
    let up = tls_upstream(&s.pki, &[b"http/1.1"], echo_json).await;
    let file = s.dir.path().join("tollgate.yaml");
    std::fs::write(&file, s.config("[localhost]", "")).unwrap();
    let gw = gateway_from_file(&file, false).await;
    let target = format!("localhost:{}", up.addr.port());
    let tls = s.decrypted_h1(gw.proxy_addr, &target).await;
    assert_eq!(
        exchange(tls, get("/a", &target)).await.status,
        StatusCode::OK
    );
    // Same CA, one more host: the leaf made before is served from the cache.
    std::fs::write(&file, s.config("[localhost, api.example.test]", "")).unwrap();
    assert_eq!(post_reload(&gw).await.status, StatusCode::OK);
    let tls = s.decrypted_h1(gw.proxy_addr, &target).await;
    assert_eq!(
        exchange(tls, get("/b", &target)).await.status,
        StatusCode::OK
    );
    let text = metrics_when(&gw, |t| {
        t.contains("tollgate_intercepted_tunnels_total{kind=\"decrypted\"} 2")
    })
    .await;
    assert!(
        text.contains("tollgate_intercept_leaf_certificates_total 1"),
        "{text}"
    );
    // Interception switched off by reload: the next tunnel is a byte relay again, and the
    // client sees the provider's own certificate.
    std::fs::write(&file, s.config("[]", "")).unwrap();
    assert_eq!(post_reload(&gw).await.status, StatusCode::OK);
    let tls = tls_via(gw.proxy_addr, &target, "localhost", &s.pki.ca_pem, &[])
        .await
        .expect("a plain tunnel to the provider");
    assert_eq!(
        tls.get_ref().1.peer_certificates().unwrap()[0],
        s.pki.leaf_der
    );
}
