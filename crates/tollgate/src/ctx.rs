//! A client request's context through the pipeline (proxy, tunnels, upgrades): what is
//! learnt about it for the response and the request event it ends with.

use crate::conns::InFlight;
use crate::diagnosis::{RequestDiag, har};
use crate::observe::{Access, Ended, Event};
use crate::state::{Shared, Worker};
use http::{HeaderValue, Method};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the pipeline learns about a request, for the response and the request event.
pub struct Ctx {
    pub start: Instant,
    pub id: HeaderValue,
    pub method: Method,
    pub host: Option<Arc<str>>,
    pub upstream: Option<Duration>,
    pub policy: Option<Arc<str>>,
    /// Kept only when the access log is on or a dashboard watches the live calls. A boxed
    /// `str`, not a `String`: 8 bytes fewer in every request's future.
    pub path: Option<Box<str>>,
    /// Keeps the connection's read deadline off until the response has ended.
    pub in_flight: InFlight,
    /// Diagnosis of this request: present for matched requests and when diagnosis is on.
    pub diag: Option<Box<RequestDiag>>,
    /// What an aggregated endpoint's call did (its backends), for metrics.
    pub aggregate: Option<Box<crate::aggregate::outcome::Outcome>>,
}

impl Ctx {
    /// Ends the request: a HAR capture leaves for its writer, its worker counts it
    /// (`observe::Observer::ended`), and its event is built and sent to the observer
    /// thread only when that thread has more to do with it. `host_is_label`: the host was
    /// validated (a refused target's host is client input, never a metric label).
    pub fn end(
        &mut self,
        worker: &Worker,
        status: u16,
        error: Option<&'static str>,
        body_bytes: u64,
        completed: bool,
        host_is_label: bool,
    ) {
        let (shared, observer) = (&*worker.shared, &worker.local().observer);
        let at = Instant::now();
        let total = at.saturating_duration_since(self.start);
        let mut diag = self.diag.take();
        if let Some(d) = &mut diag
            && let Some(capture) = d.har.take()
        {
            d.captured = self.send_capture(shared, d, capture, error, completed);
        }
        let ended = Ended {
            host: self.host.as_ref().filter(|_| host_is_label),
            method: &self.method,
            status,
            error,
            at,
            total,
            upstream: self.upstream,
        };
        let keeps = self.path.is_some() || self.aggregate.is_some();
        if !observer.ended(&ended, &mut diag, keeps) {
            return;
        }
        observer.send(Event {
            aggregate: self.aggregate.take(),
            response_bytes: body_bytes,
            request_id: diag.as_ref().map(|_| self.id.clone()),
            diag,
            host: self.host.clone(),
            host_is_label,
            method: self.method.clone(),
            status,
            error,
            total,
            upstream: self.upstream,
            // The path moves to the event: the request is over.
            access: self.path.take().map(|path| {
                Box::new(Access {
                    request_id: self.id.clone(),
                    path,
                    policy: self.policy.clone(),
                    body_bytes,
                    completed,
                    // Kept for the dashboard alone, or for the access log too (read here,
                    // not kept in the context: every request's future would grow).
                    log: shared.runtime.load().config.log.access_log,
                })
            }),
        });
    }

    fn send_capture(
        &self,
        shared: &Shared,
        d: &RequestDiag,
        mut capture: Box<har::Capture>,
        error: Option<&'static str>,
        completed: bool,
    ) -> bool {
        let Some(writer) = &shared.diagnostics.har else {
            return false;
        };
        capture.sent_after = d
            .sent_at
            .map(|s| s.into_std().saturating_duration_since(self.start));
        writer.send(Box::new(har::Record {
            capture,
            request_body: d.tap.as_ref().and_then(|t| t.copied()),
            request_id: self.id.to_str().unwrap_or("").to_owned(),
            policy: self.policy.clone(),
            template: d.template.clone(),
            acted: d.acted.to_vec(),
            retries: d.retries,
            error,
            total: self.start.elapsed(),
            wait: self.upstream,
            completed,
            llm: d.llm.clone(),
            saved: d.saved.clone(),
            mcp: d.mcp.clone(),
        }));
        true
    }
}
