//! Request events. As a request ends its worker counts it (`tally.rs`: the request
//! metrics, the dashboard's last minute; `llm.rs`: an LLM call's tokens and cost). Only
//! when the observer thread has more to do with it (the access log, the dashboard's live
//! calls and failures, diagnosis, aggregated endpoints) is its event built and sent
//! through the worker's bounded queue to that thread, which drains every worker's queue every 20 ms. A full
//! queue drops the event and counts it (`tollgate_events_dropped_total`); the request
//! never waits. A queue per worker keeps workers from contending on one queue's
//! counters.

mod llm;
mod tally;

use crate::diagnosis::RequestDiag;
use crate::diagnosis::discovery::metrics::{EndpointMetrics, Sample};
use crate::diagnosis::discovery::{Seen, template};
use crate::diagnosis::worker::Diagnostics;
use crate::metrics::{Metrics, method_label};
use crate::ui::Dashboard;
use crate::ui::live::Call;
use http::{HeaderValue, Method};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub struct Event {
    pub host: Option<Arc<str>>,
    /// Whether the host was validated (the request was forwarded, or failed after its
    /// target was accepted) and may be a metric label.
    pub host_is_label: bool,
    pub method: Method,
    pub status: u16,
    pub error: Option<&'static str>,
    pub total: Duration,
    pub upstream: Option<Duration>,
    /// Filled only when the access log is on.
    pub access: Option<Box<Access>>,
    /// Response body bytes relayed.
    pub response_bytes: u64,
    /// Filled for matched requests and when diagnosis is on.
    pub diag: Option<Box<crate::diagnosis::RequestDiag>>,
    /// The request id, kept when diagnosis needs it.
    pub request_id: Option<HeaderValue>,
    /// What an aggregated endpoint's call did.
    pub aggregate: Option<Box<crate::aggregate::outcome::Outcome>>,
}

/// What the worker reads of a request as it ends, before any event is built.
pub struct Ended<'a> {
    /// The host, when it is a metric label (validated).
    pub host: Option<&'a Arc<str>>,
    pub method: &'a Method,
    pub status: u16,
    pub error: Option<&'static str>,
    /// When it ended.
    pub at: Instant,
    pub total: Duration,
    pub upstream: Option<Duration>,
}

pub struct Access {
    pub request_id: HeaderValue,
    pub path: Box<str>,
    pub policy: Option<std::sync::Arc<str>>,
    pub body_bytes: u64,
    pub completed: bool,
    /// The access log is on (the path may be kept for the dashboard alone).
    pub log: bool,
}

/// A worker's end of the request events: its tally, and its queue to the observer thread.
/// The queue is tokio's bounded channel, which allocates its slots in small blocks as they
/// fill (std's bounded channel allocates all `queue_capacity` slots, megabytes, up front).
pub struct Observer {
    tally: tally::Tally,
    tx: mpsc::Sender<Event>,
    /// Whether a dashboard watches the live calls (then every event goes to the observer).
    watching: crate::diagnosis::Watching,
    /// Where this worker counts its own matched requests' remedy statistics: when
    /// discovery is off (discovery names the endpoint, on the observer thread).
    settle: Option<Settle>,
    /// Its LLM calls' metrics. Its lock is taken by its worker alone.
    llm: std::sync::Mutex<llm::LlmTally>,
}

/// A worker's part of the remedy statistics.
struct Settle {
    diagnostics: Arc<Diagnostics>,
    worker: usize,
}

