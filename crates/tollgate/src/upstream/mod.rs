//! The upstream side: a pooled HTTP client (HTTP/1.1 keep-alive, HTTP/2 by ALPN) over
//! the connector, and the mapping of its failures onto [`ProxyError`].

mod connector;
pub mod dns;
pub mod tls;

pub use connector::{ConnectError, Connector};

use crate::body::Body;
use crate::config::Upstream;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::error::Error as _;

/// The pooled client to providers. Rebuilt only when the `upstream` section changes on
/// reload; otherwise kept, pool and DNS cache included.
pub struct UpstreamClient {
    client: Client<Connector, Body>,
    pub connector: Connector,
    pub settings: Upstream,
}

impl UpstreamClient {
    pub fn new(settings: &Upstream, metrics: Metrics) -> Result<Self, String> {
        let tls = tls::client_configs(settings.extra_ca_file.as_deref())?;
        let connector = Connector::new(
            dns::Resolver::new(settings.dns_ttl),
            settings.connect_timeout,
            tls,
            settings.insecure_skip_verify.clone(),
            metrics,
        );
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(settings.pool_idle_timeout)
            .pool_max_idle_per_host(settings.pool_max_idle_per_host)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            // The pipeline sets Host itself from the target (precomputed).
            .set_host(false)
            .build(connector.clone());
        Ok(Self {
            client,
            connector,
            settings: settings.clone(),
        })
    }

    /// Sends a request and waits for the response head within `response_timeout`.
    pub async fn send(
        &self,
        req: Request<Body>,
        target: &str,
    ) -> Result<Response<Incoming>, ProxyError> {
        let limit = self.settings.response_timeout;
        match tokio::time::timeout(limit, self.client.request(req)).await {
            Err(_) => Err(ProxyError::UpstreamTimeout {
                target: target.to_owned(),
                stage: "respond",
                limit,
            }),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(classify(&e, target)),
        }
    }
}

/// Maps a client error to the error a user can act on, looking through the source chain
/// for the connector's typed error.
fn classify(err: &hyper_util::client::legacy::Error, target: &str) -> ProxyError {
    let mut source = err.source();
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return ProxyError::from(c);
        }
        source = s.source();
    }
    let detail = match err.source() {
        Some(s) => s.to_string(),
        None => err.to_string(),
    };
    if err.is_connect() || reset_before_response(err) {
        ProxyError::Connect {
            target: target.to_owned(),
            detail,
        }
    } else {
        ProxyError::Upstream(format!("`{target}`: {detail}"))
    }
}

impl From<&ConnectError> for ProxyError {
    fn from(c: &ConnectError) -> Self {
        match c {
            ConnectError::Dns { host, detail } => ProxyError::Dns {
                host: host.clone(),
                detail: detail.clone(),
            },
            ConnectError::Refused { target, detail } => ProxyError::Connect {
                target: target.clone(),
                detail: detail.clone(),
            },
            ConnectError::Tls { target, detail } => ProxyError::Tls {
                target: target.clone(),
                detail: detail.clone(),
            },
            ConnectError::Timeout { target, limit } => ProxyError::UpstreamTimeout {
                target: target.clone(),
                stage: "connect",
                limit: *limit,
            },
            ConnectError::BadUri(u) => ProxyError::BadTarget(format!("bad upstream URI `{u}`")),
        }
    }
}

/// The connection closed or was reset before a response head arrived.
fn reset_before_response(err: &hyper_util::client::legacy::Error) -> bool {
    let mut source = err.source();
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = s.source();
    }
    false
}
