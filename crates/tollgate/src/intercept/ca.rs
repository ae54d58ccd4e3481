//! The local certificate authority: made by `tollgate ca init` (or brought by the user),
//! trusted by the applications whose HTTPS calls tollgate decrypts, and the signer of the
//! short-lived leaf certificates tollgate shows them, one per host. The key is read once
//! and held in memory; it never appears in `Debug`, a log, an error or `/config`.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::{Path, PathBuf};
use std::time::Duration;
use time::OffsetDateTime;

/// The CA certificate's file name in the data directory.
pub const CERT_FILE: &str = "tollgate-ca.pem";
/// The CA key's file name in the data directory (mode 0600).
pub const KEY_FILE: &str = "tollgate-ca-key.pem";

/// How long a CA made by `tollgate ca init` is valid: clients keep trusting it across
/// upgrades and reinstalls of tollgate (mitmproxy's CA is valid for ten years too).
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Leaf certificates start this long before they are made, so a client whose clock is a
/// little behind still accepts them.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} already holds a CA; pass --force to replace it (clients that trust the old one will refuse the new one until they trust it)",
        dir.display()
    )]
    Exists { dir: PathBuf },
    #[error(
        "no CA in {}: run `tollgate ca init` (or `--data-dir` where you made one)",
        dir.display()
    )]
    Missing { dir: PathBuf },
    #[error("{}: {why}", path.display())]
    Unusable { path: PathBuf, why: String },
    #[error("cannot make a certificate for `{host}`: {why}")]
    Leaf { host: String, why: String },
}

/// The CA: its certificate (PEM and DER) and the issuer that signs leaves with its key.
pub struct Ca {
    pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("fingerprint", &self.fingerprint())
            .field("key", &"[redacted]")
            .finish()
    }
}

