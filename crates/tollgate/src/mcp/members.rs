//! The members of a JSON-RPC message that [`super::envelope`] reads, found by one pass
//! over its bytes: the top level's `jsonrpc`, `id`, `method`, `result`, `error`, and
//! `params.name`, `params.uri`, `params._meta`'s protocol version, each as written. The
//! pass checks the whole message is JSON (RFC 8259: its grammar, UTF-8, nesting at most
//! [`super::envelope::MAX_DEPTH`]) and answers only what it is sure of: anything unusual —
//! a watched key written with an escape or twice, `params` or `_meta` not an object,
//! anything malformed — is `None`, and serde_json reads the message instead (and says
//! what is wrong with it). So this pass never refuses what serde_json would take, and a
//! test holds the two to the same members on generated messages.

use super::envelope::MAX_DEPTH;

/// The members, each the raw JSON text of its value.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Members<'a> {
    pub jsonrpc: Option<&'a str>,
    pub id: Option<&'a str>,
    pub method: Option<&'a str>,
    pub result: bool,
    pub error: bool,
    /// `params` was there (an object).
    pub params: bool,
    pub name: Option<&'a str>,
    pub uri: Option<&'a str>,
    pub version: Option<&'a str>,
}

/// The key of `_meta` naming the protocol version (2026-07-28).
pub const VERSION_KEY: &[u8] = b"io.modelcontextprotocol/protocolVersion";

/// The members of `body`, or `None` when it is anything but a plain, well-formed message.
pub fn read(body: &[u8]) -> Option<Members<'_>> {
    // RFC 8259 §8.1: JSON is UTF-8; checked once here, so slices of it are `str`s.
    let text = std::str::from_utf8(body).ok()?;
    let mut p = Parser {
        text,
        b: body,
        i: 0,
    };
    let mut m = Members::default();
    p.ws();
    p.object(1, |p, key| {
        let slot = match key {
            b"jsonrpc" => &mut m.jsonrpc,
            b"id" => &mut m.id,
            b"method" => &mut m.method,
            b"result" | b"error" => {
                let seen = if key == b"result" {
                    &mut m.result
                } else {
                    &mut m.error
                };
                if std::mem::replace(seen, true) {
                    return None;
                }
                return p.value(1);
            }
            b"params" => {
                if std::mem::replace(&mut m.params, true) || p.peek() != Some(b'{') {
                    return None;
                }
                return p.params(&mut m);
            }
            _ => return p.value(1),
        };
        p.raw(slot, 1)
    })?;
    p.ws();
    (p.i == body.len()).then_some(m)
}

