//! Prompt strings' token counts, remembered per thread: an agent resends its system
//! prompt, its tools and its whole conversation with every turn, and the tokenizer
//! costs about 45 ns a byte where hashing the string costs a quarter of one. Each
//! string is counted once and found again by a keyed hash of its encoding and text
//! (SipHash with a key drawn per thread, so that no client can write a text that passes
//! for another one). The memory is two generations of at most [`GENERATION`] strings:
//! a string seen in the older one is moved into the newer one, and when the newer one
//! fills, the older one is forgotten — bounded, and what keeps coming back stays.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

/// Strings in each generation, per thread (two generations: at most twice this many;
/// each generation's table 8 192 slots of 25 bytes, about 200 kB).
pub const GENERATION: usize = 4096;

/// How a prompt's strings were counted: found in the memory, or by the tokenizer
/// (`tollgate_llm_prompt_strings_total`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Strings {
    pub remembered: u64,
    pub counted: u64,
}

/// A remembered count: the text's length (a second check beside the hash) and its
/// tokens.
#[derive(Clone, Copy)]
struct Counted {
    len: usize,
    tokens: u64,
}

/// The keys are hashes already: used as they are.
#[derive(Default)]
struct AsIs(u64);

impl Hasher for AsIs {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other is folded in, not refused.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Generation = HashMap<u64, Counted, BuildHasherDefault<AsIs>>;

/// One thread's memory of counts.
pub struct Memory {
    key: RandomState,
    newer: Generation,
    older: Generation,
    capacity: usize,
}

impl Memory {
    /// An empty memory of two generations of `capacity` strings.
    pub fn new(capacity: usize) -> Self {
        Memory {
            key: RandomState::new(),
            newer: Generation::default(),
            older: Generation::default(),
            capacity: capacity.max(1),
        }
    }

    /// The tokens of `text` in `encoding` (any value naming the encoding), and whether
    /// they were remembered (else counted by `count`, and remembered now).
    pub fn tokens<E: std::hash::Hash>(
        &mut self,
        encoding: E,
        text: &str,
        count: impl FnOnce(&str) -> u64,
    ) -> (u64, bool) {
        let h = self.key.hash_one((encoding, text));
        let len = text.len();
        if let Some(c) = self.newer.get(&h).filter(|c| c.len == len) {
            return (c.tokens, true);
        }
        let (tokens, remembered) = match self.older.remove(&h).filter(|c| c.len == len) {
            Some(c) => (c.tokens, true),
            None => (count(text), false),
        };
        if self.newer.len() >= self.capacity {
            std::mem::swap(&mut self.newer, &mut self.older);
            self.newer.clear();
        }
        self.newer.insert(h, Counted { len, tokens });
        (tokens, remembered)
    }
}

thread_local! {
    static MEMORY: RefCell<Memory> = RefCell::new(Memory::new(GENERATION));
}

/// The tokens of `text` in `encoding`, from this thread's memory or counted by `count`;
/// which of the two, added to `strings`.
pub fn tokens<E: std::hash::Hash>(
    encoding: E,
    text: &str,
    count: impl FnOnce(&str) -> u64,
    strings: &mut Strings,
) -> u64 {
    MEMORY.with(|m| match m.try_borrow_mut() {
        Ok(mut m) => {
            let (n, remembered) = m.tokens(encoding, text, count);
            match remembered {
                true => strings.remembered += 1,
                false => strings.counted += 1,
            }
            n
        }
        // Not reentered in practice (counting calls nothing that counts); counted anew
        // rather than refused if it ever is.
        Err(_) => {
            strings.counted += 1;
            count(text)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(t: &str) -> u64 {
        t.len() as u64
    }

    #[test]
    fn a_string_is_counted_once_and_then_found() {
        let mut m = Memory::new(8);
        assert_eq!(m.tokens(1u8, "hello", bytes), (5, false));
        assert_eq!(
            m.tokens(1u8, "hello", |_| panic!("counted again")),
            (5, true)
        );
        // Another encoding is another count.
        assert_eq!(m.tokens(2u8, "hello", |_| 7), (7, false));
    }

    #[test]
    fn what_keeps_coming_back_stays_and_the_rest_is_forgotten() {
        let mut m = Memory::new(4);
        m.tokens(0u8, "kept", bytes);
        for i in 0..20 {
            assert!(!m.tokens(0u8, &format!("once {i}"), bytes).1);
            // Asked for again between the others: moved forward each time it is found.
            assert_eq!(m.tokens(0u8, "kept", |_| panic!("forgotten")), (4, true));
        }
        // A string not asked for again is gone after two generations.
        assert_eq!(m.tokens(0u8, "once 0", bytes), (6, false));
        assert!(m.newer.len() <= 4 && m.older.len() <= 4);
    }
}
