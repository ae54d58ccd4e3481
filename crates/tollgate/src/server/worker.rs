//! A data-plane worker: one OS thread running a single-threaded tokio runtime, which
//! accepts from its own listener socket and serves what it accepted start to end. A
//! connection's requests, their upstream connections (from the worker's own pool), their
//! timers and their events stay on this thread, so workers share nothing that a request
//! writes. One type, for one worker and for many.

use super::connection::serve_connection;
use crate::conns::Swept;
use crate::metrics::{KindLabels, WorkerLabels};
use crate::state::Worker;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Starts worker `worker.index` on a thread of its own, accepting from `listener`. The
/// receiver is told when the thread has finished (its runtime and every task on it gone).
pub fn spawn(
    worker: Arc<Worker>,
    listener: std::net::TcpListener,
) -> std::io::Result<oneshot::Receiver<()>> {
    let (exited, on_exit) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("tollgate-worker-{}", worker.index))
        .spawn(move || {
            crate::metrics::sharded::record_as(worker.index);
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(run(worker, listener)),
                Err(e) => tracing::error!("worker {} cannot start its runtime: {e}", worker.index),
            }
            let _ = exited.send(());
        })?;
    Ok(on_exit)
}

/// Accepts until shutdown starts, then stays up while connections drain (they live on
/// this runtime) until every connection has ended or the drain deadline cut them.
async fn run(worker: Arc<Worker>, listener: std::net::TcpListener) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("worker {} cannot use its listener: {e}", worker.index);
            return;
        }
    };
    let shared = worker.shared.clone();
    tokio::spawn(sweep_quiet_connections(worker.clone()));
    accept_loop(listener, &worker).await;
    // Waiting for every worker's connections is a superset of this one's, and the tracker
    // only completes once shutdown has closed it.
    tokio::select! {
        _ = shared.tasks.wait() => {}
        _ = shared.cut.cancelled() => {}
    }
}

async fn accept_loop(listener: TcpListener, worker: &Arc<Worker>) {
    let shared = &worker.shared;
    // Cloned out: the family's guard would hold its lock for as long as it lives.
    let accepted = shared
        .metrics
        .worker_connections
        .get_or_create(&WorkerLabels {
            worker: worker.index.to_string(),
        })
        .clone();
    loop {
        let next = tokio::select! {
            r = listener.accept() => r,
            _ = shared.stop.cancelled() => return,
        };
        match next {
            Ok((stream, _peer)) => {
                accepted.inc();
                shared.tasks.spawn(serve_connection(stream, worker.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Enforces `listen.header_read_timeout` and `listen.send_timeout` on the worker's
/// connections, a quarter of the shorter at a time (read from the current config, so a
/// reload applies at the next round).
async fn sweep_quiet_connections(worker: Arc<Worker>) {
    let (shared, local) = (&worker.shared, worker.local());
    loop {
        let listen = local.runtime.load().config.listen.clone();
        let (limit, send_timeout) = (listen.header_read_timeout, listen.send_timeout);
        let step = (limit.min(send_timeout) / 4).max(Duration::from_millis(1));
        tokio::select! {
            _ = tokio::time::sleep(step) => {}
            _ = shared.stop.cancelled() => return,
        }
        let swept = local
            .conns
            .sweep(limit, send_timeout, tokio::time::Instant::now());
        let kind = |kind| {
            shared
                .metrics
                .stalls
                .get_or_create(&KindLabels { kind })
                .clone()
        };
        if swept.stalled > 0 {
            kind("connection").inc_by(swept.stalled as u64);
        }
        if swept.streams > 0 {
            kind("stream").inc_by(swept.streams as u64);
        }
        if swept != Swept::default() {
            tracing::debug!(
                ?swept,
                ?limit,
                ?send_timeout,
                "connections closed or released"
            );
        }
    }
}
