//! A complete JSON answer that arrived in one piece (its length all of it), read in one
//! pass over the buffer: the values of the answer's keys of its top-level object, as
//! [`super::scan::Scan`] keeps them, without the scan's byte-by-byte state. Like the
//! scan, it checks no more of the grammar than it needs to find the top-level members
//! (the client parses the answer); anything it is not sure of (a top-level array, a key
//! with an escape, a member it cannot delimit, more kept values than [`MAX_FOUND`]) is
//! `None`, and the scan reads the answer. A test holds the two to the same values.

use super::scan::NESTED;
use crate::json::swar;

/// The most kept values read this way (an answer names its usage and model once each).
pub const MAX_FOUND: usize = 4;

/// What the pass kept: each value's key (its index in the keys watched), its text, and
/// whether the reader of the first key read it ([`read`]'s `first`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found<'a> {
    values: [(usize, &'a [u8], bool); MAX_FOUND],
    len: usize,
}

impl<'a> Found<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (usize, &'a [u8], bool)> + '_ {
        self.values[..self.len].iter().copied()
    }
}

/// The values of `wanted` keys of `answer`'s top-level object, each at most `cap` bytes
/// (a longer one is not kept, as the scan drops it). `first` may read a value of the
/// first key as the pass reaches it, given the text from the value's start: its length
/// when it did (the pass goes on past it, instead of delimiting it and leaving it to be
/// read again), `None` to leave it to the caller.
pub fn read<'a>(
    wanted: &[&str],
    answer: &'a [u8],
    cap: usize,
    mut first: impl FnMut(&'a [u8]) -> Option<usize>,
) -> Option<Found<'a>> {
    let b = answer;
    let mut found = Found::default();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (ws(b, i + 1) == b.len()).then_some(found);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let end = i + 1 + swar::string_end(&b[i + 1..])?;
        if b[end] != b'"' {
            return None;
        }
        let key = &b[i + 1..end];
        i = ws(b, end + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        // The value as the scan keeps it: from the colon to the comma or brace, its
        // whitespace with it (and counted against the cap).
        let start = i + 1;
        let value = ws(b, start);
        // The length and first byte first: most top-level keys are none of the few
        // watched, and a byte comparison is cheaper than a call to compare the bytes.
        let k = wanted.iter().position(|w| {
            let w = w.as_bytes();
            w.len() == key.len() && w.first() == key.first() && w == key
        });
        let read = match k {
            Some(0) => first(&b[value..]),
            _ => None,
        };
        i = ws(b, read.map_or_else(|| skip(b, value), |n| Some(value + n))?);
        if let Some(k) = k
            && i - start <= cap
        {
            *found.values.get_mut(found.len)? = (k, &b[start..i], read.is_some());
            found.len += 1;
        }
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => return (ws(b, i + 1) == b.len()).then_some(found),
            _ => return None,
        }
    }
}

/// Past JSON's whitespace (RFC 8259 §2) from `i`.
fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Past the value at `i`: a string to its closing quote, an object or array to the
/// bracket that closes it (strings skipped, brackets counted, as the scan counts them), a
/// number or literal to its last letter.
fn skip(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string(b, i + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                i += b[i..].iter().position(|c| NESTED[*c as usize])?;
                let c = b[i];
                i += 1;
                match c {
                    b'"' => i = string(b, i)?,
                    b'{' | b'[' => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i);
                        }
                    }
                }
            }
        }
        _ => {
            let n = b[i..]
                .iter()
                .position(|c| !(c.is_ascii_alphanumeric() || b"+-.".contains(c)))
                .unwrap_or(b.len() - i);
            (n > 0).then_some(i + n)
        }
    }
}

