//! Closed HAR files are published on a thread of their own — flushed to disk, put in
//! start order, renamed to `.har`, the oldest past the retention count deleted — so a
//! rotation costs the writer only the next file's creation, however slow the disk's
//! flushes: with small files (`max_bytes: 64KiB`) a rotation comes every few entries.
//! At most [`QUEUE`] closed files wait; past that the writer publishes one itself (no
//! file is ever lost, the writer is only slowed as it was before). Stopping it publishes
//! what waits.

use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

/// Closed files waiting to be published at most.
pub const QUEUE: usize = 8;

/// A file the writer closed: complete on disk, not yet flushed or renamed.
pub struct Closed {
    pub file: File,
    pub path: PathBuf,
}

/// What publishing a closed file is (the file sink's, or a test's).
pub type Work = Box<dyn Fn(Closed) + Send + Sync>;

pub struct Publisher {
    tx: Option<SyncSender<Closed>>,
    thread: Option<JoinHandle<()>>,
    work: std::sync::Arc<Work>,
}

impl Publisher {
    /// A thread doing `work` for each closed file handed to it, in order.
    pub fn start(work: Work) -> Self {
        let work = std::sync::Arc::new(work);
        let (tx, rx) = sync_channel::<Closed>(QUEUE);
        let w = work.clone();
        let thread = std::thread::Builder::new()
            .name("tollgate-har-publish".into())
            .spawn(move || {
                for c in rx {
                    w(c);
                }
            });
        match thread {
            Ok(t) => Self {
                tx: Some(tx),
                thread: Some(t),
                work,
            },
            Err(e) => {
                tracing::warn!("HAR files: no publishing thread ({e}): the writer publishes them");
                Self {
                    tx: None,
                    thread: None,
                    work,
                }
            }
        }
    }

    /// Hands `c` over, or publishes it on this thread when [`QUEUE`] files wait already.
    pub fn hand(&self, c: Closed) {
        let c = match &self.tx {
            Some(tx) => match tx.try_send(c) {
                Ok(()) => return,
                Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) => c,
            },
            None => c,
        };
        (self.work)(c);
    }
}

impl Drop for Publisher {
    /// Publishes what waits before the gateway stops.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn handing_over_does_not_wait_for_the_work_and_stopping_finishes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let gate = Mutex::new(gate_rx);
        let done = Arc::new(Mutex::new(Vec::new()));
        let d = done.clone();
        let p = Publisher::start(Box::new(move |c: Closed| {
            let _ = gate.lock().unwrap().recv();
            d.lock().unwrap().push(c.path);
        }));
        for i in 0..3 {
            let path = dir.path().join(format!("f{i}"));
            let file = File::create(&path).unwrap();
            // Returns although the work is held: the writer never waits for a flush.
            p.hand(Closed { file, path });
        }
        assert!(done.lock().unwrap().is_empty());
        for _ in 0..3 {
            gate_tx.send(()).unwrap();
        }
        drop(p);
        assert_eq!(
            done.lock().unwrap().len(),
            3,
            "stopping published what waited"
        );
    }
}
