//! A decrypted CONNECT tunnel served as a connection of its own: once the client's TLS is
//! terminated (crate::intercept::terminate), HTTP/1.1 or HTTP/2 as ALPN settled, by the
//! same code as the listener's connections, registered with the worker's connections
//! (read deadline, drain), each request carrying the tunnel's target. Counted in
//! `tollgate_tunnels` while open.

use super::connection::serve;
use crate::intercept::{Decrypt, terminate};
use crate::state::Worker;
use std::sync::Arc;

/// Serves `d` on `worker`'s runtime, in a task graceful shutdown waits for.
pub fn spawn(worker: Arc<Worker>, d: Decrypt) {
    let shared = worker.shared.clone();
    shared.tasks.spawn(async move {
        let metrics = &worker.shared.metrics;
        metrics.tunnels.inc();
        let limit = worker
            .local()
            .runtime
            .load()
            .config
            .listen
            .header_read_timeout;
        let accepted = terminate::accept(
            d.upgrade,
            &d.target,
            &d.interceptor,
            limit,
            &worker.shared.stop,
            &d.id,
        )
        .await;
        if let Some(tls) = accepted {
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let registration = worker.local().conns.open();
            serve(tls, h2, &registration.conn, &worker, Some(d.target), d.ack).await;
        }
        metrics.tunnels.dec();
    });
}
