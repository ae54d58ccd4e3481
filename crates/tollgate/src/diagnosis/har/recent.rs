//! The last HAR entries written, kept while a dashboard watches the live calls so that a
//! call clicked there shows its entry: the very line the sinks got (redacted and
//! obfuscated as they were). Bounded in entries and bytes; nothing kept while nobody
//! watches.

use crate::diagnosis::Watching;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Most entries kept.
const ENTRIES: usize = 256;
/// Most bytes of entries kept (the oldest go first).
const BYTES: usize = 8 << 20;

#[derive(Default)]
struct Kept {
    entries: VecDeque<(Box<str>, Arc<str>)>,
    bytes: usize,
}

#[derive(Default)]
pub struct Recent {
    watching: Watching,
    kept: Mutex<Kept>,
    /// Told of every entry kept, for [`Recent::get_within`].
    added: Notify,
}

impl Recent {
    pub fn new(watching: Watching) -> Self {
        Self {
            watching,
            kept: Mutex::default(),
            added: Notify::new(),
        }
    }

    /// Whether entries are kept now (a dashboard watches).
    pub fn wanted(&self) -> bool {
        self.watching.any()
    }

    /// Keeps the entry of request `id`, dropping the oldest past the bounds.
    pub fn keep(&self, id: &str, line: &str) {
        if line.len() > BYTES {
            return;
        }
        let mut k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        while k.entries.len() >= ENTRIES || k.bytes + line.len() > BYTES {
            let Some((_, old)) = k.entries.pop_front() else {
                break;
            };
            k.bytes -= old.len();
        }
        k.bytes += line.len();
        k.entries.push_back((id.into(), line.into()));
        drop(k);
        self.added.notify_waiters();
    }

    /// The entry of request `id`, waiting up to `within` for it to be kept. A call shows
    /// in the live view when the observer thread publishes it; its entry is kept when the
    /// HAR writer has encoded it, on another thread and possibly later: a click on a call
    /// that just appeared must not find nothing.
    pub async fn get_within(&self, id: &str, within: Duration) -> Option<Arc<str>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before looking, so an entry kept in between is not missed.
            let added = self.added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            if let Some(line) = self.get(id) {
                return Some(line);
            }
            if !self.wanted() || tokio::time::timeout_at(deadline, added).await.is_err() {
                return None;
            }
        }
    }

    /// The entry of request `id`, when kept.
    pub fn get(&self, id: &str) -> Option<Arc<str>> {
        let k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        k.entries
            .iter()
            .rev()
            .find(|(i, _)| &**i == id)
            .map(|(_, l)| l.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_within_its_bounds() {
        let r = Recent::default();
        for i in 0..ENTRIES + 5 {
            r.keep(&i.to_string(), "{}");
        }
        assert!(r.get("4").is_none());
        assert_eq!(r.get("5").as_deref(), Some("{}"));
        let big = "x".repeat(BYTES / 2 + 1);
        r.keep("a", &big);
        r.keep("b", &big);
        assert!(r.get("a").is_none(), "the bytes bound let the first go");
        assert!(r.get("b").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_click_waits_for_an_entry_still_being_written_and_not_forever() {
        let watching = Watching::default();
        watching.opened();
        let r = Arc::new(Recent::new(watching));
        let writer = r.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            writer.keep("late", "{\"late\":1}");
        });
        let started = tokio::time::Instant::now();
        assert_eq!(
            r.get_within("late", Duration::from_secs(2))
                .await
                .as_deref(),
            Some("{\"late\":1}")
        );
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        let started = tokio::time::Instant::now();
        assert!(
            r.get_within("never", Duration::from_secs(2))
                .await
                .is_none()
        );
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_watching_means_no_wait() {
        let r = Recent::default();
        let started = tokio::time::Instant::now();
        assert!(r.get_within("x", Duration::from_secs(2)).await.is_none());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
