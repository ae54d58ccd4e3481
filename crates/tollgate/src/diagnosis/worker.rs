//! The process-wide side of diagnosis, started once with the gateway: the discovery and
//! remedy-statistics aggregates (filled by the observer thread), and the diagnosis thread,
//! which writes HAR entries to their sinks and sends HAR batches and spans out.

use super::discovery::Discovered;
use super::har::HarWriter;
use super::har::collector::{self, Pending, Poster};
use super::remedy_stats::Parts;
use super::trace::Finished;
use super::trace::export::Exporter;
use crate::diagnosis::aggregated::AggregateStats;
use crate::metrics::{Metrics, SinkLabels};
use crate::upstream::{Connector, dns, tls};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the diagnosis thread drains the HAR queue (polling, like the observer: no
/// wake-up per request).
const DRAIN_INTERVAL: Duration = Duration::from_millis(20);

pub struct Diagnostics {
    pub har: Option<HarWriter>,
    pub spans: Option<Arc<Pending<Finished>>>,
    pub endpoints: Option<Arc<Mutex<Discovered>>>,
    pub endpoint_metrics: bool,
    /// Counted in parts: each worker's and the observer's ([`Parts`]).
    pub remedy_stats: Parts,
    /// Aggregated endpoints' calls (`GET /discover`, `aggregated`).
    pub aggregated: Arc<Mutex<AggregateStats>>,
    /// The last HAR entries, for the dashboard.
    pub recent_har: Arc<super::har::recent::Recent>,
    /// Stops the diagnosis thread (and its senders) at [`Diagnostics::finish`] or when
    /// the gateway goes.
    stop: Option<CancellationToken>,
    /// Told when the diagnosis thread has written what was queued and closed its files.
    closed: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

/// How long [`Diagnostics::finish`] waits for the last entries and the files to close.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);

impl Diagnostics {
    pub fn start(
        d: &super::settings::Diagnosis,
        upstream: &crate::upstream::Settings,
        metrics: &Metrics,
        watching: super::Watching,
        workers: usize,
    ) -> std::io::Result<Self> {
        let endpoints = d
            .discovery
            .enabled
            .then(|| Arc::new(Mutex::new(Discovered::new(d.discovery.clone()))));
        let mut this = Self {
            har: None,
            spans: None,
            endpoints,
            endpoint_metrics: d.discovery.enabled && d.discovery.metrics,
            remedy_stats: Parts::new(workers),
            aggregated: Arc::default(),
            recent_har: Arc::new(super::har::recent::Recent::new(watching)),
            stop: None,
            closed: Mutex::new(None),
        };
        let traces = d.traces.export.clone().filter(|_| d.traces.enabled);
        if !d.har.enabled && traces.is_none() {
            return Ok(this);
        }
        let connector = connector(upstream).map_err(std::io::Error::other)?;
        let (har, mut sinks) = match d.har.enabled {
            true => {
                let (w, s) = super::har::writer_channel(&d.har, metrics, this.recent_har.clone())?;
                (Some(w), Some(s))
            }
            false => (None, None),
        };
        this.har = har;
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        if let (Some(c), Some(s)) = (&d.har.collector, &sinks)
            && let Some(pending) = s.collector.clone()
        {
            let poster = Poster::new(c, connector.clone(), "application/json")
                .map_err(std::io::Error::other)?;
            let sent = metrics
                .har_entries
                .get_or_create(&SinkLabels { sink: "collector" })
                .clone();
            let (batching, stop) = (c.batching(), stop.clone());
            tasks.push(Box::pin(async move {
                collector::run(pending, poster, batching, sent, stop, "HAR collector").await
            })
                as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>);
        }
        if let Some(t) = traces {
            let pending = Arc::new(Pending::new(
                d.traces.queue_capacity,
                metrics.spans_dropped.clone(),
            ));
            this.spans = Some(pending.clone());
            let (sent, stop) = (metrics.spans_exported.clone(), stop.clone());
            let extra_ca = upstream.extra_ca_file.clone();
            // Made on the diagnosis thread: gRPC's channel belongs to its runtime.
            tasks.push(Box::pin(async move {
                match Exporter::new(&t, connector, extra_ca.as_deref()) {
                    Ok(exporter) => {
                        collector::run(pending, exporter, t.batching, sent, stop, "OTLP export")
                            .await
                    }
                    Err(e) => tracing::error!("diagnosis.traces: {e}; spans are not exported"),
                }
            }));
        }
        let thread_stop = stop.clone();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("tollgate-diagnosis".into())
            .spawn(move || {
                background_priority();
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("diagnosis thread: {e}");
                        return;
                    }
                };
                rt.block_on(async move {
                    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
                    loop {
                        let d = sinks.as_mut().map(|s| s.drain());
                        let (open, more) = d.map_or((true, false), |d| (d.open, d.more));
                        if !open || thread_stop.is_cancelled() {
                            // What is queued at the stop gets written, batch by batch.
                            while let Some(s) = sinks.as_mut()
                                && s.drain().more
                            {}
                            thread_stop.cancel();
                            break;
                        }
                        if more {
                            // A full batch: the next one at once, letting the senders run.
                            tokio::task::yield_now().await;
                            continue;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(DRAIN_INTERVAL) => {}
                            _ = thread_stop.cancelled() => {}
                        }
                    }
                    // The file being written becomes a `.har` now, not at process exit.
                    drop(sinks);
                    let _ = closed_tx.send(());
                    // What is buffered gets one last chance to leave.
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        futures_util::future::join_all(handles),
                    )
                    .await;
                });
            })?;
        this.stop = Some(stop);
        this.closed = Mutex::new(Some(closed_rx));
        Ok(this)
    }

    /// At the end of shutdown, once no request is left: writes what is queued and closes
    /// the HAR file being written (it becomes a `.har`), waiting at most a few seconds.
    pub async fn finish(&self) {
        if let Some(stop) = &self.stop {
            stop.cancel();
        }
        let closed = self.closed.lock().ok().and_then(|mut c| c.take());
        if let Some(closed) = closed {
            let _ = tokio::time::timeout(FINISH_TIMEOUT, closed).await;
        }
    }
}

