//! A captured body as HAR text: the bytes as they were sent (decoded from gzip, deflate
//! or br only), with secrets replaced in place — JSON members and form fields under a
//! secret name, credential values anywhere — and, with obfuscation on, leaves hashed.
//! Nothing else is rewritten: a HAR is evidence.

use super::json_edit::{self, Hooks};
use super::redact::{REDACTED, Secrets};
use crate::paths::percent_decode;
use base64::Engine as _;
use http::HeaderMap;
use std::borrow::Cow;
use std::io::Read;

/// Most bytes a compressed body is decoded to.
const MAX_DECODED: u64 = 16 << 20;

pub fn content_type(h: &HeaderMap) -> &str {
    h.get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The media type without parameters, lower case.
fn essence(mime: &str) -> Cow<'_, str> {
    let m = mime.split(';').next().unwrap_or("").trim();
    if m.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(m.to_ascii_lowercase())
    } else {
        Cow::Borrowed(m)
    }
}

fn is_text(m: &str) -> bool {
    m.starts_with("text/")
        || m.ends_with("json")
        || m.ends_with("+xml")
        || m == "application/xml"
        || m == "application/javascript"
        || m == "application/x-www-form-urlencoded"
        || m == "application/x-ndjson"
        || m.is_empty()
}

/// The body as HAR text (borrowed when nothing in it is replaced), and `Some("base64")`
/// when it is not text.
pub fn text<'d>(
    data: &'d [u8],
    mime: &str,
    s: &mut Secrets,
) -> (Cow<'d, str>, Option<&'static str>) {
    if data.is_empty() {
        return (Cow::Borrowed(""), None);
    }
    let m = essence(mime);
    let data: Cow<'d, [u8]> = if m == "multipart/form-data" {
        multipart(data, mime, s)
    } else {
        Cow::Borrowed(data)
    };
    if is_text(&m) || m.starts_with("multipart/") {
        let text: Option<Cow<'d, str>> = match &data {
            Cow::Borrowed(d) => std::str::from_utf8(d).ok().map(Cow::Borrowed),
            Cow::Owned(d) => std::str::from_utf8(d)
                .ok()
                .map(|t| Cow::Owned(t.to_owned())),
        };
        if let Some(text) = text {
            if m == "application/x-www-form-urlencoded" {
                return (Cow::Owned(form(&text, s)), None);
            }
            return match json_edit::edit(&text, &mut JsonHooks { s }) {
                Some(Cow::Owned(edited)) => (Cow::Owned(edited), None),
                _ => (text, None),
            };
        }
    }
    let data = scrub_bytes(&data, s);
    (
        Cow::Owned(base64::engine::general_purpose::STANDARD.encode(&data)),
        Some("base64"),
    )
}

/// JSON: members under a secret name become `"REDACTED"`; leaves are hashed when
/// obfuscating (but for excluded paths).
struct JsonHooks<'s, 'a> {
    s: &'s mut Secrets<'a>,
}

impl Hooks for JsonHooks<'_, '_> {
    fn member(&mut self, key: &str, raw: &str) -> Option<String> {
        if !self.s.red.is_secret(key) {
            return None;
        }
        match raw.as_bytes().first() {
            Some(b'"') => self
                .s
                .found(json_edit::decode_string(raw).unwrap_or_default()),
            Some(b'-' | b'0'..=b'9') => self.s.found(raw.to_owned()),
            _ => {}
        }
        Some(json_edit::quote(REDACTED))
    }

    fn leaves(&self) -> bool {
        self.s.red.obfuscator().is_some()
    }

    fn leaf(&mut self, path: &[Cow<str>], raw: &str) -> Option<String> {
        let o = self.s.red.obfuscator()?;
        let p: Vec<&str> = path.iter().map(|k| &**k).collect();
        if o.json_excluded(&p) {
            return None;
        }
        let text = if raw.starts_with('"') {
            json_edit::decode_string(raw)?
        } else {
            raw.to_owned()
        };
        self.s.hide(&text).map(|t| json_edit::quote(&t))
    }
}

/// `application/x-www-form-urlencoded` (a query string's syntax): values of secret names
/// redacted, others hashed when obfuscating; names, order and encoding kept.
fn form(text: &str, s: &mut Secrets) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, pair) in text.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let Some((n, v)) = pair.split_once('=') else {
            out.push_str(pair);
            continue;
        };
        let name = percent_decode(n).unwrap_or_else(|| n.to_owned());
        let value = percent_decode(v).unwrap_or_else(|| v.to_owned());
        out.push_str(n);
        out.push('=');
        if s.red.is_secret(&name) {
            s.found(value);
            s.found(v.to_owned());
            out.push_str(REDACTED);
        } else if let Some(shown) = s
            .red
            .query_obfuscated(&name)
            .then(|| s.hide(&value))
            .flatten()
        {
            out.push_str(&shown);
        } else {
            out.push_str(v);
        }
    }
    out
}

