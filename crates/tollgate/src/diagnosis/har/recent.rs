//! The last HAR entries written, kept while a dashboard watches the live calls so that a
//! call clicked there shows its entry: the very line the sinks got (redacted and
//! obfuscated as they were). Bounded in entries and bytes; nothing kept while nobody
//! watches.

use crate::diagnosis::Watching;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

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
}

impl Recent {
    pub fn new(watching: Watching) -> Self {
        Self {
            watching,
            kept: Mutex::default(),
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
}
