//! Shared state of a running gateway: the swappable runtime (config + upstream client)
//! and the process-wide parts that survive reloads.

use crate::config::Config;
use crate::conns::Conns;
use crate::egress::{Egress, Listener};
use crate::metrics::Metrics;
use crate::observe::Observer;
use crate::request_id::RequestIds;
use crate::upstream::UpstreamClient;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a request runs on, start to end: taken once per request, replaced whole on reload.
pub struct Runtime {
    pub config: Arc<Config>,
    pub client: Arc<UpstreamClient>,
    /// The config's policies compiled into chains.
    pub engine: Arc<crate::policy::Engine>,
    /// What diagnosis does for each request under this config.
    pub diag: Arc<crate::diagnosis::Plan>,
}

/// Values from the command line that override the file on every (re)load.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
}

impl Overrides {
    pub fn apply(&self, c: &mut Config) {
        if let Some(a) = self.listen {
            c.listen.address = a;
        }
        if let Some(a) = self.admin {
            c.admin.address = a;
        }
    }
}

pub struct Shared {
    pub runtime: ArcSwap<Runtime>,
    pub config_path: Option<PathBuf>,
    pub overrides: Overrides,
    pub metrics: Metrics,
    pub observer: Observer,
    pub ids: RequestIds,
    draining: AtomicBool,
    /// Cancelled when shutdown starts: stop accepting, drain connections.
    pub stop: CancellationToken,
    /// Cancelled at the drain deadline: cut what is still open.
    pub cut: CancellationToken,
    /// Client connections and CONNECT tunnels, waited for on shutdown.
    pub tasks: TaskTracker,
    /// Open client connections: drain signal and read-deadline sweep.
    pub conns: Conns,
    /// Serialises reloads (never taken by requests).
    pub reload_lock: tokio::sync::Mutex<()>,
    /// The addresses tollgate listens on (fixed until restart).
    pub own_listeners: Vec<(SocketAddr, Listener)>,
    /// This instance's `Via` entry (RFC 9110 §7.6.3): `1.1 tollgate-<random>`.
    pub via: Via,
    /// Remedy state (counters, windows, deadlines); survives reloads.
    pub store: Arc<dyn crate::policy::store::Store>,
    /// HAR writer, span export, discovery and remedy statistics (started once).
    pub diagnostics: Arc<crate::diagnosis::worker::Diagnostics>,
}

/// This instance's pseudonym in `Via`: random per process, so a request that comes back
/// carrying it has looped, while a chain of several tollgates is still allowed.
pub struct Via {
    pub value: http::HeaderValue,
    pseudonym: String,
}

impl Default for Via {
    fn default() -> Self {
        let pseudonym = format!("tollgate-{:08x}", fastrand::u32(..));
        Self {
            value: http::HeaderValue::from_str(&format!("1.1 {pseudonym}"))
                .expect("ASCII header value"),
            pseudonym,
        }
    }
}

impl Via {
    /// Whether any `Via` field line of the request names this instance.
    #[inline]
    pub fn came_back(&self, headers: &http::HeaderMap) -> bool {
        headers.get_all(http::header::VIA).iter().any(|v| {
            v.as_bytes()
                .windows(self.pseudonym.len())
                .any(|w| w == self.pseudonym.as_bytes())
        })
    }
}

impl Shared {
    pub fn new(
        runtime: Runtime,
        config_path: Option<PathBuf>,
        overrides: Overrides,
        metrics: Metrics,
        own_listeners: Vec<(SocketAddr, Listener)>,
        store: Arc<dyn crate::policy::store::Store>,
    ) -> std::io::Result<Self> {
        let diagnostics = Arc::new(crate::diagnosis::worker::Diagnostics::start(
            &runtime.config,
            &metrics,
        )?);
        let observer = Observer::start(
            metrics.clone(),
            &runtime.config.log,
            runtime.config.metrics.max_hosts,
            diagnostics.clone(),
        )?;
        Ok(Self {
            runtime: ArcSwap::from_pointee(runtime),
            config_path,
            overrides,
            metrics,
            observer,
            ids: RequestIds::default(),
            draining: AtomicBool::new(false),
            stop: CancellationToken::new(),
            cut: CancellationToken::new(),
            tasks: TaskTracker::new(),
            conns: Conns::default(),
            reload_lock: tokio::sync::Mutex::new(()),
            own_listeners,
            via: Via::default(),
            store,
            diagnostics,
        })
    }

    /// The egress check a client built for `config` uses.
    pub fn egress(&self, config: &Config) -> Egress {
        Egress::new(config, &self.own_listeners)
    }

    #[inline]
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.stop.cancel();
        self.conns.drain_all();
    }
}
