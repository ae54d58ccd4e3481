//! Leaf certificates on demand: one per host, signed by the local CA, made on tokio's
//! blocking pool (a key pair and a signature, some 50 µs of CPU: never on a worker that
//! serves established connections), cached in a bounded cache the workers share, and
//! made once when many handshakes for a new host arrive together. Each cached entry is a
//! ready TLS server configuration offering ALPN `h2` and `http/1.1`.

use super::ca::{Ca, CaError};
use prometheus_client::metrics::counter::Counter;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::Duration;

/// How long a leaf is valid. Short, so a leaf that leaks is soon worthless; a leaf is
/// made again long before it ends (see `REMADE_AFTER`).
pub const LEAF_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a cached leaf is served before a new one is made for the next handshake.
const REMADE_AFTER: Duration = Duration::from_secs(24 * 3600);

pub struct Leaves {
    ca: Arc<Ca>,
    configs: moka::future::Cache<Box<str>, Arc<ServerConfig>>,
    made: Counter,
}

impl Leaves {
    /// At most `capacity` hosts' leaves are kept (the least used go first); each leaf
    /// made is counted in `made`.
    pub fn new(ca: Arc<Ca>, capacity: u64, made: Counter) -> Arc<Self> {
        Arc::new(Self {
            ca,
            configs: moka::future::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(REMADE_AFTER)
                .build(),
            made,
        })
    }

    /// How many leaves were made (not served from the cache) so far.
    pub fn made(&self) -> u64 {
        self.made.get()
    }

    /// The TLS server configuration for `host` (lower-case DNS name or IP address).
    pub async fn config(self: &Arc<Self>, host: &str) -> Result<Arc<ServerConfig>, Arc<CaError>> {
        let me = self.clone();
        let owned: Box<str> = host.into();
        let name = host.to_owned();
        self.configs
            .try_get_with(owned.clone(), async move {
                let made = tokio::task::spawn_blocking(move || me.make(&owned))
                    .await
                    .map_err(|e| CaError::Leaf {
                        host: name,
                        why: format!("the signing task failed: {e}"),
                    })?;
                made.map(Arc::new)
            })
            .await
    }

    fn make(&self, host: &str) -> Result<ServerConfig, CaError> {
        let leaf = self.ca.leaf(host, LEAF_VALIDITY)?;
        let fail = |why: String| CaError::Leaf {
            host: host.into(),
            why,
        };
        let provider = rustls::crypto::ring::default_provider();
        let key = provider
            .key_provider
            .load_private_key(leaf.key)
            .map_err(|e| fail(e.to_string()))?;
        let certified = Arc::new(CertifiedKey::new(leaf.chain, key));
        let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Fixed(certified)));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        self.made.inc();
        Ok(config)
    }
}

/// The one certificate of a host's configuration.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client that trusts `ca` handshakes with a server whose configuration `leaves`
    /// chose by the client's SNI; returns the protocol ALPN settled on.
    async fn handshake(leaves: &Arc<Leaves>, ca: &Ca, host: &str) -> Option<Vec<u8>> {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let leaves = leaves.clone();
        let server = tokio::spawn(async move {
            let start = tokio_rustls::LazyConfigAcceptor::new(
                rustls::server::Acceptor::default(),
                server_io,
            )
            .await
            .unwrap();
            let sni = start.client_hello().server_name().unwrap().to_owned();
            let config = leaves.config(&sni).await.unwrap();
            let mut tls = start.into_stream(config).await.unwrap();
            let mut buf = [0u8; 4];
            tls.read_exact(&mut buf).await.unwrap();
            tls.write_all(&buf).await.unwrap();
            tls.flush().await.unwrap();
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(ca.der().to_vec())).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from(host.to_owned()).unwrap();
        let mut tls = connector.connect(name, client_io).await.unwrap();
        tls.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tls.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        server.await.unwrap();
        tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
    }

    #[tokio::test]
    async fn clients_that_trust_the_ca_accept_a_leaf_per_host_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Arc::new(Ca::create(dir.path(), false).unwrap());
        let leaves = Leaves::new(ca.clone(), 100, Counter::default());
        let alpn = handshake(&leaves, &ca, "api.openai.com").await;
        assert_eq!(
            alpn.as_deref(),
            Some(&b"h2"[..]),
            "h2 offered to the client"
        );
        handshake(&leaves, &ca, "api.openai.com").await;
        assert_eq!(
            leaves.made(),
            1,
            "the second handshake used the cached leaf"
        );
        handshake(&leaves, &ca, "api.stripe.com").await;
        assert_eq!(leaves.made(), 2, "a leaf of its own per host");
    }

    #[tokio::test]
    async fn a_storm_of_handshakes_to_a_new_host_makes_one_leaf() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Arc::new(Ca::create(dir.path(), false).unwrap());
        let leaves = Leaves::new(ca.clone(), 100, Counter::default());
        let all = (0..20).map(|_| {
            let (leaves, ca) = (leaves.clone(), ca.clone());
            tokio::spawn(async move { handshake(&leaves, &ca, "api.github.com").await })
        });
        for h in all.collect::<Vec<_>>() {
            h.await.unwrap();
        }
        assert_eq!(leaves.made(), 1);
    }
}