/// Past the closing quote of the string whose text starts at `i`.
fn string(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        i += swar::string_end(b.get(i..)?)?;
        if b[i] == b'"' {
            return Some(i + 1);
        }
        // A backslash: the byte it escapes goes with it.
        i += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::scan::Scan;

    const KEYS: &[&str] = &["usage", "model"];

    /// Whether the pass read `answer`; when it did, the scan keeps the same values, and
    /// so does the pass whose first key's values are read by the usage reader where it
    /// reads them.
    fn agrees(answer: &[u8]) -> bool {
        let Some(found) = read(KEYS, answer, 64, |_| None) else {
            return false;
        };
        let mut scan = Scan::new(KEYS, 64);
        scan.feed(answer);
        let scanned: Vec<(usize, &[u8])> = scan.found.iter().map(|(k, v)| (*k, &v[..])).collect();
        fn texts<'a>(f: &Found<'a>) -> Vec<(usize, &'a [u8])> {
            f.iter().map(|(k, v, _)| (k, v)).collect()
        }
        assert_eq!(
            texts(&found),
            scanned,
            "{}",
            String::from_utf8_lossy(answer)
        );
        let api = crate::protocol::openai_chat::API;
        let by_usage = read(KEYS, answer, 64, |v| {
            crate::llm::usage::Reported::parse_prefix(api, v).map(|(_, n)| n)
        });
        let by_usage = by_usage.expect("read as without the usage reader");
        assert_eq!(
            texts(&by_usage),
            scanned,
            "{}",
            String::from_utf8_lossy(answer)
        );
        for (k, v, read) in by_usage.iter() {
            let v = v.trim_ascii();
            if read {
                assert_eq!(k, 0);
                let parsed = crate::llm::usage::Reported::parse_prefix(api, v);
                assert_eq!(
                    parsed.map(|(r, _)| r),
                    crate::llm::usage::Reported::parse(api, v)
                );
            }
        }
        true
    }

    #[test]
    fn a_usage_object_is_read_once_as_the_pass_reaches_it() {
        let answer = br#"{"usage": {"prompt_tokens": 3, "completion_tokens": 4}, "model": "m", "usage": null}"#;
        let api = crate::protocol::openai_chat::API;
        let mut read_by_it = 0;
        let found = read(KEYS, answer, 64, |v| {
            read_by_it += 1;
            crate::llm::usage::Reported::parse_prefix(api, v).map(|(_, n)| n)
        })
        .unwrap();
        // Called at both usage keys; `null` is left to the caller.
        assert_eq!(read_by_it, 2);
        let got: Vec<_> = found.iter().collect();
        assert_eq!(
            got,
            [
                (
                    0,
                    &br#" {"prompt_tokens": 3, "completion_tokens": 4}"#[..],
                    true
                ),
                (1, &br#" "m""#[..], false),
                (0, &br#" null"#[..], false),
            ]
        );
    }

    #[test]
    fn what_the_pass_keeps_the_scan_keeps_on_generated_answers() {
        const BASES: &[&str] = &[
            r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"t0 t1 \"t2\"","refusal":null,"role":"assistant"}}],"created":1700000000,"id":"chatcmpl-standin","model":"gpt-4o-mini-2025-01-01","object":"chat.completion","usage":{"completion_tokens":16,"prompt_tokens":27,"total_tokens":43}}"#,
            r#" { "id" : "msg_1" , "model" : "claude-sonnet-4-5" , "content" : [ { "type" : "text" , "text" : "Hi\n" } ] , "usage" : { "input_tokens" : 10 , "output_tokens" : 7 } } "#,
            r#"{"usage":{"input_tokens":1},"output":[{"content":[{"text":"{\"usage\":1}"}]}],"model":"m","usage":null}"#,
        ];
        const SNIPPETS: &[&str] = &[
            r#""usage":{"prompt_tokens":1},"#,
            r#""model":"x","#,
            r#""mod\u0065l":"y","#,
            r#""model":"a very long name past the cap of sixty-four bytes, dropped","#,
            "\\\"",
        ];
        crate::json::mutants::check_mutants(BASES, SNIPPETS, 40_000, agrees);
    }
}
