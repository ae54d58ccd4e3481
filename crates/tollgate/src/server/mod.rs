//! The gateway's life: start (listeners, workers, admin, reload watcher), graceful
//! shutdown and drain. The data plane is `--threads` workers ([`worker`]), each a
//! single-threaded runtime on its own thread with its own listener socket
//! ([`listeners`]); the admin API, the reload watcher and the drain run on the runtime
//! that started the gateway.

mod connection;
mod decrypted;
pub mod listeners;
mod quick_ack;
mod watched_io;
mod worker;

use crate::admin;
use crate::config::{Config, ConfigErrors, ConfigFiles};
use crate::egress::{Egress, Listener};
use crate::metrics::Metrics;
use crate::policy::Engine;
use crate::policy::store::Store;
use crate::reload;
use crate::state::{Overrides, Runtime, Shared, Worker};
use crate::upstream::UpstreamClient;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How to start a gateway in-process.
#[derive(Debug, Default)]
pub struct StartOptions {
    /// Config files (one, several, or directories of them); `None` runs the built-in
    /// defaults (or `config`).
    pub config_files: Option<ConfigFiles>,
    /// A config given directly (tests); used when `config_files` is `None`.
    pub config: Option<Config>,
    pub overrides: Overrides,
    /// Watch the config file for changes and reload.
    pub watch: bool,
    /// Data-plane workers, each a thread of its own (default 1; `tollgate run` defaults
    /// to the available cores).
    pub workers: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error("upstream TLS setup: {0}")]
    Tls(String),
    #[error("store: {0}")]
    Store(String),
    #[error("cannot open the access log: {0}")]
    AccessLog(std::io::Error),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start a worker thread: {0}")]
    Worker(std::io::Error),
}

/// A running gateway: proxy workers, admin listener, reload watcher, observer. It runs
/// until shut down, or until the runtime that started it ends (which stops the workers).
pub struct Gateway {
    pub proxy_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    shared: Arc<Shared>,
    done: JoinHandle<()>,
}

/// Stops accepting and cuts every connection when dropped: held by the task that waits
/// for shutdown, so the workers' threads end with the runtime that started the gateway
/// (as tasks on that runtime would).
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.cancel();
        self.0.cut.cancel();
    }
}

impl Gateway {
    pub async fn start(opts: StartOptions) -> Result<Gateway, StartError> {
        let stamp = opts.config_files.as_ref().and_then(ConfigFiles::stamp);
        let mut config = match &opts.config_files {
            Some(files) => files.load(false)?.0,
            None => opts.config.unwrap_or_default(),
        };
        opts.overrides.apply(&mut config);
        let workers = opts.workers.unwrap_or(1).max(1);
        let metrics = Metrics::default();
        crate::policy::register_metrics(&metrics);
        let proxy_listeners =
            listeners::bind(config.listen.address, workers).map_err(|source| StartError::Bind {
                what: "proxy",
                addr: config.listen.address,
                source,
            })?;
        let admin_listener = TcpListener::bind(config.admin.address)
            .await
            .map_err(|source| StartError::Bind {
                what: "admin",
                addr: config.admin.address,
                source,
            })?;
        let proxy_addr = proxy_listeners[0]
            .local_addr()
            .expect("bound listener has an address");
        let admin_addr = admin_listener
            .local_addr()
            .expect("bound listener has an address");
        if config.admin.token.is_none() && !admin_addr.ip().is_loopback() {
            tracing::warn!(
                %admin_addr,
                "the admin listener is not on a loopback address and has no admin.token: anyone who reaches it can read the config and reload it"
            );
        }
        // The connector refuses these whatever the target's spelling (egress.rs).
        let own = vec![(proxy_addr, Listener::Proxy), (admin_addr, Listener::Admin)];
        let clients = UpstreamClient::for_workers(
            &config.upstream,
            &Egress::new(&config.egress, &own),
            &metrics,
            workers,
        )
        .map_err(StartError::Tls)?;
        for w in config.policies.warnings() {
            tracing::warn!("{w}");
        }
        let store: Arc<dyn Store> =
            crate::policy::store::build(&config.store, &metrics).map_err(StartError::Store)?;
        let engine = Engine::build(&config.policies, None, &store, &metrics);
        let runtime = Runtime {
            intercept: crate::intercept::Interceptor::build(&config.intercept, None, &metrics),
            diag: Arc::new(crate::diagnosis::Plan::new(&config.diagnosis_given())),
            config: Arc::new(config),
            client: clients[0].clone(),
            engine: Arc::new(engine),
        };
        let shared = Arc::new(
            Shared::new(
                runtime,
                clients,
                opts.config_files.clone(),
                opts.overrides,
                metrics,
                own,
                store,
            )
            .map_err(StartError::AccessLog)?,
        );

        let stop_on_drop = StopOnDrop(shared.clone());
        let mut exits = Vec::with_capacity(workers);
        for (index, listener) in proxy_listeners.into_iter().enumerate() {
            let w = Arc::new(Worker {
                shared: shared.clone(),
                index,
                serve_decrypted: decrypted::spawn,
            });
            exits.push(worker::spawn(w, listener).map_err(StartError::Worker)?);
        }
        let admin_task = tokio::spawn(admin::serve(admin_listener, shared.clone()));
        if opts.watch
            && let Some(files) = opts.config_files
        {
            tokio::spawn(reload::watch(shared.clone(), files, stamp));
        }
        let s = shared.clone();
        let done = tokio::spawn(async move {
            let _stop = stop_on_drop;
            s.stop.cancelled().await;
            drain(&s).await;
            for exited in exits {
                let _ = exited.await;
            }
            s.diagnostics.finish().await;
            admin_task.abort();
        });
        tracing::info!(%proxy_addr, %admin_addr, workers, "tollgate listening");
        Ok(Gateway {
            proxy_addr,
            admin_addr,
            shared,
            done,
        })
    }

    /// Starts graceful shutdown: readiness goes 503, listeners close, open connections
    /// finish their in-flight requests (new ones get 503 `shutting_down`).
    pub fn shutdown(&self) {
        self.shared.start_draining();
    }

    /// Waits until shutdown has finished (all connections closed or the drain deadline passed).
    pub async fn wait(self) {
        let _ = self.done.await;
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// How long requests told to give up at the drain deadline get to send their 503 before
/// what is left is cut.
const GIVE_UP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits for connections and tunnels to finish, up to the drain deadline; then requests
/// still queued answer 503 `shutting_down`, and what is left after a moment is cut.
async fn drain(shared: &Arc<Shared>) {
    shared.tasks.close();
    let deadline = shared.runtime.load().config.shutdown.drain_timeout.get();
    tracing::info!(open = shared.tasks.len(), ?deadline, "draining");
    if tokio::time::timeout(deadline, shared.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = shared.tasks.len(),
            "drain deadline passed; queued requests answered 503, cutting what is left"
        );
        shared.give_up.cancel();
        let _ = tokio::time::timeout(GIVE_UP_GRACE, shared.tasks.wait()).await;
        shared.cut.cancel();
        shared.tasks.wait().await;
    }
    tracing::info!("shutdown complete");
}
