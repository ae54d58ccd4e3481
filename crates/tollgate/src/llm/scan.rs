//! Watches a JSON text pass in pieces, as it is relayed, and keeps the values of a few
//! keys of its top-level object (or of each object of a top-level array: Gemini's
//! streamed JSON array): an answer's `usage` and `model` without holding the answer.
//! Strings are skipped a word at a time, then with `memchr` (`swar`); a kept value is
//! capped.

/// The scanner. [`Scan::feed`] each piece in order; kept values come back in `found`
/// (the key's index in `wanted`, the value's bytes) as each value ends.
pub struct Scan {
    wanted: &'static [&'static str],
    depth: u32,
    /// The depth whose object keys are watched: 1 for a top-level object, 2 for the
    /// objects of a top-level array (0 until the first bracket).
    base: u32,
    in_str: bool,
    esc: bool,
    /// At `base` depth, the next string is a key.
    expect_key: bool,
    /// Reading a key at `base` depth (`None` past 32 bytes: no wanted key is that long).
    key: Option<KeyBuf>,
    /// A key just ended: its wanted index when the next `:` makes it one.
    after_key: Option<Option<usize>>,
    capture: Option<(usize, Vec<u8>)>,
    cap: usize,
    pub found: Vec<(usize, Vec<u8>)>,
}