struct Parser<'a> {
    /// The body, checked as UTF-8 (a value's slice of it is a `str` at no cost).
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// RFC 8259 §2: whitespace is space, tab, line feed and carriage return.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// `params`: its `name`, `uri` and `_meta`, each at most once; the rest skipped.
    fn params(&mut self, m: &mut Members<'a>) -> Option<()> {
        let (mut name, mut uri, mut meta) = (None, None, false);
        self.object(2, |p, key| match key {
            b"name" => p.raw(&mut name, 2),
            b"uri" => p.raw(&mut uri, 2),
            b"_meta" => {
                if std::mem::replace(&mut meta, true) || p.peek() != Some(b'{') {
                    return None;
                }
                let mut version = None;
                p.object(3, |p, key| match key {
                    VERSION_KEY => p.raw(&mut version, 3),
                    _ => p.value(3),
                })?;
                m.version = version;
                Some(())
            }
            _ => p.value(2),
        })?;
        m.name = name;
        m.uri = uri;
        Some(())
    }

    /// A watched member's value, kept as written; a second one is `None`.
    fn raw(&mut self, slot: &mut Option<&'a str>, depth: usize) -> Option<()> {
        if slot.is_some() {
            return None;
        }
        let start = self.i;
        self.value(depth)?;
        *slot = Some(self.text.get(start..self.i)?);
        Some(())
    }

    /// An object at nesting `depth` (its own), `member` called at each key (its raw
    /// bytes: a key with an escape is `None`) with the parser at the value.
    fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
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
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1, |p, _| p.value(depth + 1)),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.value(depth)?;
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
    fn number(&mut self) -> Option<()> {
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
    /// escape. Its runs are searched a word at a time ([`crate::llm::swar`]).
    fn string(&mut self) -> Option<bool> {
        self.eat(b'"')?;
        let mut escaped = false;
        loop {
            self.i += crate::llm::swar::string_stop(self.b.get(self.i..)?)?;
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
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::envelope::by_serde;

    const BASES: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":[2.5e-3,{"c":null}],"s":"x\"\\\u00e9\n"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcp","version":"0.1.0"}}}}"#,
        r#" { "jsonrpc" : "2.0" , "id" : "a-1" , "method" : "resources/read" , "params" : { "uri" : "file:///x" } } "#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":-0,"result":{"action":"accept","n":[true,false,-12.0E+2]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"é"}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
    ];

    /// xorshift64: the same cases on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn agrees(body: &[u8]) -> bool {
        match read(body) {
            Some(m) => {
                assert_eq!(Ok(m), by_serde(body), "{}", String::from_utf8_lossy(body));
                true
            }
            None => false,
        }
    }

    #[test]
    fn plain_messages_are_read_by_hand_as_serde_reads_them() {
        for b in BASES {
            assert!(agrees(b.as_bytes()), "{b}");
        }
        let m = read(BASES[0].as_bytes()).unwrap();
        assert_eq!(
            (m.id, m.method, m.name, m.version),
            (
                Some("7"),
                Some("\"tools/call\""),
                Some("\"add\""),
                Some("\"2026-07-28\"")
            )
        );
    }

    #[test]
    fn what_the_hand_reads_serde_reads_the_same_on_generated_messages() {
        const BYTES: &[u8] = b"{}[]\"\\:,01-.eE+tfnuax _\n\x01\xc3\xa9\xff";
        const SNIPPETS: &[&str] = &[
            r#""name":"x","#,
            r#""id":1,"#,
            r#""params":{},"#,
            r#""_meta":{"io.modelcontextprotocol/protocolVersion":"v"},"#,
            r#""n\u0061me":"y","#,
            r#""result":1,"#,
            "\\u00",
            "\\ud800",
            "[",
            "]",
            "1e400",
            "01",
            "\"",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut by_hand, mut cases) = (0, 0);
        for _ in 0..40_000 {
            let mut b = BASES[rng.below(BASES.len())].as_bytes().to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(b.len() + 1);
                match rng.below(4) {
                    0 if at < b.len() => b[at] = BYTES[rng.below(BYTES.len())],
                    1 if at < b.len() => {
                        b.remove(at);
                    }
                    2 => b.insert(at, BYTES[rng.below(BYTES.len())]),
                    _ => {
                        let s = SNIPPETS[rng.below(SNIPPETS.len())].as_bytes();
                        b.splice(at..at, s.iter().copied());
                    }
                }
            }
            cases += 1;
            by_hand += usize::from(agrees(&b));
        }
        // Most mutations break the message; enough of them still read by hand.
        assert!(by_hand > cases / 20, "{by_hand} of {cases}");
    }

    #[test]
    fn nesting_is_read_by_hand_to_the_limit_and_no_further() {
        for depth in [126, 127, 128, 129, 200] {
            // The top level and `params` are two levels; `arguments` the third.
            let inner = depth - 2;
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a","arguments":{}1{}}}}}"#,
                "[".repeat(inner),
                "]".repeat(inner)
            );
            assert_eq!(
                read(body.as_bytes()).is_some(),
                depth <= MAX_DEPTH,
                "{depth}"
            );
            agrees(body.as_bytes());
            assert_eq!(
                by_serde(body.as_bytes()).is_ok(),
                depth <= MAX_DEPTH,
                "{depth}"
            );
        }
    }
}
