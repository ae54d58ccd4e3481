//! One pass over JSON text (RFC 8259), checking its grammar as it goes and calling a
//! reader back at each member of the objects it opens; what the reader does not open is
//! skipped (still checked). Every step answers `None` at the first thing it does not
//! accept, and the reader then hands the text to serde_json.

/// serde_json's recursion limit: a container nested deeper is refused there, so here.
pub const SERDE_DEPTH: usize = 128;

/// A position in JSON text.
pub struct Walk<'a> {
    pub b: &'a [u8],
    pub i: usize,
    /// The deepest nesting accepted.
    max_depth: usize,
    /// A string had a `\u` escape (a lone surrogate is one serde_json refuses to decode).
    pub unicode_escape: bool,
}

impl<'a> Walk<'a> {
    pub fn new(b: &'a [u8], max_depth: usize) -> Self {
        Self {
            b,
            i: 0,
            max_depth,
            unicode_escape: false,
        }
    }

    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// RFC 8259 §2: whitespace is space, tab, line feed and carriage return.
    #[inline]
    pub fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    #[inline]
    pub fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// Past trailing whitespace, whether the text ends here.
    pub fn ends(&mut self) -> bool {
        self.ws();
        self.i == self.b.len()
    }

    /// An object at nesting `depth` (its own), `member` called at each key (its raw
    /// bytes: a key with an escape is `None`) with the walk at the value.
    pub fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        if depth > self.max_depth {
            return None;
        }
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let start = self.i + 1;
            if self.string()? {
                return None;
            }
            let key = &self.b[start..self.i - 1];
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(self, key)?;
            if self.closes(b'}')? {
                return Some(());
            }
        }
    }

    /// After a container's member: past its `,` (`false`) or its closing bracket `close`
    /// (`true`); anything else is `None`.
    fn closes(&mut self, close: u8) -> Option<bool> {
        self.ws();
        let c = self.peek()?;
        self.i += 1;
        if c == close {
            return Some(true);
        }
        (c == b',').then(|| self.ws()).map(|()| false)
    }

    /// Any value inside a container at nesting `depth`, skipped.
    pub fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1, |p, _| p.value(depth + 1)),
            b'[' => self.array(depth + 1, |p| p.value(depth + 1)),
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    /// An array at nesting `depth` (its own), `element` called with the walk at each.
    pub fn array(
        &mut self,
        depth: usize,
        mut element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if depth > self.max_depth {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            if self.closes(b']')? {
                return Some(());
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.b[self.i..]
            .starts_with(word)
            .then(|| self.i += word.len())
    }

    /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    pub fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.one_or_more_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.one_or_more_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    fn one_or_more_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// A string (RFC 8259 §7), from its opening quote to past its closing one: no
    /// unescaped control character, only the escapes the grammar has. Whether it had an
    /// escape. Its runs are searched a word at a time ([`super::swar`]).
    #[inline]
    pub fn string(&mut self) -> Option<bool> {
        self.eat(b'"')?;
        let mut escaped = false;
        loop {
            self.i += super::swar::string_stop(self.b.get(self.i..)?)?;
            let c = self.b[self.i];
            self.i += 1;
            match c {
                b'"' => return Some(escaped),
                b'\\' => escaped = true,
                _ => return None,
            }
            match self.peek()? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                b'u' => {
                    let hex = self.b.get(self.i + 1..self.i + 5)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    self.i += 5;
                    self.unicode_escape = true;
                }
                _ => return None,
            }
        }
    }
}

/// The text of the top-level members of `json` named `keys` (of each, the last written, as
/// a parsed object keeps it), in one checked pass; `None` wherever serde_json might read
/// the text otherwise (then it reads it): not an object, not UTF-8, not JSON, a key with
/// an escape, a `\u` escape anywhere (a lone surrogate is refused there), nesting past
/// its limit.
pub fn members<'a, const N: usize>(
    json: &'a [u8],
    keys: [&str; N],
) -> Option<[Option<&'a [u8]>; N]> {
    std::str::from_utf8(json).ok()?;
    let mut p = Walk::new(json, SERDE_DEPTH);
    let mut found = [None; N];
    p.ws();
    p.object(1, |p, key| {
        let start = p.i;
        p.value(1)?;
        if let Some(k) = keys.iter().position(|w| w.as_bytes() == key) {
            found[k] = Some(&json[start..p.i]);
        }
        Some(())
    })?;
    (p.ends() && !p.unicode_escape).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const KEYS: [&str; 3] = ["model", "usage", "choices"];

    /// Whether the pass read `json`; when it did, each member is what serde_json's
    /// `Value` of the whole holds.
    fn agrees(json: &[u8]) -> bool {
        let Some(found) = members(json, KEYS) else {
            return false;
        };
        let text = String::from_utf8_lossy(json);
        let v: Value = serde_json::from_slice(json).unwrap_or_else(|e| panic!("{e}: {text}"));
        for (k, raw) in KEYS.iter().zip(found) {
            let raw = raw.map(|r| serde_json::from_slice::<Value>(r).unwrap());
            assert_eq!(raw.as_ref(), v.get(k), "{k}: {text}");
        }
        true
    }

    #[test]
    fn what_the_pass_finds_a_parsed_object_holds_on_generated_chunks() {
        let mut bases = crate::json::mutants::CHAT_CHUNKS.to_vec();
        bases.push(r#" { "choices" : [ { "delta" : { "content" : "Hi \"there\"\n" } } ] , "model" : "m" , "model" : "n" } "#);
        const SNIPPETS: &[&str] = &[r#""model":"x","#, r#""usage":{},"#, r#""mod\u0065l":1,"#];
        crate::json::mutants::check_mutants(&bases, SNIPPETS, 40_000, agrees);
    }
}
