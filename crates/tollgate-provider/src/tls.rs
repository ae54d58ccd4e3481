//! The provider over TLS (`tollgate provider --tls-dir DIR`): a CA of its own, written to
//! `DIR/provider-ca.pem` for the clients and proxies that must trust it, and a leaf for
//! `localhost` and `127.0.0.1` (ALPN h2 and http/1.1). For benchmarks and demos of HTTPS
//! paths (CONNECT tunnels, interception) on one machine.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::Path;
use std::sync::Arc;

/// The CA's file name in the TLS directory.
pub const CA_FILE: &str = "provider-ca.pem";

/// Makes the CA and the leaf, writes the CA to `dir`, and returns the server configuration.
pub fn server_config(dir: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let fail = |e: &dyn std::fmt::Display| format!("provider TLS: {e}");
    let ca_key = KeyPair::generate().map_err(|e| fail(&e))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail(&e))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tollgate provider CA");
    let ca = ca_params.self_signed(&ca_key).map_err(|e| fail(&e))?;
    let leaf_key = KeyPair::generate().map_err(|e| fail(&e))?;
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .map_err(|e| fail(&e))?
        .signed_by(&leaf_key, &Issuer::new(ca_params, ca_key))
        .map_err(|e| fail(&e))?;
    std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
    std::fs::write(dir.join(CA_FILE), ca.pem()).map_err(|e| fail(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let chain = vec![leaf.der().clone(), CertificateDer::from(ca.der().to_vec())];
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| fail(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