impl Settle {
    /// Counts a request's remedy statistics in this worker's part and drops its
    /// diagnosis record here, when nothing on the observer thread reads the record: no
    /// trace, no LLM usage for the access log (`keeps`: the request kept its path for
    /// it); the caller has checked that the call did not fail and that no dashboard
    /// watches. The record was built on this thread; dropped on the observer's, its
    /// blocks and reference counts would move between the two cores at every matched
    /// request.
    fn settle(&self, e: &Ended<'_>, diag: &mut Option<Box<RequestDiag>>, keeps: bool) {
        let Some(d) = diag.as_deref() else {
            return;
        };
        if d.trace.is_some() || (d.llm.is_some() && keeps) {
            return;
        }
        if let Some(policy) = &d.policy {
            let (method, host) = (method_label(e.method), e.host.map(|h| &**h));
            // What `plain_endpoint` reads: the template, else the path.
            let (template, path) = match d.template.as_deref().filter(|t| !t.is_empty()) {
                Some(t) => (t, ""),
                None => ("", d.path.as_deref().unwrap_or("/")),
            };
            let parts = [method, host.unwrap_or("-"), template, path];
            let key = |key: &mut String| {
                stats_key(key, method, host, "");
                plain_endpoint(key, d);
            };
            self.diagnostics
                .remedy_stats
                .worker(self.worker)
                .record_keyed(policy, parts, key, e.status, &d.acted);
        }
        *diag = None;
    }
}

impl Observer {
    /// Starts the observer thread and returns one sender per worker (each its own queue
    /// of `log.queue_capacity`). The thread ends when every sender is gone.
    pub fn start(
        metrics: Metrics,
        log: &crate::logging::Log,
        max_hosts: usize,
        diagnostics: (Arc<Diagnostics>, Arc<Dashboard>),
        workers: usize,
    ) -> std::io::Result<Vec<Self>> {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..workers.max(1))
            .map(|_| mpsc::channel(log.queue_capacity.max(1)))
            .unzip();
        let out: Box<dyn Write + Send> = match &log.access_log_file {
            Some(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
            None => Box::new(std::io::stdout()),
        };
        let m = metrics.clone();
        let json = log.json;
        let (d, ui) = &diagnostics;
        let settle = |worker| {
            d.endpoints.is_none().then(|| Settle {
                diagnostics: d.clone(),
                worker,
            })
        };
        let hosts = tally::Hosts::new(max_hosts);
        let models = Arc::new(llm::Models::default());
        let observers = txs
            .into_iter()
            .enumerate()
            .map(|(i, tx)| Self {
                tally: tally::Tally::new(metrics.clone(), hosts.clone(), ui.clone(), i),
                tx,
                watching: ui.live.watching().clone(),
                settle: settle(i),
                llm: std::sync::Mutex::new(llm::LlmTally::new(metrics.clone(), models.clone())),
            })
            .collect();
        std::thread::Builder::new()
            .name("tollgate-observer".into())
            .spawn(move || consume(rxs, m, json, out, diagnostics))?;
        Ok(observers)
    }

    /// Counts a finished request on this worker and settles its diagnosis record here
    /// when it can; whether the observer thread has more to do with it (then its event
    /// goes there: [`Observer::send`]). `keeps` says that the request kept its path (the
    /// access log, a dashboard watching) or an aggregated call's outcome.
    #[inline]
    pub fn ended(&self, e: &Ended<'_>, diag: &mut Option<Box<RequestDiag>>, keeps: bool) -> bool {
        let failed = crate::ui::live::failed(e.status, e.error);
        self.tally.count(e, failed);
        if let Some(d) = diag.as_deref()
            && let Some(meter) = &d.llm
        {
            let mut llm = self.llm.lock().unwrap_or_else(|p| p.into_inner());
            meter.with(|u| llm.record(d.policy.as_ref(), u));
        }
        // The dashboard keeps the last failed calls with their policy and actions, and
        // shows a watched call's: the observer thread needs those records whole.
        let watched = self.watching.any();
        if let Some(s) = &self.settle
            && !failed
            && !watched
        {
            s.settle(e, diag, keeps);
        }
        keeps || diag.is_some() || failed || watched
    }