/// A leaf certificate for one host: the chain to present (leaf, then the CA) and its key.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Ca {
    /// Where `tollgate ca` keeps the CA when no `--data-dir` is given:
    /// `$TOLLGATE_DATA_DIR`, else `$XDG_DATA_HOME/tollgate`, else
    /// `$HOME/.local/share/tollgate`, else `.tollgate` in the working directory.
    pub fn default_dir() -> PathBuf {
        Self::default_dir_and_why().0
    }

    /// [`Ca::default_dir`], and what chose it, for messages ("set by
    /// `$TOLLGATE_DATA_DIR`").
    pub fn default_dir_and_why() -> (PathBuf, &'static str) {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(d) = var("TOLLGATE_DATA_DIR") {
            return (d.into(), "set by `$TOLLGATE_DATA_DIR`");
        }
        if let Some(d) = var("XDG_DATA_HOME") {
            return (
                PathBuf::from(d).join("tollgate"),
                "under `$XDG_DATA_HOME`, the default",
            );
        }
        match var("HOME") {
            Some(h) => (
                PathBuf::from(h).join(".local/share/tollgate"),
                "under `$HOME`, the default",
            ),
            None => (
                PathBuf::from(".tollgate"),
                "in the working directory, as `$HOME` is not set",
            ),
        }
    }

    /// Makes a new CA (an ECDSA P-256 key) in `dir`, created if needed: the certificate
    /// world-readable, the key readable by its owner only. Refuses to replace a CA there
    /// unless `force`.
    pub fn create(dir: &Path, force: bool) -> Result<Ca, CaError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        if !force && (cert_path.exists() || key_path.exists()) {
            return Err(CaError::Exists { dir: dir.into() });
        }
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| CaError::Io { path, source }
        };
        // Folders it makes are its owner's alone (0700 whatever the umask): another local
        // user who could write there could swap in a CA of their own.
        let mut folders = std::fs::DirBuilder::new();
        folders.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut folders, 0o700);
        folders.create(dir).map_err(io(dir))?;
        let key = KeyPair::generate().map_err(|e| CaError::Unusable {
            path: key_path.clone(),
            why: e.to_string(),
        })?;
        let params = ca_params(OffsetDateTime::now_utc());
        let cert = params.self_signed(&key).map_err(|e| CaError::Unusable {
            path: cert_path.clone(),
            why: e.to_string(),
        })?;
        write_new(&key_path, key.serialize_pem().as_bytes(), 0o600).map_err(io(&key_path))?;
        write_new(&cert_path, cert.pem().as_bytes(), 0o644).map_err(io(&cert_path))?;
        Ok(Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA `tollgate ca init` made in `dir`.
    pub fn load_dir(dir: &Path) -> Result<Ca, CaError> {
        let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        if !cert.exists() && !key.exists() {
            return Err(CaError::Missing { dir: dir.into() });
        }
        Self::load(&cert, &key)
    }

    /// A CA from a PEM certificate and its PEM PKCS#8 key (`-----BEGIN PRIVATE KEY-----`:
    /// ECDSA, Ed25519 or RSA), checked to belong together by signing a leaf and verifying
    /// it against the certificate as a client would.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Ca, CaError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| CaError::Io {
                path: path.into(),
                source,
            })
        };
        let unusable = |path: &Path, why: String| CaError::Unusable {
            path: path.into(),
            why,
        };
        let pem = read(cert_file)?;
        let key_text = read(key_file)?;
        refuse_readable_by_others(key_file)?;
        let key = KeyPair::from_pem(&key_text)
            .or_else(|_| KeyPair::from_pem_and_sign_algo(&key_text, &rcgen::PKCS_RSA_SHA256))
            .map_err(|e| {
                unusable(
                    key_file,
                    format!("not a private key tollgate can sign with ({e}); give a PEM PKCS#8 key (`-----BEGIN PRIVATE KEY-----`; `openssl pkcs8 -topk8 -nocrypt -in KEY` converts others)"),
                )
            })?;
        let der = pem_certificate(&pem).ok_or_else(|| {
            unusable(
                cert_file,
                "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
            )
        })?;
        let issuer = Issuer::from_ca_cert_der(&der, key).map_err(|e| {
            unusable(
                cert_file,
                format!("not a certificate tollgate can read ({e})"),
            )
        })?;
        is_a_ca(&der).map_err(|why| unusable(cert_file, why))?;
        let ca = Ca { pem, der, issuer };
        ca.check().map_err(|why| unusable(cert_file, why))?;
        Ok(ca)
    }

    /// A leaf this CA signs verifies against its certificate, as a client that trusts it
    /// would verify it: the key is the certificate's, and the certificate is a CA.
    fn check(&self) -> Result<(), String> {
        use rustls::client::danger::ServerCertVerifier;
        const PROBE: &str = "tollgate-check.invalid";
        let leaf = self
            .leaf(PROBE, Duration::from_secs(60))
            .map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.der.clone())
            .map_err(|e| format!("not a CA certificate clients can trust ({e})"))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| e.to_string())?;
        let name = rustls_pki_types::ServerName::try_from(PROBE).map_err(|e| e.to_string())?;
        verifier
            .verify_server_cert(
                &leaf.chain[0],
                &leaf.chain[1..],
                &name,
                &[],
                rustls_pki_types::UnixTime::now(),
            )
            .map(|_| ())
            .map_err(|e| format!("the certificates it signs are refused ({e}): is the key this certificate's, and is it a CA (basicConstraints CA:TRUE) still valid?"))
    }

    /// The certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The certificate, DER.
    pub fn der(&self) -> &[u8] {
        self.der.as_ref()
    }

    /// The SHA-256 fingerprint of the certificate, as browsers and `openssl x509
    /// -fingerprint -sha256` show it (`AB:CD:…`).
    pub fn fingerprint(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.der.as_ref());
        digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// A leaf certificate for `host` (a DNS name or an IP address), valid for `valid_for`
    /// from now (and an hour before, for clients whose clocks lag), with a key of its own.
    /// It names the host and nothing else.
    pub fn leaf(&self, host: &str, valid_for: Duration) -> Result<Leaf, CaError> {
        let fail = |why: String| CaError::Leaf {
            host: host.into(),
            why,
        };
        let key = KeyPair::generate().map_err(|e| fail(e.to_string()))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.try_into().map_err(|e| fail(format!("{e}")))?),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - CLOCK_SKEW;
        params.not_after = now + valid_for;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| fail(e.to_string()))?;
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.der.clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }
}

/// The CA's own certificate: a CA for server certificates only (no intermediate below
/// it), named for this machine so a user can tell it apart in a trust store.
fn ca_params(now: OffsetDateTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    let machine = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this machine".into());
    dn.push(
        DnType::CommonName,
        format!("tollgate local CA ({machine}, {})", now.date()),
    );
    dn.push(DnType::OrganizationName, "tollgate");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + CA_VALIDITY;
    params
}

/// The first `CERTIFICATE` block of a PEM text, as DER.
fn pem_certificate(pem: &str) -> Option<CertificateDer<'static>> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes()).next()?.ok()
}

