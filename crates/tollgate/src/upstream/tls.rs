//! TLS towards providers: rustls with the ring provider, webpki (Mozilla) roots plus an
//! optional extra CA file, ALPN `h2` and `http/1.1`. Verification is skipped only for
//! hosts listed explicitly in `upstream.tls.insecure_skip_verify`.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, ring};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::path::Path;
use std::sync::Arc;

/// Reads the PEM certificates of an extra CA file (at least one).
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read CA file `{}`: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("CA file `{}` is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("CA file `{}` holds no certificate", path.display()));
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The two client configs: verifying (default) and, for listed hosts only, not verifying.
pub fn client_configs(
    extra_ca: Option<&Path>,
) -> Result<(Arc<ClientConfig>, Arc<ClientConfig>), String> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = extra_ca {
        for cert in read_ca_file(path)? {
            roots
                .add(cert)
                .map_err(|e| format!("CA file `{}`: {e}", path.display()))?;
        }
    }
    let builder =
        || ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions();
    let mut verified = builder()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut insecure = builder()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
        .with_no_client_auth();
    for cfg in [&mut verified, &mut insecure] {
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    Ok((Arc::new(verified), Arc::new(insecure)))
}

/// Accepts any certificate (still checks handshake signatures). Used only for hosts the
/// operator named in `insecure_skip_verify`.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