impl Scan {
    /// Keeps the values of `wanted` keys, each up to `cap` bytes (a longer one is
    /// dropped).
    pub fn new(wanted: &'static [&'static str], cap: usize) -> Self {
        Self {
            wanted,
            depth: 0,
            base: 0,
            in_str: false,
            esc: false,
            expect_key: false,
            key: None,
            after_key: None,
            capture: None,
            cap,
            found: Vec::new(),
        }
    }

    /// Keeps the values of `wanted` keys of the objects one level inside a top-level
    /// object (`{"response":{"usage":…}}`: a Responses event, Anthropic's
    /// `message_start`).
    pub fn nested(wanted: &'static [&'static str], cap: usize) -> Self {
        Self {
            base: 2,
            ..Self::new(wanted, cap)
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        // A kept value is copied as runs of the piece (where it starts, or the piece's
        // start, to where it ends or the piece does), not a byte at a time.
        let mut run = 0;
        let mut i = 0;
        while i < data.len() {
            if self.in_str {
                i = self.string(data, i);
                continue;
            }
            // Below the watched depth only strings and brackets matter.
            if self.depth > self.base && self.base > 0 {
                i = self.below(data, i);
                continue;
            }
            let c = data[i];
            i += 1;
            if self.capture.is_some() && self.depth == self.base && (c == b',' || c == b'}') {
                self.keep(&data[run..i - 1]);
                if let Some(v) = self.capture.take() {
                    self.found.push(v);
                }
            }
            match c {
                b'"' => {
                    self.in_str = true;
                    let keying = self.depth == self.base && self.expect_key;
                    self.key = keying.then(KeyBuf::default);
                }
                b'{' | b'[' => {
                    if self.base == 0 {
                        self.base = if c == b'{' { 1 } else { 2 };
                    }
                    self.depth += 1;
                    if self.depth == self.base && c == b'{' {
                        self.expect_key = true;
                    }
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b':' if self.depth == self.base => {
                    self.expect_key = false;
                    if let Some(Some(k)) = self.after_key.take() {
                        self.capture = Some((k, Vec::new()));
                        run = i;
                    }
                }
                b',' if self.depth == self.base => self.expect_key = true,
                _ => {}
            }
        }
        if self.capture.is_some() {
            self.keep(&data[run..]);
        }
    }

    /// Below the watched depth, from `i`: strings skipped and brackets counted in one
    /// tight loop, until the depth is back at the watched one (past the bracket that
    /// closes it) or the piece ends (inside a string: where [`Scan::string`] goes on).
    fn below(&mut self, data: &[u8], mut i: usize) -> usize {
        while let Some(j) = data[i..].iter().position(|c| NESTED[*c as usize]) {
            i += j + 1;
            match data[i - 1] {
                b'"' => loop {
                    let Some(k) = crate::json::swar::string_end(&data[i..]) else {
                        self.in_str = true;
                        return data.len();
                    };
                    i += k + 1;
                    if data[i - 1] == b'"' {
                        break;
                    }
                    // A backslash: the byte it escapes is skipped with it.
                    if i == data.len() {
                        self.in_str = true;
                        self.esc = true;
                        return i;
                    }
                    i += 1;
                },
                b'{' | b'[' => self.depth += 1,
                _ => {
                    self.depth -= 1;
                    if self.depth == self.base {
                        return i;
                    }
                }
            }
        }
        data.len()
    }

    /// Adds `bytes` to the value being kept, or drops it past the cap.
    fn keep(&mut self, bytes: &[u8]) {
        if let Some((_, v)) = &mut self.capture {
            if v.len() + bytes.len() > self.cap {
                self.capture = None;
            } else {
                v.extend_from_slice(bytes);
            }
        }
    }

    /// Inside a string from `i`: returns where scanning goes on.
    fn string(&mut self, data: &[u8], mut i: usize) -> usize {
        if !self.esc {
            // To the string's next quote or backslash: nothing of an unwatched string is
            // looked at (a kept value takes it as a run), and a key's bytes on the way
            // are kept in one go.
            let Some(j) = crate::json::swar::string_end(&data[i..]) else {
                self.key_bytes(&data[i..]);
                return data.len();
            };
            self.key_bytes(&data[i..i + j]);
            i += j;
        }
        let c = data[i];
        if self.esc {
            self.esc = false;
            self.key = None;
        } else if c == b'\\' {
            self.esc = true;
        } else if c == b'"' {
            self.in_str = false;
            if let Some(k) = self.key.take() {
                self.expect_key = false;
                let k = k.as_bytes();
                self.after_key = Some(self.wanted.iter().position(|w| w.as_bytes() == k));
            }
        }
        i + 1
    }

    /// A run of the key being read (none past [`KeyBuf`]'s room: no wanted key is
    /// longer).
    fn key_bytes(&mut self, run: &[u8]) {
        if let Some(k) = &mut self.key
            && !k.extend(run)
        {
            self.key = None;
        }
    }
}

/// A key being read, in place: every key of an answer's top-level object is read, and
/// none needs a heap allocation (no wanted key is over 32 bytes; MCP's outcome reader
/// keeps its keys in one too).
#[derive(Default, Clone, Copy)]
pub struct KeyBuf {
    bytes: [u8; 32],
    len: u8,
}

impl KeyBuf {
    /// Adds `run`; `false` past 32 bytes.
    pub fn extend(&mut self, run: &[u8]) -> bool {
        let at = self.len as usize;
        match self.bytes.get_mut(at..at + run.len()) {
            Some(slots) => {
                slots.copy_from_slice(run);
                self.len += run.len() as u8;
                true
            }
            None => false,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The bytes that matter below the watched depth: a string's start and the brackets (the
/// MCP answer's outcome reader skips with it too).
pub const NESTED: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'}' as usize] = true;
    t[b'[' as usize] = true;
    t[b']' as usize] = true;
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(text: &str, piece: usize) -> Vec<(usize, String)> {
        let mut s = Scan::new(&["usage", "model"], 1024);
        for chunk in text.as_bytes().chunks(piece) {
            s.feed(chunk);
        }
        s.found
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v).unwrap().trim().to_owned()))
            .collect()
    }

    #[test]
    fn top_level_values_are_kept_whatever_the_pieces() {
        let text = r#"{"id":"x","model":"gpt-4o","choices":[{"message":{"content":"say \"usage\": {\"model\":1}","usage":5}}],
            "usage" : {"prompt_tokens":3,"completion_tokens":2,"details":{"a":[1,2]}}, "tail":"\\"}"#;
        for piece in [1, 2, 3, 7, 64, 4096] {
            assert_eq!(
                scan_in_pieces(text, piece),
                vec![
                    (1, "\"gpt-4o\"".to_owned()),
                    (
                        0,
                        r#"{"prompt_tokens":3,"completion_tokens":2,"details":{"a":[1,2]}}"#
                            .to_owned()
                    )
                ],
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn the_objects_of_a_top_level_array_are_watched() {
        let text = r#"[{"usage":{"n":1}},
{"model":"m","usage":{"n":2}}]"#;
        let found = scan_in_pieces(text, 5);
        assert_eq!(found.len(), 3);
        assert_eq!(found[2], (0, r#"{"n":2}"#.to_owned()));
    }

    #[test]
    fn a_key_longer_than_any_wanted_is_none_of_them() {
        let long = format!("usage{}", "x".repeat(40));
        let text = format!(r#"{{"{long}":{{"n":1}},"usage":{{"n":2}}}}"#);
        for piece in [1, 7, 4096] {
            assert_eq!(
                scan_in_pieces(&text, piece),
                vec![(0, r#"{"n":2}"#.to_owned())],
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_value_past_the_cap_is_dropped() {
        let text = br#"{"usage":{"a":"0123456789"},"model":"m"}"#;
        for piece in [3, 64] {
            let mut s = Scan::new(&["usage"], 8);
            text.chunks(piece).for_each(|c| s.feed(c));
            assert!(s.found.is_empty(), "pieces of {piece}");
        }
        // At the cap exactly, over pieces: kept.
        let mut s = Scan::new(&["usage"], 7);
        br#"{"usage":{"a":1},"x":2}"#.chunks(2).for_each(|c| s.feed(c));
        assert_eq!(s.found, [(0, br#"{"a":1}"#.to_vec())]);
    }

    /// xorshift64: the same cases on every run.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    fn value(rng: &mut Rng, depth: u32) -> serde_json::Value {
        use serde_json::{Value, json};
        const KEYS: &[&str] = &["usage", "model", "id", "content", "usagex", "modelVersion"];
        const TEXTS: &[&str] = &[
            "",
            "gpt-4o",
            "say \"usage\": {",
            "é ∑ 𝄞",
            "a\\b\n",
            "[{\"model\":1}]",
        ];
        match rng.below(if depth > 3 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => json!(rng.below(1000) as i64 - 500),
            2 => Value::String(TEXTS[rng.below(TEXTS.len())].repeat(1 + rng.below(40))),
            3 => json!(rng.below(2) == 1),
            4 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
            _ => Value::Object(
                (0..rng.below(5))
                    .map(|_| {
                        (
                            KEYS[rng.below(KEYS.len())].to_owned(),
                            value(rng, depth + 1),
                        )
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn generated_answers_in_random_pieces_keep_what_the_top_level_holds() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for _ in 0..3_000 {
            let serde_json::Value::Object(top) = value(&mut rng, 0) else {
                continue;
            };
            let text = match rng.below(2) {
                0 => serde_json::to_string(&top).unwrap(),
                _ => serde_json::to_string_pretty(&top).unwrap(),
            };
            let mut s = Scan::new(&["usage", "model"], 1 << 20);
            let mut rest = text.as_bytes();
            while !rest.is_empty() {
                let n = (1 + rng.below(40)).min(rest.len());
                s.feed(&rest[..n]);
                rest = &rest[n..];
            }
            let found: Vec<(usize, serde_json::Value)> = s
                .found
                .iter()
                .map(|(k, v)| (*k, serde_json::from_slice(v).unwrap()))
                .collect();
            let want: Vec<(usize, serde_json::Value)> = ["usage", "model"]
                .iter()
                .enumerate()
                .filter_map(|(k, name)| Some((k, top.get(*name)?.clone())))
                .collect();
            let mut sorted = found.clone();
            sorted.sort_by_key(|(k, _)| *k);
            assert_eq!(sorted, want, "{text}");
        }
    }
}
