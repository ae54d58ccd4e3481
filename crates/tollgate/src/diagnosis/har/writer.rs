//! The request side of HAR capture (a queue bounded in entries and in bytes) and the
//! writer side (entries encoded and written to every sink in bounded batches), which runs
//! on the diagnosis thread. Under sustained load the queue never empties: batches keep
//! what is encoded at once small, and the byte bound keeps what waits small, so memory
//! stays flat whatever the traffic.

use super::Record;
use super::collector::Pending;
use super::file::FileSink;
use crate::diagnosis::settings::Har;
use crate::metrics::{Metrics, SinkLabels};
use prometheus_client::metrics::counter::Counter;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use tokio::sync::mpsc;

/// Most entries encoded and written in one batch.
const BATCH_ENTRIES: usize = 256;
/// Most bytes of encoded entries in one batch (one more entry may pass it).
const BATCH_BYTES: usize = 4 << 20;

/// Hands finished captures to the writer; never blocks.
#[derive(Clone)]
pub struct HarWriter {
    tx: mpsc::Sender<Box<Record>>,
    dropped: Counter,
    /// Bytes of the records waiting in the queue, and their bound.
    queued: Arc<AtomicUsize>,
    max_queued: usize,
    /// Body copies of the calls being captured: bounded by `max_queue_bytes` too.
    capturing: super::super::tap::Budget,
}

impl HarWriter {
    /// The budget the body copies of a call being captured take from.
    pub fn budget(&self) -> super::super::tap::Budget {
        self.capturing.clone()
    }

    /// Whether the writer's queue has room. When it has none the call is not captured
    /// at all (counted as dropped): copying heads and bodies for an entry that could
    /// only be dropped would take CPU from the calls exactly when it is scarcest.
    #[inline]
    pub fn has_room(&self) -> bool {
        if self.tx.capacity() > 0 && self.queued.load(Relaxed) < self.max_queued {
            return true;
        }
        self.dropped.inc();
        false
    }

    #[inline]
    pub fn send(&self, mut r: Box<Record>) {
        // From here the queue's bound counts its bytes.
        r.capture.response_body.settle();
        let size = r.size();
        if self.queued.fetch_add(size, Relaxed) + size > self.max_queued {
            self.queued.fetch_sub(size, Relaxed);
            self.dropped.inc();
            return;
        }
        if self.tx.try_send(r).is_err() {
            self.queued.fetch_sub(size, Relaxed);
            self.dropped.inc();
        }
    }
}

/// The writer's end: the queue and the sinks.
pub struct Sinks {
    pub rx: mpsc::Receiver<Box<Record>>,
    queued: Arc<AtomicUsize>,
    file: Option<FileSink>,
    stdout: bool,
    /// Entries for the collector, already encoded.
    pub collector: Option<Arc<Pending<Arc<str>>>>,
    /// The last entries, while a dashboard watches.
    recent: Arc<super::recent::Recent>,
    written: Counter,
    errors: Counter,
}

pub fn channel(
    h: &Har,
    metrics: &Metrics,
    recent: Arc<super::recent::Recent>,
) -> std::io::Result<(HarWriter, Sinks)> {
    let (tx, rx) = mpsc::channel(h.queue_capacity);
    let sink = |s: &'static str| SinkLabels { sink: s };
    let queued = Arc::new(AtomicUsize::new(0));
    let writer = HarWriter {
        tx,
        dropped: metrics.har_dropped.get_or_create(&sink("queue")).clone(),
        queued: queued.clone(),
        max_queued: h.max_queue_bytes,
        capturing: super::super::tap::Budget::new(h.max_queue_bytes),
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
            queued,
            file,
            stdout: h.stdout,
            collector,
            recent,
            written: metrics.har_entries.get_or_create(&sink("encoded")).clone(),
            errors: metrics.har_dropped.get_or_create(&sink("file")).clone(),
        },
    ))
}

/// What one [`Sinks::drain`] found.
pub struct Drained {
    /// Some sender is still there.
    pub open: bool,
    /// The batch was full: more may be waiting.
    pub more: bool,
}

impl Sinks {
    /// Encodes and writes one batch of what is queued (at most [`BATCH_ENTRIES`] entries
    /// and about [`BATCH_BYTES`]), so what is held at once stays bounded.
    pub fn drain(&mut self) -> Drained {
        let mut lines: Vec<String> = Vec::new();
        let mut starts: Vec<std::time::SystemTime> = Vec::new();
        let mut bytes = 0;
        let keep = self.recent.wanted();
        let open = loop {
            if lines.len() >= BATCH_ENTRIES || bytes >= BATCH_BYTES {
                break true;
            }
            match self.rx.try_recv() {
                Ok(r) => {
                    let size = r.size();
                    self.queued.fetch_sub(size, Relaxed);
                    // Room for the entry at once: its heads and bodies, some escaping and
                    // the keys around them.
                    let mut text = String::with_capacity(size + size / 4 + 768);
                    let own = super::entry::write(&r, &mut text);
                    // The whole entry once more through the value scrubber: no secret
                    // value leaves in any form the walk above did not see.
                    let red = &r.capture.redactor;
                    let line = match red.scrub_with(&text, &own) {
                        std::borrow::Cow::Borrowed(_) => text,
                        std::borrow::Cow::Owned(scrubbed) => scrubbed,
                    };
                    if keep {
                        self.recent.keep(&r.request_id, &line);
                    }
                    bytes += line.len();
                    starts.push(r.capture.started);
                    lines.push(line);
                }
                Err(mpsc::error::TryRecvError::Empty) => break true,
                Err(mpsc::error::TryRecvError::Disconnected) => break false,
            }
        };
        let more = lines.len() >= BATCH_ENTRIES || bytes >= BATCH_BYTES;
        // Calls complete out of order: each batch goes out in start order (a closed file
        // is sorted whole, see `file`).
        if starts.windows(2).any(|w| w[0] > w[1]) {
            let mut pairs: Vec<_> = starts.into_iter().zip(lines).collect();
            pairs.sort_by_key(|p| p.0);
            lines = pairs.into_iter().map(|(_, l)| l).collect();
        }
        self.written.inc_by(lines.len() as u64);
        if let Some(f) = &mut self.file {
            if let Err(e) = f.append(&lines) {
                self.errors.inc_by((lines.len() - e.written) as u64);
                tracing::warn!("HAR file: {}", e.error);
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
        Drained { open, more }
    }
}
