//! Edits a JSON document (RFC 8259) in place: a small scanner finds members and leaves
//! by their byte spans, a caller says which to replace, and every other byte — key order,
//! whitespace, numbers as written (`1E3`, `19.990`, 30-digit integers) — is kept. A HAR
//! body is evidence, so redaction must not re-serialise it.

use std::borrow::Cow;

/// What the caller replaces. Replacements are JSON text, written as they are.
pub trait Hooks {
    /// A replacement for a member's whole value, by its (decoded) key; `raw` is the
    /// value's JSON text. `None` keeps walking into the value.
    fn member(&mut self, key: &str, raw: &str) -> Option<String>;
    /// Whether [`Hooks::leaf`] may replace anything (when not, leaves and their paths are
    /// not even gathered).
    fn leaves(&self) -> bool;
    /// A replacement for a string or number leaf: `path` is the keys down to it (`*` for
    /// an array item), `raw` its JSON text.
    fn leaf(&mut self, path: &[Cow<str>], raw: &str) -> Option<String>;
}

/// Deeper documents are not walked (they are scrubbed as text instead), so a hostile
/// body cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

/// `text` with the replacements the hooks chose (borrowed when there are none), or `None`
/// when it is not one JSON value.
pub fn edit<'t>(text: &'t str, hooks: &mut dyn Hooks) -> Option<Cow<'t, str>> {
    let mut s = Scanner {
        text,
        src: text.as_bytes(),
        pos: 0,
        leaves: hooks.leaves(),
        path: Vec::new(),
        edits: Vec::new(),
        hooks,
    };
    s.ws();
    s.value(0)?;
    s.ws();
    if s.pos != s.src.len() {
        return None;
    }
    if s.edits.is_empty() {
        return Some(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, with) in &s.edits {
        out.push_str(&text[at..*start]);
        out.push_str(with);
        at = *end;
    }
    out.push_str(&text[at..]);
    Some(Cow::Owned(out))
}

/// A JSON string's text (with its quotes) decoded, `None` when not valid.
pub fn decode_string(raw: &str) -> Option<String> {
    serde_json::from_str(raw).ok()
}

/// A member's key (its JSON text, quotes included) as text: borrowed unless it has an
/// escape to decode.
fn key(raw: &str) -> Option<Cow<'_, str>> {
    match raw.get(1..raw.len().saturating_sub(1)) {
        Some(inner) if !inner.contains('\\') => Some(Cow::Borrowed(inner)),
        _ => decode_string(raw).map(Cow::Owned),
    }
}

/// `text` as a JSON string literal.
pub fn quote(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

struct Scanner<'a, 'h> {
    text: &'a str,
    src: &'a [u8],
    pos: usize,
    /// Whether leaves go to the hooks (and so whether `path` is kept).
    leaves: bool,
    path: Vec<Cow<'a, str>>,
    /// Replacements in document order: (start, end, JSON text).
    edits: Vec<(usize, usize, String)>,
    hooks: &'h mut dyn Hooks,
}

impl<'a> Scanner<'a, '_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek() == Some(b)).then(|| self.pos += 1)
    }

    /// The text from `start` to here. Spans start and end at ASCII delimiters, so they
    /// are char boundaries.
    fn raw(&self, start: usize) -> &'a str {
        self.text.get(start..self.pos).unwrap_or("")
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let start = self.pos;
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => {
                self.string()?;
                self.leaf(start);
                Some(())
            }
            b'-' | b'0'..=b'9' => {
                self.number()?;
                self.leaf(start);
                Some(())
            }
            _ => self.literal(),
        }
    }

    fn leaf(&mut self, start: usize) {
        if !self.leaves {
            return;
        }
        let raw = self.raw(start);
        if let Some(with) = self.hooks.leaf(&self.path, raw) {
            self.edits.push((start, self.pos, with));
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            let key_start = self.pos;
            self.string()?;
            let key = key(self.raw(key_start))?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            let (start, mark) = (self.pos, self.edits.len());
            let key = if self.leaves {
                self.path.push(key);
                self.value(depth + 1)?;
                self.path.pop().unwrap_or_default()
            } else {
                self.value(depth + 1)?;
                key
            };
            let raw = self.raw(start);
            if let Some(with) = self.hooks.member(&key, raw) {
                // The whole value goes: edits inside it are void.
                self.edits.truncate(mark);
                self.edits.push((start, self.pos, with));
            }
            self.ws();
            if self.eat(b',').is_some() {
                continue;
            }
            return self.eat(b'}');
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            if self.leaves {
                self.path.push(Cow::Borrowed("*"));
                self.value(depth + 1)?;
                self.path.pop();
            } else {
                self.value(depth + 1)?;
            }
            self.ws();
            if self.eat(b',').is_some() {
                continue;
            }
            return self.eat(b']');
        }
    }

    /// RFC 8259 §7: no raw control characters; escapes are checked when decoded.
    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        // Eight plain bytes at a time, then byte by byte from the first that is not.
        while let Some(word) = self.src.get(self.pos..self.pos + 8) {
            if super::json_out::flag(u64::from_le_bytes(word.try_into().ok()?)) != 0 {
                break;
            }
            self.pos += 8;
        }
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => self.pos += 2,
                0..=0x1f => return None,
                _ => self.pos += 1,
            }
        }
    }

    /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn literal(&mut self) -> Option<()> {
        let rest = &self.src[self.pos..];
        let word: &[u8] = [&b"true"[..], b"false", b"null"]
            .into_iter()
            .find(|w| rest.starts_with(w))?;
        self.pos += word.len();
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Redact(&'static str);
    impl Hooks for Redact {
        fn member(&mut self, key: &str, _: &str) -> Option<String> {
            (key == self.0).then(|| quote("REDACTED"))
        }
        fn leaves(&self) -> bool {
            false
        }
        fn leaf(&mut self, _: &[Cow<str>], _: &str) -> Option<String> {
            None
        }
    }

    #[test]
    fn keeps_every_byte_but_the_edited() {
        let doc = "{ \"z\":1E3, \"big\" : 123456789012345678901234567890,\n\"p\":19.990, \"secret\": {\"a\":[1,2]}, \"k\\u0065y\":\"v\"}";
        let out = edit(doc, &mut Redact("secret")).unwrap();
        assert_eq!(out, doc.replace("{\"a\":[1,2]}", "\"REDACTED\""));
        let out = edit(doc, &mut Redact("key")).unwrap();
        assert_eq!(out, doc.replace("\"v\"", "\"REDACTED\""));
    }

    #[test]
    fn refuses_what_is_not_json() {
        for bad in [
            "", "{", "{\"a\":}", "[1,]", "01", "1.", "\"a\nb\"", "{} x", "tru",
        ] {
            assert!(edit(bad, &mut Redact("a")).is_none(), "{bad:?}");
        }
        // Past the first eight bytes too (the scan goes a word at a time).
        assert!(edit("\"0123456789ab\ncdef\"", &mut Redact("a")).is_none());
        let long = "{\"a long key with \\\"quotes\\\" past eight\":\"and a value of many words\"}";
        assert_eq!(edit(long, &mut Redact("x")).unwrap(), long);
        assert_eq!(
            edit(long, &mut Redact("a long key with \"quotes\" past eight")).unwrap(),
            "{\"a long key with \\\"quotes\\\" past eight\":\"REDACTED\"}"
        );
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert!(edit(&deep, &mut Redact("a")).is_none());
        assert_eq!(
            edit(" [true, null ,-0.5e-3] ", &mut Redact("a")).unwrap(),
            " [true, null ,-0.5e-3] "
        );
    }
}
