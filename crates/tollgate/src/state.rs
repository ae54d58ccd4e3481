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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a request runs on, start to end: taken once per request, replaced whole on reload.
/// Each worker holds its own (see [`Local`]); aligned so that its reference count, bumped
/// per request, shares a cache line with nothing another worker writes.
#[repr(align(128))]
pub struct Runtime {
    pub config: Arc<Config>,
    /// This worker's upstream client (the canonical runtime holds worker 0's).
    pub client: Arc<UpstreamClient>,
    /// The config's policies compiled into chains.
    pub engine: Arc<crate::policy::Engine>,
    /// What diagnosis does for each request under this config.
    pub diag: Arc<crate::diagnosis::Plan>,
    /// Leaves and refusals of HTTPS interception, when a host is intercepted.
    pub intercept: Option<Arc<crate::intercept::Interceptor>>,
}

impl Runtime {
    /// [`Runtime::for_worker`] for each worker (`clients[i]` is worker `i`'s), each copy
    /// made on a thread of its own: the allocator keeps a heap per thread, so no two
    /// workers' copies (the reference counts their requests write) are made in one page,
    /// nor share a cache line. Made one after the other on this thread, their small
    /// allocations could lie side by side. A thread that cannot be started leaves its
    /// copy to this one.
    pub fn for_workers(&self, clients: &[Arc<UpstreamClient>]) -> Vec<Runtime> {
        std::thread::scope(|s| {
            let made: Vec<_> = clients
                .iter()
                .map(|c| {
                    let spawned = std::thread::Builder::new()
                        .name("tollgate-copy".into())
                        .spawn_scoped(s, || self.for_worker(c.clone()));
                    (c, spawned.ok())
                })
                .collect();
            made.into_iter()
                .map(|(c, thread)| match thread.map(|t| t.join()) {
                    Some(Ok(copy)) => copy,
                    Some(Err(panic)) => std::panic::resume_unwind(panic),
                    None => self.for_worker(c.clone()),
                })
                .collect()
        })
    }

    /// This runtime as worker `client`'s: its own upstream client, its own copy of the
    /// route targets, of the policies' chains and of the diagnosis plan's templates (what
    /// requests clone: a shared reference count would be written by every worker); config
    /// sections and remedy state shared.
    pub fn for_worker(&self, client: Arc<UpstreamClient>) -> Runtime {
        let mut config = Config::clone(&self.config);
        config.routes = config.routes.detached();
        let mut diag = crate::diagnosis::Plan::clone(&self.diag);
        diag.templates = diag.templates.iter().map(|t| Arc::from(&**t)).collect();
        Runtime {
            config: Arc::new(config),
            client,
            engine: Arc::new(self.engine.for_worker()),
            diag: Arc::new(diag),
            intercept: self.intercept.clone(),
        }
    }
}

/// What one data-plane worker keeps to itself: its requests write nothing that another
/// worker's requests touch. Aligned to its own cache lines for the same reason.
#[repr(align(128))]
pub struct Local {
    /// This worker's runtime snapshot (own upstream client, own route targets).
    pub runtime: ArcSwap<Runtime>,
    /// Its open client connections: drain signal and read-deadline sweep.
    pub conns: Conns,
    /// Its queue of request events to the observer thread.
    pub observer: Observer,
    pub ids: RequestIds,
    /// Its copy of the `Via` value (a shared one would be a shared reference count).
    pub via: http::HeaderValue,
    /// Its child of [`Shared::give_up`], shared with matched requests by an `Arc` (a
    /// clone of the shared token would be a reference count every worker writes; a
    /// clone of a token, even of the worker's own, locks its node to count handles).
    pub give_up: Arc<CancellationToken>,
    /// Whether a dashboard watches the live calls (then each request keeps its path).
    pub watching: crate::diagnosis::Watching,
}

/// A worker's handle, cloned per request: its reference count is touched by that worker's
/// thread alone (aligned, so no other worker's handle shares its line).
#[repr(align(128))]
pub struct Worker {
    pub shared: Arc<Shared>,
    pub index: usize,
    /// How this worker serves a decrypted CONNECT tunnel as a connection of its own: set
    /// by the server, which serves connections; the request path, below it, hands the
    /// tunnel over.
    pub serve_decrypted: fn(Arc<Worker>, crate::intercept::Decrypt),
}

