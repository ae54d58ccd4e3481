//! The request side of HAR capture (a bounded queue) and the writer side (entries encoded
//! and written to every sink), which runs on the diagnosis thread.

use super::Record;
use super::collector::Pending;
use super::file::FileSink;
use crate::diagnosis::settings::Har;
use crate::metrics::{Metrics, SinkLabels};
use prometheus_client::metrics::counter::Counter;
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Hands finished captures to the writer; never blocks.
#[derive(Clone)]
pub struct HarWriter {
    tx: mpsc::Sender<Box<Record>>,
    dropped: Counter,
}

impl HarWriter {
    /// Whether the writer's queue has room. When it has none the call is not captured
    /// at all (counted as dropped): copying heads and bodies for an entry that could
    /// only be dropped would take CPU from the calls exactly when it is scarcest.
    #[inline]
    pub fn has_room(&self) -> bool {
        if self.tx.capacity() > 0 {
            return true;
        }
        self.dropped.inc();
        false
    }

    #[inline]
    pub fn send(&self, r: Box<Record>) {
        if self.tx.try_send(r).is_err() {
            self.dropped.inc();
        }
    }
}

/// The writer's end: the queue and the sinks.
pub struct Sinks {
    pub rx: mpsc::Receiver<Box<Record>>,
    file: Option<FileSink>,
    stdout: bool,
    /// Entries for the collector, already encoded.
    pub collector: Option<Arc<Pending<Arc<str>>>>,
    written: Counter,
    errors: Counter,
}

pub fn channel(h: &Har, metrics: &Metrics) -> std::io::Result<(HarWriter, Sinks)> {
    let (tx, rx) = mpsc::channel(h.queue_capacity);
    let sink = |s: &'static str| SinkLabels { sink: s };
    let writer = HarWriter {
        tx,
        dropped: metrics.har_dropped.get_or_create(&sink("queue")).clone(),
    };
    let file = h.file.clone().map(FileSink::new).transpose()?;
    let collector = h.collector.as_ref().map(|c| {
        Arc::new(Pending::new(
            c.buffer,
            metrics
                .har_dropped
                .get_or_create(&sink("collector"))
                .clone(),
        ))
    });
    Ok((
        writer,
        Sinks {
            rx,
            file,
            stdout: h.stdout,
            collector,
            written: metrics.har_entries.get_or_create(&sink("encoded")).clone(),
            errors: metrics.har_dropped.get_or_create(&sink("file")).clone(),
        },
    ))
}

impl Sinks {
    /// Encodes and writes what is queued. Returns false once every sender is gone.
    pub fn drain(&mut self) -> bool {
        let mut lines: Vec<String> = Vec::new();
        let open = loop {
            match self.rx.try_recv() {
                Ok(r) => {
                    let (entry, found) = super::entry::build(&r);
                    // The whole entry once more through the value scrubber: no secret
                    // value leaves in any form the walk above did not see.
                    let red = &r.capture.redactor;
                    let mut own = red.request_secrets(&r.capture.request_headers, &r.capture.url);
                    own.extend(found);
                    own.sort_by_key(|v| std::cmp::Reverse(v.len()));
                    lines.push(red.scrub_with(&entry.to_string(), &own).into_owned());
                }
                Err(mpsc::error::TryRecvError::Empty) => break true,
                Err(mpsc::error::TryRecvError::Disconnected) => break false,
            }
        };
        self.written.inc_by(lines.len() as u64);
        if let Some(f) = &mut self.file {
            if let Err(e) = f.append(&lines) {
                self.errors.inc_by(lines.len() as u64);
                tracing::warn!("HAR file: {e}");
            }
            f.tick();
        }
        if self.stdout && !lines.is_empty() {
            let mut out = std::io::stdout().lock();
            for l in &lines {
                let _ = writeln!(out, "{l}");
            }
            let _ = out.flush();
        }
        if let Some(c) = &self.collector {
            c.push(lines.iter().map(|l| Arc::from(l.as_str())));
        }
        open
    }
}