    /// Sends a request's event to the observer thread; a full queue drops it.
    pub fn send(&self, event: Event) {
        if self.tx.try_send(event).is_err() {
            self.tally.metrics.events_dropped.inc();
        }
    }
}

/// How often the observer drains the queue. It polls instead of being woken per event:
/// a wake-up per request would cost a futex call and a context switch on the request path.
const DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

fn consume(
    mut rxs: Vec<mpsc::Receiver<Event>>,
    metrics: Metrics,
    json: bool,
    out: Box<dyn Write + Send>,
    (diagnostics, ui): (Arc<Diagnostics>, Arc<Dashboard>),
) {
    use mpsc::error::TryRecvError;
    let mut endpoint_metrics = EndpointMetrics::default();
    // The remedy statistics' endpoint key and the endpoint, written here per request and
    // reused.
    let mut key = String::new();
    let mut endpoint = String::new();
    let mut out = std::io::BufWriter::new(out);
    loop {
        let mut open = 0;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for rx in &mut rxs {
            loop {
                match rx.try_recv() {
                    Ok(ev) => {
                        let failed = crate::ui::live::failed(ev.status, ev.error);
                        if let Some(a) = &ev.access
                            && a.log
                        {
                            let _ = write_access(&mut out, &ev, a, json);
                        }
                        endpoint.clear();
                        if let Some(d) = &ev.diag {
                            let state = (&mut endpoint_metrics, &mut key, &mut endpoint);
                            diagnose(&diagnostics, &metrics, state, &ev, d);
                        }
                        ui.live
                            .publish(failed, || live_call(&ev, &endpoint, now_ms));
                        if let Some(o) = &ev.aggregate {
                            o.record_metrics(&metrics, ev.total);
                            diagnostics
                                .aggregated
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .record(o, ev.total);
                        }
                    }
                    Err(TryRecvError::Empty) => {
                        open += 1;
                        break;
                    }
                    Err(TryRecvError::Disconnected) => break,
                }
            }
        }
        ui.live.drained();
        let _ = out.flush();
        if open == 0 {
            return;
        }
        std::thread::sleep(DRAIN_INTERVAL);
    }
}

/// Bound on distinct cached label sets (a worker's request handles, its LLM handles);
/// past it the cache is cleared (the registry keeps the series).
const MAX_CACHED: usize = 10_000;

fn write_access(out: &mut impl Write, ev: &Event, a: &Access, json: bool) -> std::io::Result<()> {
    let host = ev.host.as_deref().unwrap_or("-");
    let id = a.request_id.to_str().unwrap_or("-");
    let total_ms = ev.total.as_secs_f64() * 1e3;
    let upstream_ms = ev.upstream.map(|u| u.as_secs_f64() * 1e3);
    let llm = ev
        .diag
        .as_ref()
        .and_then(|d| d.llm.as_ref())
        .map(|m| m.read().summary(m.api));
    if json {
        let mut line = serde_json::json!({
            "type": "access", "request_id": id, "method": ev.method.as_str(), "host": host,
            "path": &*a.path, "status": ev.status, "error": ev.error, "policy": a.policy.as_deref(),
            "total_ms": total_ms, "upstream_ms": upstream_ms, "body_bytes": a.body_bytes,
            "completed": a.completed,
        });
        if let Some(u) = llm {
            line["llm"] = u;
        }
        writeln!(out, "{line}")
    } else {
        write!(
            out,
            "access id={id} method={} host={host} path={} status={} error={} policy={} total_ms={total_ms:.3} upstream_ms={} bytes={} completed={}",
            ev.method,
            a.path,
            ev.status,
            ev.error.unwrap_or("-"),
            a.policy.as_deref().unwrap_or("-"),
            upstream_ms
                .map(|u| format!("{u:.3}"))
                .unwrap_or_else(|| "-".into()),
            a.body_bytes,
            a.completed
        )?;
        if let Some(u) = llm {
            let n = |k: &str| match u.get(k) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => "-".into(),
                Some(v) => v.to_string(),
            };
            write!(
                out,
                " model={} input_tokens={} output_tokens={} cached_tokens={} cost_usd={} estimated={} ttfb_ms={}",
                n("model"),
                n("input_tokens"),
                n("output_tokens"),
                n("cached_tokens"),
                n("cost_usd"),
                n("estimated"),
                n("time_to_first_byte_ms"),
            )?;
        }
        writeln!(out)
    }
}

