//! What an MCP server answered a call, read as the answer passes, never held: a result, a
//! result with `isError: true` (the tool ran and failed: MCP's tool errors), or a
//! JSON-RPC error (the call was refused or failed: JSON-RPC 2.0 §5.1). A JSON answer is
//! scanned as it streams; an SSE answer event by event, the last response in it
//! deciding. Only the top level's `result` and `error` keys and `result.isError` are
//! looked at; strings are skipped with `memchr`.

use crate::llm::scan::{KeyBuf, NESTED};
use std::sync::atomic::{AtomicU8, Ordering};

/// What the answer said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    /// Not (yet) known: no response in the answer, or not read.
    Unknown = 0,
    Ok = 1,
    /// `result.isError: true`.
    ToolError = 2,
    /// A JSON-RPC `error`.
    RpcError = 3,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unknown => "unknown",
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::RpcError => "rpc_error",
        }
    }

    fn of(v: u8) -> Self {
        match v {
            1 => Outcome::Ok,
            2 => Outcome::ToolError,
            3 => Outcome::RpcError,
            _ => Outcome::Unknown,
        }
    }
}

/// Where a call's outcome is written as its answer passes, and read by diagnosis when the
/// call ends (the call is shared: the remedy's answer watcher writes, diagnosis reads).
#[derive(Debug, Default)]
pub struct Slot(AtomicU8);

impl Clone for Slot {
    fn clone(&self) -> Self {
        Slot(AtomicU8::new(self.0.load(Ordering::Relaxed)))
    }
}

impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Slot {}

impl Slot {
    pub fn get(&self) -> Outcome {
        Outcome::of(self.0.load(Ordering::Relaxed))
    }

    pub fn set(&self, o: Outcome) {
        self.0.store(o as u8, Ordering::Relaxed);
    }
}

/// Which top-level member the scanner is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Top {
    None,
    Result,
    Error,
    Other,
}

/// The scanner of one JSON-RPC message (fed in pieces).
pub struct Scanner {
    depth: u32,
    in_str: bool,
    esc: bool,
    expect_key: bool,
    /// The key being read (at depth 1, or 2 inside `result`; `None` past the buffer's
    /// room: no key looked for is that long).
    key: Option<KeyBuf>,
    /// The last key read, waiting for its `:`.
    last_key: Option<KeyBuf>,
    top: Top,
    /// After `"isError":` inside `result`: the value's first byte decides.
    is_error_value: bool,
    /// The outcome is known for good: the rest is not looked at.
    done: bool,
    pub outcome: Outcome,
}

impl Default for Scanner {
    fn default() -> Self {
        Self {
            depth: 0,
            in_str: false,
            esc: false,
            expect_key: false,
            key: None,
            last_key: None,
            top: Top::None,
            is_error_value: false,
            done: false,
            outcome: Outcome::Unknown,
        }
    }
}

impl Scanner {
    /// Whether a key is read at the current depth: the top level's, and `result`'s own.
    fn keyed(&self) -> bool {
        self.depth == 1 || (self.depth == 2 && self.top == Top::Result)
    }

    pub fn feed(&mut self, data: &[u8]) {
        let mut i = 0;
        while i < data.len() && !self.done {
            if self.in_str {
                if !self.esc {
                    // To the string's next quote or backslash; a key's bytes on the
                    // way are kept.
                    let j = crate::json::swar::string_end(&data[i..]).unwrap_or(data.len() - i);
                    if let Some(k) = &mut self.key
                        && !k.extend(&data[i..i + j])
                    {
                        self.key = None;
                    }
                    i += j;
                    if i == data.len() {
                        return;
                    }
                }
                let c = data[i];
                i += 1;
                if self.esc {
                    self.esc = false;
                    // An escaped key is none of the keys looked for.
                    self.key = None;
                } else if c == b'\\' {
                    self.esc = true;
                } else if c == b'"' {
                    self.in_str = false;
                    if let Some(k) = self.key.take() {
                        self.last_key = Some(k);
                    }
                }
                continue;
            }
            // Where no key is read, only strings and brackets matter: skip the rest.
            if !self.keyed() && !self.is_error_value {
                match data[i..].iter().position(|c| NESTED[*c as usize]) {
                    Some(j) => i += j,
                    None => return,
                }
            }
            let c = data[i];
            i += 1;
            if self.is_error_value && !c.is_ascii_whitespace() {
                self.is_error_value = false;
                if c == b't' && self.outcome == Outcome::Ok {
                    self.outcome = Outcome::ToolError;
                }
                // `result.isError` decides (a result has one).
                self.done = true;
            }
            match c {
                b'"' => {
                    self.in_str = true;
                    self.key = (self.keyed() && self.expect_key).then(KeyBuf::default);
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    self.expect_key = c == b'{' && self.keyed();
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 1 {
                        // A result ended without `isError: true`: it stands.
                        self.done = self.top == Top::Result;
                        self.top = Top::Other;
                    }
                }
                b':' => {
                    self.expect_key = false;
                    if let Some(k) = self.last_key.take() {
                        self.key_read(k.as_bytes());
                    }
                }
                b',' if self.keyed() => self.expect_key = true,
                _ => {}
            }
        }
    }