impl Worker {
    #[inline]
    pub fn local(&self) -> &Local {
        &self.shared.locals[self.index]
    }
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
    /// The canonical runtime: what `/config` shows and a reload compares against. Requests
    /// run on their worker's copy ([`Local::runtime`]).
    pub runtime: ArcSwap<Runtime>,
    /// One per data-plane worker.
    pub locals: Box<[Local]>,
    pub config_files: Option<crate::config::ConfigFiles>,
    pub overrides: Overrides,
    pub metrics: Metrics,
    draining: AtomicBool,
    /// Cancelled when shutdown starts: stop accepting, drain connections.
    pub stop: CancellationToken,
    /// Cancelled at the drain deadline: requests still waiting in a queue leave it with
    /// 503 `shutting_down` (they were never sent).
    pub give_up: CancellationToken,
    /// Cancelled at the drain deadline, a moment after `give_up`: cut what is still open.
    pub cut: CancellationToken,
    /// Client connections and CONNECT tunnels, waited for on shutdown.
    pub tasks: TaskTracker,
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
    /// What the dashboard keeps (live calls, the last minute, sessions).
    pub ui: Arc<crate::ui::Dashboard>,
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
    /// `clients`: one upstream client per worker (at least one); `runtime` is the
    /// canonical runtime, made with the first.
    pub fn new(
        runtime: Runtime,
        clients: Vec<Arc<UpstreamClient>>,
        config_files: Option<crate::config::ConfigFiles>,
        overrides: Overrides,
        metrics: Metrics,
        own_listeners: Vec<(SocketAddr, Listener)>,
        store: Arc<dyn crate::policy::store::Store>,
    ) -> std::io::Result<Self> {
        let watching = crate::diagnosis::Watching::default();
        let diagnostics = Arc::new(crate::diagnosis::worker::Diagnostics::start(
            &runtime.config.diagnosis,
            &runtime.config.upstream,
            &metrics,
            watching.clone(),
            clients.len(),
        )?);
        let ui = Arc::new(crate::ui::Dashboard::new(watching, &metrics, clients.len()));
        let observers = Observer::start(
            metrics.clone(),
            &runtime.config.log,
            runtime.config.metrics.max_hosts.usize(),
            (diagnostics.clone(), ui.clone()),
            clients.len(),
        )?;
        let via = Via::default();
        let ids = RequestIds::prefix();
        let give_up = CancellationToken::new();
        let locals = runtime
            .for_workers(&clients)
            .into_iter()
            .zip(observers)
            .enumerate()
            .map(|(i, (copy, observer))| Local {
                runtime: ArcSwap::from_pointee(copy),
                conns: Conns::default(),
                observer,
                ids: RequestIds::new(ids, i),
                via: http::HeaderValue::from_bytes(via.value.as_bytes())
                    .unwrap_or_else(|_| via.value.clone()),
                give_up: Arc::new(give_up.child_token()),
                watching: ui.live.watching().clone(),
            })
            .collect();
        Ok(Self {
            runtime: ArcSwap::from_pointee(runtime),
            locals,
            config_files,
            overrides,
            metrics,
            draining: AtomicBool::new(false),
            stop: CancellationToken::new(),
            give_up,
            cut: CancellationToken::new(),
            tasks: TaskTracker::new(),
            reload_lock: tokio::sync::Mutex::new(()),
            own_listeners,
            via,
            store,
            diagnostics,
            ui,
        })
    }

    /// The egress check a client built for `config` uses.
    pub fn egress(&self, config: &Config) -> Egress {
        Egress::new(&config.egress, &self.own_listeners)
    }

    #[inline]
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.stop.cancel();
        for l in &self.locals {
            l.conns.drain_all();
        }
    }

    /// Installs a new canonical runtime and each worker's copy of it, with that worker's
    /// client (`clients[i]`, one per worker).
    pub fn install(&self, runtime: Runtime, clients: &[Arc<UpstreamClient>]) {
        for (local, copy) in self.locals.iter().zip(runtime.for_workers(clients)) {
            local.runtime.store(Arc::new(copy));
        }
        self.runtime.store(Arc::new(runtime));
    }

    /// Each worker's current upstream client.
    pub fn clients(&self) -> Vec<Arc<UpstreamClient>> {
        self.locals
            .iter()
            .map(|l| l.runtime.load().client.clone())
            .collect()
    }
}
