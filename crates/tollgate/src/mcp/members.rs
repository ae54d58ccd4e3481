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
use crate::json::walk::Walk;

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
    let mut p = Walk::new(body, MAX_DEPTH);
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
                return params(p, text, &mut m);
            }
            _ => return p.value(1),
        };
        raw(p, text, slot, 1)
    })?;
    p.ends().then_some(m)
}

/// `params`: its `name`, `uri` and `_meta`, each at most once; the rest skipped.
fn params<'a>(p: &mut Walk<'a>, text: &'a str, m: &mut Members<'a>) -> Option<()> {
    let (mut name, mut uri, mut meta) = (None, None, false);
    p.object(2, |p, key| match key {
        b"name" => raw(p, text, &mut name, 2),
        b"uri" => raw(p, text, &mut uri, 2),
        b"_meta" => {
            if std::mem::replace(&mut meta, true) || p.peek() != Some(b'{') {
                return None;
            }
            let mut version = None;
            p.object(3, |p, key| match key {
                VERSION_KEY => raw(p, text, &mut version, 3),
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

/// A watched member's value, kept as written (a slice of `text`, the walk's bytes checked
/// as UTF-8); a second one is `None`.
fn raw<'a>(
    p: &mut Walk<'a>,
    text: &'a str,
    slot: &mut Option<&'a str>,
    depth: usize,
) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    let start = p.i;
    p.value(depth)?;
    *slot = Some(text.get(start..p.i)?);
    Some(())
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
        const SNIPPETS: &[&str] = &[
            r#""name":"x","#,
            r#""id":1,"#,
            r#""params":{},"#,
            r#""_meta":{"io.modelcontextprotocol/protocolVersion":"v"},"#,
            r#""n\u0061me":"y","#,
            r#""result":1,"#,
        ];
        // Most mutations break the message; enough of them still read by hand.
        crate::json::mutants::check_mutants(BASES, SNIPPETS, 40_000, agrees);
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