/// `multipart/form-data` (RFC 7578): the content of a part whose field name is secret
/// becomes `REDACTED`; every other byte is kept.
fn multipart<'d>(data: &'d [u8], mime: &str, s: &mut Secrets) -> Cow<'d, [u8]> {
    let Some(boundary) = mime.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.eq_ignore_ascii_case("boundary")
            .then(|| v.trim_matches('"').to_owned())
    }) else {
        return Cow::Borrowed(data);
    };
    let delimiter = format!("\r\n--{boundary}");
    let finder = memchr::memmem::Finder::new(delimiter.as_bytes());
    // The first delimiter may start the body (no CRLF before it).
    let first = format!("--{boundary}");
    let Some(mut at) = memchr::memmem::find(data, first.as_bytes()) else {
        return Cow::Borrowed(data);
    };
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    // Past the delimiter's line: the part's headers, then a blank line, then content.
    while let Some(line_end) = memchr::memmem::find(&data[at..], b"\r\n").map(|i| at + i + 2) {
        let Some(head_end) =
            memchr::memmem::find(&data[line_end..], b"\r\n\r\n").map(|i| line_end + i + 4)
        else {
            break;
        };
        let next = finder
            .find(&data[head_end..])
            .map_or(data.len(), |i| head_end + i);
        let head = String::from_utf8_lossy(&data[line_end..head_end]);
        if field_name(&head).is_some_and(|n| s.red.is_secret(&n)) {
            if let Ok(v) = std::str::from_utf8(&data[head_end..next]) {
                s.found(v.to_owned());
            }
            let o = out.get_or_insert_with(|| Vec::with_capacity(data.len()));
            o.extend_from_slice(&data[copied..head_end]);
            o.extend_from_slice(REDACTED.as_bytes());
            copied = next;
        }
        if next >= data.len() {
            break;
        }
        at = next + 2;
    }
    match out {
        Some(mut o) => {
            o.extend_from_slice(&data[copied..]);
            Cow::Owned(o)
        }
        None => Cow::Borrowed(data),
    }
}

/// The `name` parameter of a part's `Content-Disposition: form-data` header.
fn field_name(head: &str) -> Option<String> {
    let line = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?;
    line.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.eq_ignore_ascii_case("name")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// Binary bodies: every known secret value's bytes replaced by `REDACTED` before the
/// body is base64-encoded (the writer's scrub cannot see inside base64).
fn scrub_bytes<'d>(data: &'d [u8], s: &Secrets) -> Cow<'d, [u8]> {
    let mut out = Cow::Borrowed(data);
    for v in s.red.values().iter().chain(&s.own) {
        if memchr::memmem::find(&out, v.as_bytes()).is_none() {
            continue;
        }
        let mut next = Vec::with_capacity(out.len());
        let mut at = 0;
        for i in memchr::memmem::find_iter(&out, v.as_bytes()) {
            if i < at {
                continue;
            }
            next.extend_from_slice(&out[at..i]);
            next.extend_from_slice(REDACTED.as_bytes());
            at = i + v.len();
        }
        next.extend_from_slice(&out[at..]);
        out = Cow::Owned(next);
    }
    out
}

/// The body decoded from its `Content-Encoding` (gzip, deflate, br), as far as the
/// captured bytes go; `None` when not encoded or not decodable.
pub fn decode(h: &HeaderMap, data: &[u8]) -> Option<Vec<u8>> {
    let enc = h
        .get(http::header::CONTENT_ENCODING)?
        .to_str()
        .ok()?
        .trim()
        .to_ascii_lowercase();
    let mut out = Vec::new();
    let r = match enc.as_str() {
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(data)
            .take(MAX_DECODED)
            .read_to_end(&mut out),
        // RFC 9110 §8.4.1.2: "deflate" is zlib-wrapped; some servers send it raw.
        "deflate" => match flate2::read::ZlibDecoder::new(data)
            .take(MAX_DECODED)
            .read_to_end(&mut out)
        {
            Ok(n) => Ok(n),
            Err(_) => {
                out.clear();
                flate2::read::DeflateDecoder::new(data)
                    .take(MAX_DECODED)
                    .read_to_end(&mut out)
            }
        },
        "br" => brotli_decompressor::Decompressor::new(data, 4096)
            .take(MAX_DECODED)
            .read_to_end(&mut out),
        _ => return None,
    };
    // A truncated capture decodes as far as it goes.
    match r {
        Ok(_) => Some(out),
        Err(_) if !out.is_empty() => Some(out),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::har::redact::Redactor;

    fn secrets(red: &Redactor) -> Secrets<'_> {
        Secrets {
            red,
            own: Vec::new(),
        }
    }

    #[test]
    fn multipart_secret_field_is_redacted_in_place() {
        let red = Redactor::with_names(&["password"]);
        let mut s = secrets(&red);
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nalice\r\n--XyZ\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nhunter22\r\n--XyZ--\r\n";
        let out = multipart(body, "multipart/form-data; boundary=XyZ", &mut s);
        assert_eq!(
            &out[..],
            &String::from_utf8_lossy(body)
                .replace("hunter22", "REDACTED")
                .into_bytes()[..]
        );
        assert_eq!(s.own, vec!["hunter22".to_owned()]);
    }

    #[test]
    fn form_fields_keep_their_bytes() {
        let red = Redactor::with_names(&["client_secret"]);
        let mut s = secrets(&red);
        let out = form(
            "grant_type=client_credentials&client_secret=s3cr%2Ft&x=a+b",
            &mut s,
        );
        assert_eq!(
            out,
            "grant_type=client_credentials&client_secret=REDACTED&x=a+b"
        );
        assert!(s.own.contains(&"s3cr/t".to_owned()));
    }
}