/// Discovery, endpoint metrics, remedy statistics and spans of one finished request.
fn diagnose(
    d: &Diagnostics,
    m: &Metrics,
    (endpoint_metrics, key, endpoint): (&mut EndpointMetrics, &mut String, &mut String),
    ev: &Event,
    diag: &RequestDiag,
) {
    let method = method_label(&ev.method);
    let host = ev.host.as_deref().filter(|_| ev.host_is_label);
    let path = diag.path.as_deref().unwrap_or("/");
    let template = diag.template.as_deref().filter(|t| !t.is_empty());
    // `METHOD host template`: the endpoint as discovery counted it, or as the path reads.
    key.clear();
    if let (Some(endpoints), Some(h)) = (&d.endpoints, host) {
        let at_ms = crate::diagnosis::unix_ns() / 1_000_000;
        // `host:port` off the default port (bracketed when an IPv6 literal).
        let with_port = diag.port.map(|p| {
            // Pushed, not `format!`: this runs per call.
            let mut s = String::with_capacity(h.len() + 8);
            let v6 = h.contains(':');
            for part in [if v6 { "[" } else { "" }, h, if v6 { "]:" } else { ":" }] {
                s.push_str(part);
            }
            s.push_str(itoa::Buffer::new().format(p));
            s
        });
        let consumer = diag
            .consumer
            .as_ref()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let call = Seen {
            host: with_port.as_deref().unwrap_or(h),
            method,
            path,
            template,
            status: ev.status,
            total_us: ev.total.as_micros() as u64,
            upstream_us: ev.upstream.map(|u| u.as_micros() as u64),
            request_bytes: diag.request_bytes().unwrap_or(0),
            response_bytes: ev.response_bytes,
            consumer: consumer.as_deref(),
            policy: diag.policy.as_deref(),
            cache_hit: diag
                .acted
                .iter()
                .any(|a| a.remedy == "cache" && a.action == "hit"),
            at_ms,
            saved: diag.saved.as_deref(),
            tool: diag.mcp.as_ref().and_then(|m| {
                Some(crate::diagnosis::discovery::mcp::ToolCall {
                    tool: m.tool()?,
                    failed: ev.error.is_some() || ev.status >= 400,
                    outcome: m.outcome.get(),
                    total_us: ev.total.as_micros() as u64,
                })
            }),
            llm: diag
                .llm
                .as_ref()
                .map(|m| m.read())
                .filter(|m| m.relayed)
                .map(|m| {
                    let u = m.usage();
                    crate::diagnosis::discovery::LlmSeen {
                        input: u.input,
                        output: u.output,
                        cost_nanos: m.cost_nanos(),
                        first_byte_us: m.first_byte.map(|d| d.as_micros() as u64),
                    }
                }),
        };
        // Held while the labels it names are used (only `/discover` reads it otherwise).
        let mut found = endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let counted = found.record(&call);
        if d.endpoint_metrics {
            endpoint_metrics.record(
                m,
                &counted,
                &Sample {
                    method,
                    status: ev.status,
                    total: ev.total,
                    upstream: ev.upstream,
                    request_bytes: call.request_bytes,
                    response_bytes: ev.response_bytes,
                    acted: &diag.acted,
                },
            );
        }
        for part in [method, " ", counted.host, " ", counted.endpoint] {
            key.push_str(part);
        }
        endpoint.push_str(counted.endpoint);
    } else {
        plain_endpoint(endpoint, diag);
    }
    if let Some(policy) = &diag.policy {
        if key.is_empty() {
            stats_key(key, method, host, endpoint);
        }
        d.remedy_stats
            .observer()
            .record(policy, key, ev.status, &diag.acted);
    }
    if let (Some(spans), Some(t)) = (&d.spans, &diag.trace) {
        let end_ns = t.start_ns + ev.total.as_nanos() as u64;
        spans.push([crate::diagnosis::trace::Finished {
            trace_id: t.trace_id,
            parent: t.parent,
            span_id: t.span_id,
            start_ns: t.start_ns,
            end_ns,
            method,
            host: host.map(Arc::from),
            path: path.to_owned(),
            status: ev.status,
            error: ev.error,
            policy: diag.policy.clone(),
            attempts: t
                .attempts
                .iter()
                .map(|a| {
                    let mut a = a.clone();
                    if a.end_ns == 0 {
                        a.end_ns = end_ns;
                    }
                    a
                })
                .collect(),
            events: diag.acted.to_vec(),
            request_id: ev
                .request_id
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned(),
            mcp: diag.mcp.clone(),
        }]);
    }
}

