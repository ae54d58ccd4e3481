//! Watches a JSON text pass in pieces, as it is relayed, and keeps the values of a few
//! keys of its top-level object (or of each object of a top-level array: Gemini's
//! streamed JSON array): an answer's `usage` and `model` without holding the answer.
//! Strings are skipped with `memchr`; a kept value is capped.

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
    key: Option<Vec<u8>>,
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
        let mut i = 0;
        while i < data.len() {
            if self.in_str {
                i = self.string(data, i);
                continue;
            }
            let c = data[i];
            i += 1;
            if self.capture.is_some() && self.depth == self.base && (c == b',' || c == b'}') {
                let (k, v) = self.capture.take().expect("checked");
                self.found.push((k, v));
            }
            if let Some((_, v)) = &mut self.capture {
                v.push(c);
                if v.len() > self.cap {
                    self.capture = None;
                }
            }
            match c {
                b'"' => {
                    self.in_str = true;
                    let keying = self.depth == self.base && self.expect_key;
                    self.key = keying.then(Vec::new);
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
                    }
                }
                b',' if self.depth == self.base => self.expect_key = true,
                _ => {}
            }
        }
    }

    /// Inside a string from `i`: returns where scanning goes on.
    fn string(&mut self, data: &[u8], mut i: usize) -> usize {
        if self.capture.is_none() && self.key.is_none() && !self.esc {
            // Nothing is kept of this string: jump to its next quote or backslash.
            match memchr::memchr2(b'"', b'\\', &data[i..]) {
                Some(j) => i += j,
                None => return data.len(),
            }
        }
        let c = data[i];
        if let Some((_, v)) = &mut self.capture {
            v.push(c);
        }
        if self.esc {
            self.esc = false;
            self.key = None;
        } else if c == b'\\' {
            self.esc = true;
        } else if c == b'"' {
            self.in_str = false;
            if let Some(k) = self.key.take() {
                self.expect_key = false;
                self.after_key = Some(self.wanted.iter().position(|w| w.as_bytes() == k));
            }
        } else if let Some(k) = &mut self.key {
            k.push(c);
            if k.len() > 32 {
                self.key = None;
            }
        }
        i + 1
    }
}

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
    fn a_value_past_the_cap_is_dropped() {
        let mut s = Scan::new(&["usage"], 8);
        s.feed(br#"{"usage":{"a":"0123456789"},"model":"m"}"#);
        assert!(s.found.is_empty());
    }
}