/// Whether the certificate may sign others, as OpenSSL-based clients require of an
/// issuer (RFC 5280 §4.2.1.9, §4.2.1.3): basicConstraints `CA:TRUE`, and `keyCertSign`
/// when it has a key usage. rustls accepts any trust anchor, so its check alone would let
/// a server certificate through, and every OpenSSL client would then refuse every leaf.
fn is_a_ca(der: &CertificateDer<'_>) -> Result<(), String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der.as_ref())
        .map_err(|e| format!("not a certificate tollgate can read ({e})"))?;
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|b| b.value.ca);
    if !is_ca {
        return Err("not a CA certificate (its basicConstraints is not CA:TRUE), so clients refuse the certificates it signs: give a CA certificate, or run `tollgate ca init` to make one".into());
    }
    if let Ok(Some(usage)) = cert.key_usage()
        && !usage.value.key_cert_sign()
    {
        return Err("its key usage lacks keyCertSign, so clients refuse the certificates it signs: give a CA certificate whose key usage includes keyCertSign, or run `tollgate ca init`".into());
    }
    Ok(())
}

/// Refuses a key file that users other than its owner and group can read or write, as
/// ssh refuses such a private key: anyone who reads it can impersonate every intercepted
/// host to the applications that trust the CA.
fn refuse_readable_by_others(key_file: &Path) -> Result<(), CaError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(key_file).map_err(|source| CaError::Io {
            path: key_file.into(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o007 != 0 {
            return Err(CaError::Unusable {
                path: key_file.into(),
                why: format!(
                    "the CA key is readable by other users (mode {mode:04o}): run `chmod 600 {}` (in Kubernetes, mount its Secret with `defaultMode: 0400`, or 0440 with an fsGroup)",
                    key_file.display()
                ),
            });
        }
    }
    #[cfg(not(unix))]
    let _ = key_file;
    Ok(())
}

/// Writes `bytes` to a new file of mode `mode` (exactly, whatever the umask), replacing
/// the one at `path`: a symlink planted there is removed, not followed, and the file is
/// created exclusively (`O_EXCL`), so nothing written lands elsewhere.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    let mut f = options.open(path)?;
    #[cfg(unix)]
    {
        // A umask can only take bits away: set them as meant (0644 under umask 077 stays
        // readable by the clients that must trust it).
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_ca_is_loaded_back_and_hides_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let made = Ca::create(dir.path(), false).unwrap();
        let loaded = Ca::load_dir(dir.path()).unwrap();
        assert_eq!(made.fingerprint(), loaded.fingerprint());
        assert_eq!(made.fingerprint().len(), 32 * 3 - 1);
        let shown = format!("{loaded:?}");
        assert!(
            shown.contains("[redacted]") && !shown.contains("PRIVATE"),
            "{shown}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "the key is its owner's only");
        }
        let again = Ca::create(dir.path(), false).unwrap_err();
        assert!(again.to_string().contains("--force"), "{again}");
        let replaced = Ca::create(dir.path(), true).unwrap();
        assert_ne!(replaced.fingerprint(), made.fingerprint());
    }

    #[test]
    fn leaves_verify_against_the_ca_for_their_host_only() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls_pki_types::{ServerName, UnixTime};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create(dir.path(), false).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(ca.der().to_vec())).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let verify = |leaf: &Leaf, name: &str| {
            verifier.verify_server_cert(
                &leaf.chain[0],
                &leaf.chain[1..],
                &ServerName::try_from(name.to_owned()).unwrap(),
                &[],
                UnixTime::now(),
            )
        };
        for host in ["api.openai.com", "127.0.0.1"] {
            let leaf = ca.leaf(host, Duration::from_secs(24 * 3600)).unwrap();
            verify(&leaf, host).unwrap_or_else(|e| panic!("{host}: {e}"));
            assert!(
                verify(&leaf, "api.stripe.com").is_err(),
                "{host}'s leaf is for {host} only"
            );
        }
        let other = tempfile::tempdir().unwrap();
        let stranger = Ca::create(other.path(), false).unwrap();
        let leaf = stranger
            .leaf("api.openai.com", Duration::from_secs(60))
            .unwrap();
        assert!(
            verify(&leaf, "api.openai.com").is_err(),
            "another CA's leaf is refused"
        );
    }

    #[test]
    fn a_missing_or_broken_ca_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let e = Ca::load_dir(dir.path()).unwrap_err();
        assert!(e.to_string().contains("tollgate ca init"), "{e}");
        std::fs::write(dir.path().join(CERT_FILE), "not pem").unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "not pem").unwrap();
        let e = Ca::load_dir(dir.path()).unwrap_err();
        assert!(e.to_string().contains(KEY_FILE), "{e}");
        assert!(
            !e.to_string().contains("not pem"),
            "no file content in errors: {e}"
        );
    }
}