    /// Reads `message`, the whole of what is fed ([`of_message`]); nothing after it is.
    pub fn whole(&mut self, message: &[u8]) {
        self.outcome = of_message(message);
        self.done = true;
    }

    /// A key at a watched depth, its `:` just read.
    fn key_read(&mut self, key: &[u8]) {
        match (self.depth, key) {
            (1, b"result") => {
                self.top = Top::Result;
                if self.outcome == Outcome::Unknown {
                    self.outcome = Outcome::Ok;
                }
            }
            (1, b"error") => {
                self.top = Top::Error;
                self.outcome = Outcome::RpcError;
                self.done = true;
            }
            (1, _) => self.top = Top::Other,
            (2, b"isError") if self.top == Top::Result => self.is_error_value = true,
            _ => {}
        }
    }
}

/// The outcome of one whole message: [`quick`]'s answer when it has one, else the
/// scanner's.
pub fn of_message(message: &[u8]) -> Outcome {
    if let Some(o) = quick(message) {
        return o;
    }
    let mut s = Scanner::default();
    s.feed(message);
    s.outcome
}

/// The common case, read from the keys' bytes alone: a whole message with a `"result"`
/// and no `"error"`, no `"method"` (a request or notification of the server's, whose
/// `params` may hold a `result`) and no `"isError"` followed by `true` anywhere is a
/// result that stands. A quote inside a string is escaped (`\"error\"`), so a string's
/// bytes never match a key followed by its closing quote; a string *value* `"error"`
/// does, and sends the message to the scanner, as anything this cannot settle does
/// (`None`). Every quote is looked at once; nothing is kept.
fn quick(message: &[u8]) -> Option<Outcome> {
    let mut result = false;
    let mut at = 0;
    // Quote by quote, a word at a time: an answer's quotes are a few bytes apart.
    while let Some(j) = crate::json::swar::quote(&message[at..]) {
        at += j + 1;
        let rest = &message[at..];
        // Most quotes open other keys and strings: their first byte rules them out.
        match rest.first() {
            Some(b'r') if rest.starts_with(b"result\"") => result = true,
            Some(b'e') if rest.starts_with(b"error\"") => return None,
            Some(b'm') if rest.starts_with(b"method\"") => return None,
            Some(b'i') => {
                if let Some(after) = rest.strip_prefix(b"isError\"") {
                    // `"isError" : true`: anything but `false` after the colon is not
                    // settled here.
                    let mut value = after.iter().copied().skip_while(u8::is_ascii_whitespace);
                    if value.next() != Some(b':')
                        || value.find(|c| !c.is_ascii_whitespace()) != Some(b'f')
                    {
                        return None;
                    }
                }
            }
            _ => {}
        }
    }
    result.then_some(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_read_in_any_pieces() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"isError: true"}],"isError":false}}"#,
                Outcome::Ok,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError" : true}}"#,
                Outcome::ToolError,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"isError":true},"isError":false}}"#,
                Outcome::Ok,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}}"#,
                Outcome::RpcError,
            ),
            (
                r#"{"jsonrpc":"2.0","id":"{\"result\":1}","error":{"code":1}}"#,
                Outcome::RpcError,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"result":1}}"#,
                Outcome::Unknown,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#,
                Outcome::Ok,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(of_message(text.as_bytes()), want, "{text}");
            for piece in [1, 3, 7] {
                let mut s = Scanner::default();
                for chunk in text.as_bytes().chunks(piece) {
                    s.feed(chunk);
                }
                assert_eq!(s.outcome, want, "{text} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn the_quick_reading_agrees_with_the_scanner_or_defers() {
        let cases = [
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"add: ok"}],"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError" :  false }}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"text":"say \"error\" and \"isError\":true"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"result":1}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"kind":"error"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":{"isError":true},"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#,
            r#"{"jsonrpc":"2.0","id":7}"#,
        ];
        let mut quick_ones = 0;
        for text in cases {
            let mut s = Scanner::default();
            s.feed(text.as_bytes());
            if let Some(o) = quick(text.as_bytes()) {
                assert_eq!(o, s.outcome, "{text}");
                quick_ones += 1;
            }
            assert_eq!(of_message(text.as_bytes()), s.outcome, "{text}");
        }
        // The plain results are settled without the scanner.
        assert_eq!(quick_ones, 4);
    }

    #[test]
    fn slots_carry_the_outcome() {
        let s = Slot::default();
        assert_eq!(s.get(), Outcome::Unknown);
        s.set(Outcome::ToolError);
        assert_eq!(s.clone().get(), Outcome::ToolError);
    }
}
