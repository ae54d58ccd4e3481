//! One JSON-RPC 2.0 message as an MCP client POSTs it (JSON-RPC 2.0 §4–5; MCP "Base
//! Protocol: Messages"): what it is (a request, a notification, a response to the server),
//! its `id` as written, its method, and the name it acts on — `params.name` of
//! `tools/call` and `prompts/get`, `params.uri` of the `resources/*` calls on one resource.
//! Read once from the bounded request body, by one pass by hand ([`members`]) or, for
//! what that pass is not sure of, by serde_json; everything else in it (the arguments)
//! is skipped, not kept. What is not a JSON-RPC 2.0 message is not MCP; what claims to be one
//! and is malformed (a batch, a wrong type, a huge id, nesting past serde_json's depth of
//! 128, a key written twice) is [`Invalid`]: a server could read it otherwise than
//! tollgate did, so it is refused rather than judged.

use super::members::{self, Members};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The longest `id` and method accepted, in bytes as written: ids are counters or UUIDs,
/// methods a few words; a megabyte-long id is an attack on whoever echoes it.
pub const MAX_ID: usize = 256;
pub const MAX_METHOD: usize = 256;
/// The longest name (a tool's, a prompt's, a resource's URI) accepted.
pub const MAX_NAME: usize = 4096;
/// The deepest nesting accepted (serde_json's own limit, and Python's parser falls over
/// not far past it): the skipped arguments are checked too, as the server parses them.
pub const MAX_DEPTH: usize = 128;

/// Where `json` (already parsed, so well formed) first nests deeper than `max`.
fn too_deep(json: &[u8], max: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in json.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// What kind of JSON-RPC message a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request: it has an `id` and expects an answer.
    Request,
    /// A notification: no `id`, no answer.
    Notification,
    /// A response to a request the server made (2025-11-25: sampling, elicitation).
    Response,
}

/// An MCP message, as a policy matches it and diagnosis shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub kind: Kind,
    /// The `id` as written (JSON text: `7`, `"a1"`), echoed in tollgate's own errors.
    pub id: Option<Box<str>>,
    /// The JSON-RPC method (empty for a response).
    pub method: Box<str>,
    /// The tool or prompt name, or the resource URI, the call acts on.
    pub name: Option<Box<str>>,
    /// The protocol version the request's `_meta` names (2026-07-28 and later).
    pub version: Option<Box<str>>,
    /// What the server answered, once its answer passed (`mcp:` reads it).
    pub outcome: super::outcome::Slot,
}

impl Call {
    /// The tool a `tools/call` calls.
    pub fn tool(&self) -> Option<&str> {
        (&*self.method == "tools/call")
            .then_some(self.name.as_deref())
            .flatten()
    }

    /// As the dashboard's live view shows it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"method": &*self.method, "name": self.name.as_deref()})
    }
}

/// Why a body claiming to be JSON-RPC is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error(
        "a JSON-RPC batch (an array of messages): MCP removed batching in 2025-06-18; send one message per request"
    )]
    Batch,
    #[error("the body is not valid JSON-RPC: {0}")]
    Malformed(String),
}

/// The message `body` is, if it is one: `Ok(None)` when it is not JSON-RPC 2.0 at all (no
/// JSON object, or no `"jsonrpc": "2.0"`), so other APIs on the same host pass as before.
pub fn read(body: &[u8]) -> Result<Option<Call>, Invalid> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    match start.map(|i| body[i]) {
        Some(b'[') => return Err(Invalid::Batch),
        Some(b'{') => {}
        _ => return Ok(None),
    }
    // One pass by hand over a plain message; serde_json reads anything else (and says
    // what is wrong with it).
    let m = match members::read(body) {
        Some(m) => m,
        None => by_serde(body)?,
    };
    if m.jsonrpc != Some("\"2.0\"") {
        return Ok(None);
    }
    let id = m.id.map(id).transpose()?;
    let method = m
        .method
        .map(|v| text(v, "method", MAX_METHOD))
        .transpose()?;
    let kind = match (&method, &id, m.result || m.error) {
        (Some(_), Some(_), false) => Kind::Request,
        (Some(_), None, false) => Kind::Notification,
        (None, Some(_), true) => Kind::Response,
        _ => {
            return Err(Invalid::Malformed(
                "a message has `method` (a request or notification) or `result`/`error` with an `id` (a response), not both or neither".into(),
            ));
        }
    };
    let method = method.map(Cow::into_owned).unwrap_or_default();
    let (mut name, mut version) = (None, None);
    if m.params {
        let key = match method.as_str() {
            "tools/call" | "prompts/get" => Some(("params.name", m.name)),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                Some(("params.uri", m.uri))
            }
            _ => None,
        };
        if let Some((field, Some(v))) = key {
            name = Some(text(v, field, MAX_NAME)?.into());
        }
        if let Some(v) = m.version {
            version = Some(text(v, "params._meta.protocolVersion", 64)?.into());
        }
    }
    if kind == Kind::Request
        && matches!(method.as_str(), "tools/call" | "prompts/get")
        && name.is_none()
    {
        return Err(Invalid::Malformed(format!(
            "`{method}` needs `params.name`"
        )));
    }
    Ok(Some(Call {
        kind,
        id,
        method: method.into(),
        name,
        version,
        outcome: Default::default(),
    }))
}

/// The text of a member as written.
fn raw(v: Option<&RawValue>) -> Option<&str> {
    v.map(RawValue::get)
}

