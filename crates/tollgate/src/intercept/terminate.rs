//! The client's TLS in a decrypted CONNECT tunnel, terminated with the leaf of the
//! CONNECT host (an SNI naming another host is refused); a handshake that fails is logged
//! and counted by why, a client refusing the certificate once per host with the fix.

use super::Interceptor;
use crate::target::Target;
use http::HeaderValue;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use rustls::AlertDescription;
use std::time::Duration;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// Why a decrypted tunnel ended before HTTP.
enum Failure {
    /// The client refused the leaf: it sent a certificate alert, or closed the
    /// connection once it had seen the certificate.
    Refused(String),
    /// Anything else in TLS (no TLS at all, no shared cipher, an SNI for another host).
    Handshake(String),
    /// The leaf could not be made.
    Leaf(String),
}

/// The client's TLS session in the tunnel `upgrade` yields to `target` (an intercepted
/// host), or `None` when it never came to be (logged and counted here): the handshake has
/// `limit` to finish and ends when `stop` is cancelled (nothing is in flight yet).
pub async fn accept(
    upgrade: OnUpgrade,
    target: &Target,
    interceptor: &Interceptor,
    limit: Duration,
    stop: &CancellationToken,
    id: &HeaderValue,
) -> Option<TlsStream<TokioIo<Upgraded>>> {
    let io = match upgrade.await {
        Ok(io) => io,
        Err(e) => {
            tracing::debug!(request_id = ?id, "upgrade failed: {e}");
            return None;
        }
    };
    let handshake = tokio::time::timeout(limit, handshake(io, target, interceptor));
    let done = tokio::select! {
        r = handshake => r,
        _ = stop.cancelled() => Ok(Err(Failure::Handshake("shutting down".into()))),
    };
    match done {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(failure)) => {
            failed(interceptor, &target.host, failure, id);
            None
        }
        Err(_) => {
            interceptor.count(&interceptor.metrics.intercept_failures, "timeout");
            tracing::debug!(request_id = ?id, host = %target.host, "no TLS handshake within listen.header_read_timeout ({limit:?}); tunnel closed");
            None
        }
    }
}

async fn handshake(
    io: Upgraded,
    target: &Target,
    interceptor: &Interceptor,
) -> Result<TlsStream<TokioIo<Upgraded>>, Failure> {
    let start = tokio_rustls::LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        TokioIo::new(io),
    )
    .await
    .map_err(|e| Failure::Handshake(format!("no TLS ClientHello: {e}")))?;
    // The leaf names the host the tunnel was allowed to (RFC 6066 §3: SNI is the host the
    // client means). A client naming another would have its requests sent to the CONNECT
    // host under a certificate for a host nobody chose to intercept.
    if let Some(sni) = start.client_hello().server_name()
        && !sni.trim_end_matches('.').eq_ignore_ascii_case(&target.host)
    {
        return Err(Failure::Handshake(format!(
            "the client's SNI `{sni}` is not the CONNECT host"
        )));
    }
    let config = interceptor
        .leaves
        .config(&target.host)
        .await
        .map_err(|e| Failure::Leaf(e.to_string()))?;
    start.into_stream(config).await.map_err(classify)
}

/// A refusal is an alert about the certificate (RFC 8446 §6.2), or the connection closed
/// once the client had it: Python's `ssl`, Go and Node send an alert, some clients just
/// hang up.
fn classify(e: std::io::Error) -> Failure {
    use std::io::ErrorKind;
    let alert = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .and_then(|r| match r {
            rustls::Error::AlertReceived(a) => Some(*a),
            _ => None,
        });
    match alert {
        Some(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied,
        ) => Failure::Refused(e.to_string()),
        _ if matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
        ) =>
        {
            Failure::Refused(format!("closed during the handshake ({e})"))
        }
        _ => Failure::Handshake(e.to_string()),
    }
}

/// Logs and counts a tunnel that ended before HTTP; a refusal is logged once per host,
/// with what to do about it.
fn failed(interceptor: &Interceptor, host: &str, failure: Failure, id: &HeaderValue) {
    let failures = &interceptor.metrics.intercept_failures;
    match failure {
        Failure::Refused(why) => {
            interceptor.count(failures, "refused");
            if interceptor.refusals.record(host) {
                tracing::warn!(
                    request_id = ?id,
                    "a client refused tollgate's certificate for `{host}` ({why}): it does not trust tollgate's CA, or it pins the provider's certificate. Trust the CA (`tollgate ca export`, docs/interception.md), or remove `{host}` from intercept.hosts; intercept.tunnel_refused_for tunnels it untouched after a refusal. (Logged once per host; counted in tollgate_intercept_failures_total{{kind=\"refused\"}}.)"
                );
            } else {
                tracing::debug!(request_id = ?id, "a client refused the certificate for `{host}` again: {why}");
            }
        }
        Failure::Handshake(why) => {
            interceptor.count(failures, "handshake");
            tracing::debug!(request_id = ?id, "TLS with the client of `{host}` failed: {why}");
        }
        Failure::Leaf(why) => {
            interceptor.count(failures, "leaf");
            tracing::warn!(request_id = ?id, "no certificate for `{host}`: {why}");
        }
    }
}
