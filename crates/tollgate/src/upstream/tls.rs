//! TLS towards providers: rustls with the ring provider, webpki (Mozilla) roots, the
//! host's trust store or both (`upstream.tls.roots`) plus an optional extra CA file, ALPN
//! `h2` and `http/1.1`. Verification is skipped only for hosts listed explicitly in
//! `upstream.tls.insecure_skip_verify`.

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

crate::fields::words::words! {
    /// The certificate authorities upstream certificates are verified against
    /// (`upstream.tls.roots`).
    #[derive(Default)]
    pub enum Roots {
        /// The Mozilla roots built into the binary (webpki-roots).
        #[default]
        Webpki = "webpki",
        /// The host's trust store, as rustls-native-certs finds it.
        System = "system",
        /// Both.
        Both = "both",
    }
}

/// The trust anchors `roots` names.
fn anchors(roots: Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    if roots != Roots::System {
        store.roots = webpki_roots::TLS_SERVER_ROOTS.to_vec();
    }
    if roots != Roots::Webpki {
        let found = rustls_native_certs::load_native_certs();
        let (added, _ignored) = store.add_parsable_certificates(found.certs);
        if added == 0 {
            let why = found
                .errors
                .first()
                .map_or_else(|| "no certificate found".to_owned(), ToString::to_string);
            return Err(format!(
                "the system's trust store gave no usable certificate ({why}): install the ca-certificates package (or point SSL_CERT_FILE at a PEM bundle), or write `roots: webpki`"
            ));
        }
    }
    Ok(store)
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The two client configs: verifying (default) and, for listed hosts only, not verifying.
pub fn client_configs(
    trust: Roots,
    extra_ca: Option<&Path>,
) -> Result<(Arc<ClientConfig>, Arc<ClientConfig>), String> {
    let mut roots = anchors(trust)?;
    let mut pinned = Vec::new();
    if let Some(path) = extra_ca {
        for cert in read_ca_file(path)? {
            roots
                .add(cert.clone())
                .map_err(|e| format!("CA file `{}`: {e}", path.display()))?;
            pinned.push(cert);
        }
    }
    let webpki =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| e.to_string())?;
    let builder =
        || ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions();
    let mut verified = builder()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AlsoPinned { webpki, pinned }))
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

/// Verifies as webpki does against the roots, and besides accepts a server certificate
/// that the extra CA file itself holds, for the names it is valid for and while it is
/// valid, as curl and Python do (OpenSSL trusts a certificate found in its store as it
/// is). That is what a self-signed certificate made with `openssl req -x509` (the usual
/// local stand-in for a provider) needs: it says CA:TRUE, which webpki refuses in an end
/// entity (`CaUsedAsEndEntity`), however the file is trusted.
#[derive(Debug)]
struct AlsoPinned {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    /// The extra CA file's certificates, as they were in it.
    pinned: Vec<CertificateDer<'static>>,
}

impl AlsoPinned {
    /// Whether `cert` is one of the file's own, names `name` and is valid `now`.
    fn pins(&self, cert: &CertificateDer<'_>, name: &ServerName<'_>, now: UnixTime) -> bool {
        if !self.pinned.iter().any(|p| p.as_ref() == cert.as_ref()) {
            return false;
        }
        let named = rustls::server::ParsedCertificate::try_from(cert)
            .is_ok_and(|parsed| rustls::client::verify_server_name(&parsed, name).is_ok());
        use x509_parser::prelude::{FromDer, X509Certificate};
        let now = now.as_secs() as i64;
        let current = X509Certificate::from_der(cert.as_ref()).is_ok_and(|(_, c)| {
            let v = c.validity();
            v.not_before.timestamp() <= now && now <= v.not_after.timestamp()
        });
        named && current
    }
}

impl ServerCertVerifier for AlsoPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(_) if self.pins(end_entity, name, now) => Ok(ServerCertVerified::assertion()),
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Accepts any certificate (still checks handshake signatures). Used only for hosts the
/// operator named in `insecure_skip_verify`.
#[derive(Debug)]
pub(crate) struct NoVerify(pub(crate) Arc<CryptoProvider>);

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