/// A request's endpoint without discovery: its policy's path template, or its path
/// templated as discovery would.
fn plain_endpoint(endpoint: &mut String, diag: &RequestDiag) {
    match diag.template.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => endpoint.push_str(t),
        None => template::push_template(endpoint, diag.path.as_deref().unwrap_or("/")),
    }
}

/// A remedy statistics endpoint key: `METHOD host endpoint` (`-` for a host that is not
/// a label).
fn stats_key(key: &mut String, method: &str, host: Option<&str>, endpoint: &str) {
    for part in [method, " ", host.unwrap_or("-"), " ", endpoint] {
        key.push_str(part);
    }
}

/// A finished call as the dashboard's live view shows it: the path when the request kept
/// it (access log on, or a dashboard watching), the endpoint as diagnosis counted it.
fn live_call<'e>(ev: &'e Event, endpoint: &'e str, now_ms: u64) -> Call<'e> {
    let diag = ev.diag.as_deref();
    let access = ev.access.as_deref();
    Call {
        at_ms: now_ms,
        id: access
            .map(|a| &a.request_id)
            .or(ev.request_id.as_ref())
            .and_then(|v| v.to_str().ok()),
        method: ev.method.as_str(),
        host: ev.host.as_deref(),
        path: access
            .map(|a| &*a.path)
            .or_else(|| diag.and_then(|d| d.path.as_deref())),
        endpoint: Some(endpoint).filter(|e| !e.is_empty()),
        status: ev.status,
        total: ev.total,
        upstream: ev.upstream,
        policy: diag
            .and_then(|d| d.policy.as_deref())
            .or_else(|| access.and_then(|a| a.policy.as_deref())),
        actions: diag.map_or_else(Vec::new, |d| {
            d.acted
                .iter()
                .map(|a| format!("{}:{}", a.remedy, a.action))
                .collect()
        }),
        error: ev.error,
        bytes: ev.response_bytes,
        llm: diag
            .and_then(|d| d.llm.as_ref())
            .map(|m| m.read().summary(m.api)),
        mcp: diag.and_then(|d| d.mcp.as_ref()).map(|m| m.to_json()),
        captured: diag.is_some_and(|d| d.captured),
    }
}

/// Whether the access log file can be opened for appending as `run` opens it (asked by
/// `tollgate check`): an existing file opened, a missing one's directory written to.
pub fn check_access_log(path: &std::path::Path) -> Result<(), String> {
    let r = if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(|_| ())
    } else {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        crate::diagnosis::har::file::ensure_dir(dir)
    };
    r.map_err(|e| {
        format!(
            "log.access_log_file: cannot append to {}: {e}; name a file tollgate can create or write",
            path.display()
        )
    })
}