/// The top level, the members wanted borrowed as written (JSON-RPC 2.0 §4); other
/// members are skipped. A member written twice fails, as serde's derive refuses
/// duplicates; `params` and its `_meta` must be objects.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<Params<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    name: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    uri: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(
        borrow,
        default,
        rename = "io.modelcontextprotocol/protocolVersion",
        deserialize_with = "present"
    )]
    version: Option<&'a RawValue>,
}

/// A member that is there, `null` included (an `Option` alone reads `null` as absent, and
/// `"id": null` is not a notification).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn malformed(e: serde_json::Error) -> Invalid {
    Invalid::Malformed(e.to_string())
}

/// The members of `body` as serde_json reads them: what [`members::read`] leaves (an
/// escaped or repeated key, a malformed message, nesting past the limit).
pub fn by_serde(body: &[u8]) -> Result<Members<'_>, Invalid> {
    let m: Message<'_> = serde_json::from_slice(body).map_err(malformed)?;
    // serde_json skips what it does not keep without a depth limit: the server may
    // parse it with one. Counting the brackets first spares the walk of nearly every
    // message (fewer brackets than the limit cannot nest deeper).
    let brackets = memchr::memchr2_iter(b'[', b'{', body).count();
    if brackets > MAX_DEPTH
        && let Some(at) = too_deep(body, MAX_DEPTH)
    {
        return Err(Invalid::Malformed(format!(
            "nested deeper than {MAX_DEPTH} levels (at byte {at})"
        )));
    }
    let params = m.params.as_ref();
    Ok(Members {
        jsonrpc: raw(m.jsonrpc),
        id: raw(m.id),
        method: raw(m.method),
        result: m.result.is_some(),
        error: m.error.is_some(),
        params: params.is_some(),
        name: raw(params.and_then(|p| p.name)),
        uri: raw(params.and_then(|p| p.uri)),
        version: raw(params.and_then(|p| p.meta.as_ref()?.version)),
    })
}

/// An `id`: a string or an integer (MCP: "MUST be a string or integer"; not null), at most
/// [`MAX_ID`] bytes as written.
fn id(s: &str) -> Result<Box<str>, Invalid> {
    if s.len() > MAX_ID {
        return Err(Invalid::Malformed(format!(
            "`id` is {} bytes; at most {MAX_ID} are accepted",
            s.len()
        )));
    }
    let integer = s
        .strip_prefix('-')
        .unwrap_or(s)
        .bytes()
        .all(|b| b.is_ascii_digit())
        && !s.is_empty()
        && s != "-";
    if !(integer || s.starts_with('"')) {
        return Err(Invalid::Malformed(format!(
            "`id` must be a string or an integer, not `{s}`"
        )));
    }
    Ok(s.into())
}

/// A string member, decoded, at most `max` bytes.
fn text<'a>(raw: &'a str, field: &str, max: usize) -> Result<Cow<'a, str>, Invalid> {
    if raw.len() > max + 2 {
        return Err(Invalid::Malformed(format!(
            "`{field}` is longer than {max} bytes"
        )));
    }
    // A string without escapes is its text between the quotes (the reader checked it).
    if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'))
        && !inner.contains('\\')
    {
        return Ok(Cow::Borrowed(inner));
    }
    let s: String = serde_json::from_str(raw)
        .map_err(|_| Invalid::Malformed(format!("`{field}` must be a string")))?;
    Ok(Cow::Owned(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: &str) -> Call {
        read(body.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn calls_are_read_in_both_revisions() {
        let c = call(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":[2,{"c":3}]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        );
        assert_eq!(c.kind, Kind::Request);
        assert_eq!(c.id.as_deref(), Some("2"));
        assert_eq!(c.tool(), Some("add"));
        assert_eq!(c.version.as_deref(), Some("2026-07-28"));
        let c = call(
            r#"{"jsonrpc":"2.0","id":"a\"1","method":"resources/read","params":{"uri":"file:///x"}}"#,
        );
        assert_eq!(c.id.as_deref(), Some(r#""a\"1""#));
        assert_eq!(c.name.as_deref(), Some("file:///x"));
        assert_eq!(c.tool(), None);
        let c = call(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!((c.kind, c.id), (Kind::Notification, None));
        let c = call(r#"{"jsonrpc":"2.0","id":5,"result":{"action":"accept"}}"#);
        assert_eq!(c.kind, Kind::Response);
        // An escaped name is read as the server reads it.
        assert_eq!(
            call(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"del\u0065te"}}"#
            )
            .tool(),
            Some("delete")
        );
    }

    #[test]
    fn what_is_not_json_rpc_is_not_mcp() {
        for body in [
            "",
            "hello",
            r#"{"model":"gpt-4o"}"#,
            r#"{"jsonrpc":"1.0","method":"x"}"#,
            "42",
        ] {
            assert_eq!(read(body.as_bytes()), Ok(None), "{body}");
        }
    }

    #[test]
    fn hostile_messages_are_refused() {
        let batch = format!(
            "[{}]",
            vec![r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#; 10_000].join(",")
        );
        assert_eq!(read(batch.as_bytes()), Err(Invalid::Batch));
        // Brackets inside strings are text, not nesting.
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a","arguments":{{"q":"{}\"{}"}}}}}}"#,
            "[".repeat(500),
            "{".repeat(500)
        );
        assert!(read(text.as_bytes()).unwrap().is_some());
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a","arguments":{}1{}}}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let huge_id = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
            "9".repeat(1 << 20)
        );
        let cases = [
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#.into(),
            // A key twice: which one a server reads is its own choice.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"delete"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call""#.into(),
            deep,
            huge_id,
        ];
        for body in cases {
            assert!(
                matches!(read(body.as_bytes()), Err(Invalid::Malformed(_))),
                "{}",
                &body[..body.len().min(120)]
            );
        }
    }
}
