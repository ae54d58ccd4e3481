//! TLS to upstreams: verified against an extra CA, rejected without it, skipped only for
//! explicitly listed hosts; HTTP/2 negotiated by ALPN.

use crate::support::*;
use http::{Request, StatusCode};

fn req_to(gw: &tollgate::Gateway, host: &str, path: &str) -> Request<tollgate::body::Body> {
    Request::get(format!("http://{}{path}", gw.proxy_addr))
        .header("x-tollgate-host", host)
        .body(empty())
        .unwrap()
}

fn ca_file(pki: &TestPki) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), &pki.ca_pem).unwrap();
    f
}

#[tokio::test]
async fn verified_with_extra_ca_and_h2_by_alpn() {
    let pki = pki();
    let h2 = tls_upstream(&pki, &[b"h2", b"http/1.1"], echo_json).await;
    let h1 = tls_upstream(&pki, &[b"http/1.1"], echo_json).await;
    let ca = ca_file(&pki);
    let gw = gateway(&format!(
        "upstream:\n  tls:\n    extra_ca_file: {}\n",
        ca.path().display()
    ))
    .await;
    let c = client();
    let got = send(
        &c,
        req_to(&gw, &format!("localhost:{}", h2.addr.port()), "/a?b=c"),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    let seen = got.json();
    assert_eq!(seen["version"], "HTTP/2.0", "ALPN picked h2");
    assert_eq!(seen["path"], "/a?b=c");
    assert_eq!(
        seen["uri"],
        format!("https://localhost:{}/a?b=c", h2.addr.port()),
        ":authority is the upstream"
    );
    let got = send(
        &c,
        req_to(&gw, &format!("localhost:{}", h1.addr.port()), "/"),
    )
    .await;
    assert_eq!(got.json()["version"], "HTTP/1.1");
    // IP-address certificates verify too.
    let got = send(
        &c,
        req_to(&gw, &format!("127.0.0.1:{}", h2.addr.port()), "/"),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    // Many concurrent requests share the h2 connection.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (c, r) = (
            c.clone(),
            req_to(
                &gw,
                &format!("localhost:{}", h2.addr.port()),
                &format!("/{i}"),
            ),
        );
        tasks.push(tokio::spawn(async move { send(&c, r).await.status }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
}

#[tokio::test]
async fn rejected_without_the_ca_and_insecure_only_for_listed_hosts() {
    let pki = pki();
    let up = tls_upstream(&pki, &[b"h2", b"http/1.1"], echo_json).await;
    let gw = gateway("upstream:\n  tls:\n    insecure_skip_verify: [localhost]\n").await;
    let c = client();
    let got = send(
        &c,
        req_to(&gw, &format!("localhost:{}", up.addr.port()), "/"),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "listed host skips verification");
    let got = send(
        &c,
        req_to(&gw, &format!("127.0.0.1:{}", up.addr.port()), "/"),
    )
    .await;
    assert_eq!(
        got.error_code().as_deref(),
        Some("tls_error"),
        "unlisted host is still verified"
    );
}

#[test]
fn insecure_skip_verify_needs_exact_hosts_and_ca_file_must_exist() {
    let err = tollgate::Config::from_yaml("upstream:\n  tls:\n    insecure_skip_verify: ['*']\n")
        .unwrap_err();
    assert_eq!(err[0].path, "upstream.tls.insecure_skip_verify[0]");
    let err =
        tollgate::Config::from_yaml("upstream:\n  tls:\n    extra_ca_file: /nonexistent/ca.pem\n")
            .unwrap_err();
    assert_eq!(err[0].path, "upstream.tls.extra_ca_file");
    assert!(err[0].message.contains("/nonexistent/ca.pem"));
}

/// What `openssl req -x509 -addext subjectAltName=DNS:localhost` makes: one self-signed
/// certificate (basicConstraints CA:TRUE) that the server presents as its own.
fn self_signed_for_localhost() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    TestPki {
        ca_pem: cert.pem(),
        leaf_der: cert.der().clone(),
        key_der: rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    }
}

#[tokio::test]
async fn a_self_signed_server_certificate_in_the_extra_ca_file_is_trusted_for_its_own_names() {
    let pki = self_signed_for_localhost();
    let up = tls_upstream(&pki, &[b"h2", b"http/1.1"], echo_json).await;
    let ca = ca_file(&pki);
    let gw = gateway(&format!(
        "upstream:\n  tls:\n    extra_ca_file: {}\n",
        ca.path().display()
    ))
    .await;
    let got = send(
        &client(),
        req_to(&gw, &format!("localhost:{}", up.addr.port()), "/pinned"),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    assert_eq!(got.json()["path"], "/pinned");
    // Not for a name it does not hold: 127.0.0.1 is not in it.
    let got = send(
        &client(),
        req_to(&gw, &format!("127.0.0.1:{}", up.addr.port()), "/"),
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert_eq!(got.error_code().as_deref(), Some("tls_error"));
    // Without the file, it is refused as any unknown certificate is.
    let plain = gateway("").await;
    let got = send(
        &client(),
        req_to(&plain, &format!("localhost:{}", up.addr.port()), "/"),
    )
    .await;
    assert_eq!(got.error_code().as_deref(), Some("tls_error"));
}