impl Drop for Diagnostics {
    fn drop(&mut self) {
        if let Some(stop) = &self.stop {
            stop.cancel();
        }
    }
}

/// A connector for the sinks: the upstream TLS settings, no egress rules of the proxied
/// traffic (the operator named these endpoints).
fn connector(u: &crate::upstream::Settings) -> Result<Connector, String> {
    let tls = tls::client_configs(u.roots, u.extra_ca_file.as_deref())?;
    Ok(Connector::new(
        dns::Resolver::new(u.dns_ttl, &u.dns_servers),
        crate::egress::Egress::new(&crate::egress::EgressRules::default(), &[]),
        u.connect_timeout,
        tls,
        u.insecure_skip_verify.clone(),
        Metrics::default(),
    ))
}

/// Builds the sinks' clients without starting them (for `tollgate check`).
pub fn check(
    d: &super::settings::Diagnosis,
    upstream: &crate::upstream::Settings,
) -> Result<(), String> {
    if !d.har.enabled && !d.traces.enabled {
        return Ok(());
    }
    if d.har.enabled
        && let Some(f) = &d.har.file
    {
        super::har::file::check_dir(&f.dir).map_err(|e| {
            format!(
                "diagnosis.har.file.dir: cannot write HAR files in {}: {e}; name a directory tollgate can create and write",
                f.dir.display()
            )
        })?;
    }
    let c = connector(upstream)?;
    if let Some(s) = &d.har.collector {
        Poster::new(s, c.clone(), "application/json")?;
    }
    match &d.traces.export {
        Some(t) if d.traces.enabled => super::trace::export::check(t),
        _ => Ok(()),
    }
}

/// Puts the calling thread in Linux's `SCHED_IDLE` class: it runs only when the request
/// threads leave the core free, so encoding and writing HAR entries in bursts never
/// delays a request on a shared core. Under saturation the HAR queue then fills and
/// drops (counted), which is the designed overflow. Elsewhere a no-op.
fn background_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::*;
        use thread_priority::{ThreadPriority, ThreadSchedulePolicy};
        if let Err(e) = set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        ) {
            tracing::debug!("diagnosis thread stays at normal priority: {e:?}");
        }
    }
}
