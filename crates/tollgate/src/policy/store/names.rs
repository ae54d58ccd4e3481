//! The names a remedy puts in its store keys (its resource, `total`, a group's part), with
//! a copy for each data-plane worker. A [`super::Key`] holds its names by reference count,
//! and a request builds its keys afresh: with one `Arc` per name, every worker counting
//! in one limit would write the same reference counts, passing their cache line from
//! core to core on each request. Each worker's copies are made on its own thread, at its
//! first use, so they come from that thread's part of the allocator and share no line
//! with another worker's.

use crate::metrics::sharded::{SHARDS, shard};
use std::sync::{Arc, OnceLock};

pub struct Names {
    names: Box<[Arc<str>]>,
    copies: [OnceLock<Box<[Arc<str>]>>; SHARDS],
}

impl Names {
    pub fn new(names: impl IntoIterator<Item = Arc<str>>) -> Self {
        Self {
            names: names.into_iter().collect(),
            copies: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// The calling worker's copies, in the order given.
    pub fn get(&self) -> &[Arc<str>] {
        self.copies[shard()].get_or_init(|| self.names.iter().map(|n| Arc::from(&**n)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_has_copies_of_its_own_with_the_same_text() {
        let names = Names::new(["rate:a".into(), "total".into()]);
        let mine = names.get().to_vec();
        let (theirs, text) = std::thread::scope(|s| {
            s.spawn(|| {
                crate::metrics::sharded::record_as(3);
                let n = names.get();
                (Arc::as_ptr(&n[0]) as *const u8 as usize, n.to_vec())
            })
            .join()
            .unwrap()
        });
        assert_ne!(Arc::as_ptr(&mine[0]) as *const u8 as usize, theirs);
        assert_eq!(text, mine);
        assert!(
            Arc::ptr_eq(&names.get()[1], &mine[1]),
            "made once per worker"
        );
    }
}
