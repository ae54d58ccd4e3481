//! One captured call as a HAR 1.2 entry (http://www.softwareishard.com/blog/har-12-spec/),
//! redacted and obfuscated on the way. tollgate's own fields start with `_tollgate`, as
//! the spec allows for custom fields. The entry is written as JSON text straight from the
//! record (no `Value` tree, no intermediate structs): keys in sorted order, as entries
//! have always been written.

use super::Record;
use super::body::{self, content_type, decode};
use super::json_out::{bool as jbool, float, int, string};
use super::redact::{REDACTED, Secrets};
use crate::diagnosis::discovery::template;
use http::{HeaderMap, Version};
use serde_json::{Value, json};
use std::borrow::Cow;

/// Writes the entry's JSON text into `out`, and returns this entry's secret values: the
/// client's credentials and the values found under secret names in its bodies (the writer
/// scrubs them from the whole entry: a provider may echo them back anywhere).
pub fn write(r: &Record, out: &mut String) -> Vec<String> {
    let c = &r.capture;
    let mut red = Secrets {
        red: &c.redactor,
        own: c.redactor.request_secrets(&c.request_headers, &c.url),
    };
    // The bodies first: secrets found there are scrubbed from the heads too.
    let request_mime = content_type(&c.request_headers);
    let post_data = r
        .request_body
        .as_ref()
        .filter(|(_, n)| *n > 0)
        .map(|(data, size)| {
            let (text, encoding) = body::text(data, request_mime, &mut red);
            (text, encoding, *size > data.len() as u64, *size)
        });
    let (url, query_string) = url_and_query(&c.url, &red, r.template.as_deref());
    let response_body = c.response.as_ref().map(|h| {
        let data = &c.response_body.data;
        (decode(&h.headers, data), data)
    });
    let response_text = match (&c.response, &response_body) {
        (Some(h), Some((decoded, data))) => {
            let body: &[u8] = decoded.as_deref().unwrap_or(data);
            Some(body::text(body, content_type(&h.headers), &mut red))
        }
        _ => None,
    };
    let red = &red;

    own_fields(out, r);
    out.push_str(",\"cache\":{},\"request\":{\"bodySize\":");
    int(out, r.request_body.as_ref().map_or(0, |(_, n)| *n as i64));
    out.push_str(",\"cookies\":");
    cookies(out, &c.request_headers, "cookie", red);
    out.push_str(",\"headers\":");
    headers(out, &c.request_headers, red);
    out.push_str(",\"headersSize\":-1,\"httpVersion\":\"HTTP/1.1\",\"method\":");
    string(out, c.method.as_str());
    if let Some((text, encoding, truncated, size)) = &post_data {
        out.push_str(",\"postData\":{");
        if let Some(e) = encoding {
            out.push_str("\"_encoding\":");
            string(out, e);
            out.push(',');
        }
        if *truncated {
            out.push_str("\"_tollgateSize\":");
            int(out, *size);
            out.push_str(",\"_tollgateTruncated\":true,");
        }
        out.push_str("\"mimeType\":");
        string(out, request_mime);
        out.push_str(",\"text\":");
        string(out, text);
        out.push('}');
    }
    out.push_str(",\"queryString\":[");
    for (i, (name, value)) in query_string.iter().enumerate() {
        pair(out, i, name, value);
    }
    out.push_str("],\"url\":");
    string(out, &url);

    out.push_str("},\"response\":{\"bodySize\":");
    match (&c.response, &response_body, &response_text) {
        (Some(h), Some((decoded, data)), Some((text, encoding))) => {
            let body = Answered {
                decoded: decoded.as_deref(),
                data,
                text,
                encoding: *encoding,
            };
            response(out, h, &c.response_body, &body, red);
        }
        _ => out.push_str(
            "-1,\"content\":{\"mimeType\":\"x-unknown\",\"size\":0},\"cookies\":[],\"headers\":[],\
             \"headersSize\":-1,\"httpVersion\":\"\",\"redirectURL\":\"\",\"status\":0,\"statusText\":\"\"",
        ),
    }

    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let total = ms(r.total);
    let blocked = c.sent_after.map_or(0.0, ms);
    let wait = r.wait.map_or(0.0, ms);
    let receive = (total - blocked - wait).max(0.0);
    out.push_str("},\"startedDateTime\":\"");
    started(out, c.started);
    out.push_str("\",\"time\":");
    float(out, total);
    out.push_str(",\"timings\":{\"blocked\":");
    float(out, blocked);
    out.push_str(",\"connect\":-1,\"dns\":-1,\"receive\":");
    float(out, receive);
    out.push_str(",\"send\":0,\"ssl\":-1,\"wait\":");
    float(out, wait);
    out.push_str("}}");
    red.own.clone()
}

/// tollgate's own fields (`_tollgate…`), which sort first: the cache's outcome and what
/// it saved, completion, error, policy, remedies, request id, retries and LLM usage.
fn own_fields(out: &mut String, r: &Record) {
    // What the cache made of the call, as `x-tollgate-cache` said it.
    let cache = r
        .acted
        .iter()
        .rev()
        .find(|a| a.remedy == "cache")
        .and_then(|a| {
            Some(match a.action {
                "hit" | "revalidated" => "hit",
                "shared_hit" => "shared-hit",
                "miss" | "stored" | "coalesced" => "miss",
                "bypass" => "bypass",
                _ => return None,
            })
        });
    out.push('{');
    if let Some(c) = cache {
        out.push_str("\"_tollgateCache\":");
        string(out, c);
        out.push(',');
    }
    if let Some(s) = &r.saved {
        out.push_str("\"_tollgateCacheSaved\":{\"cost_usd\":");
        float(out, s.cost_nanos as f64 / 1e9);
        out.push_str(",\"input_tokens\":");
        int(out, s.input);
        out.push_str(",\"model\":");
        string(out, &s.model);
        out.push_str(",\"output_tokens\":");
        int(out, s.output);
        out.push_str("},");
    }
    out.push_str("\"_tollgateCompleted\":");
    jbool(out, r.completed);
    if let Some(e) = r.error {
        out.push_str(",\"_tollgateError\":");
        string(out, e);
    }
    if let Some(m) = &r.mcp {
        // The id as the call wrote it: a JSON string or integer already.
        out.push_str(",\"_tollgateMcp\":{");
        if let Some(id) = &m.id {
            out.push_str("\"id\":");
            out.push_str(id);
            out.push(',');
        }
        out.push_str("\"method\":");
        string(out, &m.method);
        if let Some(n) = &m.name {
            out.push_str(",\"name\":");
            string(out, n);
        }
        let outcome = m.outcome.get();
        if outcome != crate::mcp::outcome::Outcome::Unknown {
            out.push_str(",\"outcome\":");
            string(out, outcome.as_str());
        }
        out.push('}');
    }
    if let Some(p) = &r.policy {
        out.push_str(",\"_tollgatePolicy\":");
        string(out, p);
    }
    out.push_str(",\"_tollgateRemedies\":[");
    for (i, a) in r.acted.iter().enumerate() {
        out.push_str(if i == 0 {
            "{\"action\":"
        } else {
            ",{\"action\":"
        });
        string(out, a.action);
        out.push_str(",\"remedy\":");
        string(out, a.remedy);
        out.push('}');
    }
    out.push_str("],\"_tollgateRequestId\":");
    string(out, &r.request_id);
    out.push_str(",\"_tollgateRetries\":");
    int(out, r.retries);
    if let Some(m) = &r.llm {
        out.push_str(",\"_tollgateUsage\":");
        out.push_str(&m.read().summary(m.api).to_string());
    }
}

/// A response body as the entry shows it: decoded (when its coding is known), the bytes
/// captured, its text and the text's encoding.
struct Answered<'a> {
    decoded: Option<&'a [u8]>,
    data: &'a [u8],
    text: &'a str,
    encoding: Option<&'static str>,
}

/// The response's fields after `bodySize`: its size, content, head and status.
fn response(
    out: &mut String,
    h: &super::ResponseHead,
    copy: &crate::diagnosis::tap::Copy,
    b: &Answered,
    red: &Secrets,
) {
    let size = copy.size;
    let truncated = copy.truncated();
    let body_len = b.decoded.map_or(b.data.len(), <[u8]>::len);
    int(out, size as i64);
    out.push_str(",\"content\":{");
    if truncated {
        out.push_str("\"_tollgateSize\":");
        int(out, size);
        out.push_str(",\"_tollgateTruncated\":true,");
    }
    if b.decoded.is_some() {
        out.push_str("\"compression\":");
        int(out, body_len as i64 - b.data.len() as i64);
        out.push(',');
    }
    if let Some(e) = b.encoding {
        out.push_str("\"encoding\":");
        string(out, e);
        out.push(',');
    }
    out.push_str("\"mimeType\":");
    string(out, content_type(&h.headers));
    out.push_str(",\"size\":");
    int(out, body_len as u64 + size - b.data.len() as u64);
    if body_len > 0 {
        out.push_str(",\"text\":");
        string(out, b.text);
    }
    out.push_str("},\"cookies\":");
    cookies(out, &h.headers, "set-cookie", red);
    out.push_str(",\"headers\":");
    headers(out, &h.headers, red);
    out.push_str(",\"headersSize\":-1,\"httpVersion\":");
    string(out, version(h.version));
    out.push_str(",\"redirectURL\":");
    let location = h
        .headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map_or(Cow::Borrowed(""), |v| red.scrub(v));
    string(out, &location);
    out.push_str(",\"status\":");
    int(out, h.status.as_u16());
    out.push_str(",\"statusText\":");
    string(out, h.status.canonical_reason().unwrap_or(""));
}

/// `{"name":…,"value":…}`, after a comma unless it is the first.
fn pair(out: &mut String, i: usize, name: &str, value: &str) {
    out.push_str(if i == 0 { "{\"name\":" } else { ",{\"name\":" });
    string(out, name);
    out.push_str(",\"value\":");
    string(out, value);
    out.push('}');
}

/// HAR's `startedDateTime`: ISO 8601 in UTC to the millisecond, `2026-11-29T01:19:47.749Z`.
fn started(out: &mut String, at: std::time::SystemTime) {
    let ts: jiff::Timestamp = at.try_into().unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let t = jiff::tz::Offset::UTC.to_datetime(ts);
    if !(0..=9999).contains(&t.year()) {
        out.push_str(&ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
        return;
    }
    let two = |out: &mut String, n: i8| {
        out.push((b'0' + (n as u8) / 10) as char);
        out.push((b'0' + (n as u8) % 10) as char);
    };
    let y = t.year() as u16;
    two(out, (y / 100) as i8);
    two(out, (y % 100) as i8);
    out.push('-');
    two(out, t.month());
    out.push('-');
    two(out, t.day());
    out.push('T');
    two(out, t.hour());
    out.push(':');
    two(out, t.minute());
    out.push(':');
    two(out, t.second());
    out.push('.');
    let ms = t.subsec_nanosecond() / 1_000_000;
    out.push((b'0' + (ms / 100) as u8) as char);
    two(out, (ms % 100) as i8);
    out.push('Z');
}

fn version(v: Version) -> &'static str {
    match v {
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

/// A head's headers as HAR's `headers`, in the order they came, values redacted.
fn headers(out: &mut String, h: &HeaderMap, red: &Secrets) {
    out.push('[');
    for (i, (n, v)) in h.iter().enumerate() {
        let value = String::from_utf8_lossy(v.as_bytes());
        pair(out, i, n.as_str(), &red.header(n.as_str(), &value));
    }
    out.push(']');
}

/// Cookies of `Cookie` (request) or `Set-Cookie` (response): names kept, values
/// redacted while the header is a secret name (the default).
fn cookies(out: &mut String, h: &HeaderMap, name: &str, red: &Secrets) {
    out.push('[');
    let mut i = 0;
    for v in h.get_all(name) {
        let v = String::from_utf8_lossy(v.as_bytes());
        let pairs = v
            .split(';')
            .take(if name == "cookie" { usize::MAX } else { 1 });
        for p in pairs {
            let (n, val) = p.trim().split_once('=').unwrap_or((p.trim(), ""));
            let value = if red.red.is_secret(name) {
                Cow::Borrowed(REDACTED)
            } else {
                red.header(name, val)
            };
            pair(out, i, n, &value);
            i += 1;
        }
    }
    out.push(']');
}

/// The URL with path parameters obfuscated (when on) and query values redacted or
/// obfuscated, and the query as HAR's `queryString`.
fn url_and_query<'u>(
    url: &'u str,
    red: &Secrets,
    template: Option<&str>,
) -> (Cow<'u, str>, Vec<(String, String)>) {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    if query.is_empty() && red.red.obfuscator().is_none() {
        return (red.scrub(url), Vec::new());
    }
    let base = match red.red.obfuscator() {
        Some(o) => {
            // scheme://authority + path
            let path_start = base
                .find("://")
                .map(|i| i + 3)
                .and_then(|i| base[i..].find('/').map(|j| i + j));
            match path_start {
                Some(ps) => {
                    let (origin, path) = base.split_at(ps);
                    let policy_params = template.filter(|t| !t.is_empty()).map(template::params);
                    let mut out = origin.to_owned();
                    for (i, seg) in path.split('/').filter(|s| !s.is_empty()).enumerate() {
                        let param = match &policy_params {
                            Some(p) => p.get(i).copied().flatten(),
                            None => template::id_like(seg).then_some("id"),
                        };
                        out.push('/');
                        match param {
                            Some(name)
                                if !o.settings.exclude_path_params.iter().any(|x| x == name) =>
                            {
                                out.push_str(&o.hash(seg))
                            }
                            _ => out.push_str(seg),
                        }
                    }
                    if path.ends_with('/') && path.len() > 1 {
                        out.push('/');
                    }
                    if path == "/" {
                        out.push('/');
                    }
                    out
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    let mut pairs = Vec::new();
    let mut q = String::new();
    for p in query.split('&').filter(|p| !p.is_empty()) {
        let (n, v) = p.split_once('=').unwrap_or((p, ""));
        let name = crate::paths::percent_decode(n).unwrap_or_else(|| n.to_owned());
        let value = crate::paths::percent_decode(v).unwrap_or_else(|| v.to_owned());
        let shown = red.query(&name, &value);
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str(n);
        q.push('=');
        q.push_str(&if shown == value {
            red.scrub(v).into_owned()
        } else {
            shown.clone()
        });
        pairs.push((name, shown));
    }
    let url = if q.is_empty() {
        base
    } else {
        format!("{base}?{q}")
    };
    (Cow::Owned(red.scrub(&url).into_owned()), pairs)
}

/// The HAR document around entries: `{"log": {"version": "1.2", "creator", "entries"}}`.
pub fn document(entries: Vec<Value>) -> Value {
    json!({ "log": { "version": "1.2", "creator": creator(), "entries": entries } })
}

pub fn creator() -> Value {
    json!({ "name": "tollgate", "version": env!("CARGO_PKG_VERSION") })
}

#[cfg(test)]
mod tests {
    use super::super::{Capture, Record, redact::Redactor};
    use super::*;
    use http::{HeaderValue, Method, StatusCode};
    use std::io::Write as _;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    fn record(red: Redactor, answer: bool) -> Record {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.example"));
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-live-123456"),
        );
        h.insert("cookie", HeaderValue::from_static("a=1; sid=xyz"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.append(
            "x-odd",
            HeaderValue::from_bytes(b"tab\there \"q\" \xff").unwrap(),
        );
        let mut c = Capture::new(
            Method::POST,
            "https://api.example/v1/items?page=2&token=abc%2Fdef&flag".into(),
            h,
            1 << 20,
            None,
            Arc::new(red),
        );
        c.started = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_764_380_387_749_987_654);
        c.sent_after = Some(Duration::from_micros(12_497));
        if answer {
            let mut rh = HeaderMap::new();
            rh.insert(
                "content-type",
                HeaderValue::from_static("Application/JSON; charset=utf-8"),
            );
            rh.insert("content-encoding", HeaderValue::from_static("gzip"));
            rh.insert("set-cookie", HeaderValue::from_static("s=1; Path=/"));
            rh.insert("location", HeaderValue::from_static("/next"));
            c.respond(StatusCode::CREATED, Version::HTTP_2, &rh);
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all("{\"echo\":\"sk-live-123456\",\"n\":1E3,\"é\":\"\\u00e9\\n\"}".as_bytes())
                .unwrap();
            c.response_body.push(&gz.finish().unwrap());
        }
        Record {
            capture: c,
            request_body: Some((
                bytes::Bytes::from_static(
                    b"{\"password\":\"hunter22\",\"q\":[1,2.50,{\"k\\u0065y\":null}]}",
                ),
                300,
            )),
            request_id: "req-\"1\"".into(),
            policy: Some("llm \\ spend".into()),
            template: None,
            acted: vec![
                super::super::super::Acted {
                    remedy: "cache",
                    action: "shared_hit",
                    at_unix_ns: 0,
                },
                super::super::super::Acted {
                    remedy: "retry",
                    action: "attempt",
                    at_unix_ns: 0,
                },
            ],
            retries: 1,
            error: answer.then_some("upstream_timeout"),
            total: Duration::from_nanos(70_481_644),
            wait: Some(Duration::from_nanos(46_700_099)),
            completed: answer,
            llm: None,
            mcp: Some(Arc::new(crate::mcp::Call {
                kind: crate::mcp::Kind::Request,
                method: "tools/call".into(),
                name: Some("create_\"issue\"".into()),
                id: Some("18446744073709551617".into()),
                version: None,
                outcome: {
                    let o = crate::mcp::outcome::Slot::default();
                    o.set(crate::mcp::outcome::Outcome::ToolError);
                    o
                },
            })),
            saved: Some(Box::new(crate::llm::Saved {
                model: "gpt-4o-mini-2025-01-01".into(),
                input: 12,
                output: 7,
                cost_nanos: 6_300,
            })),
        }
    }

    /// The text written by hand is JSON whose keys are sorted and whose strings and numbers
    /// are spelled as `serde_json` spells them: parsed and written again by `serde_json`
    /// (sorted maps, numbers kept as written), it comes back byte for byte.
    #[test]
    fn entries_are_canonical_json_with_secrets_redacted() {
        for answer in [true, false] {
            let r = record(
                Redactor::with_names(&[
                    "authorization",
                    "cookie",
                    "set-cookie",
                    "password",
                    "token",
                ]),
                answer,
            );
            let mut out = String::new();
            let own = write(&r, &mut out);
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(serde_json::to_string(&v).unwrap(), out);
            for secret in ["sk-live-123456", "hunter22"] {
                assert!(own.iter().any(|o| o == secret), "{own:?}");
            }
            assert_eq!(v["startedDateTime"], "2025-11-29T01:39:47.749Z");
            assert_eq!(v["_tollgateCache"], "shared-hit");
            assert_eq!(v["_tollgateCacheSaved"]["output_tokens"], 7);
            assert_eq!(
                v["time"].to_string(),
                serde_json::to_string(&70.481644).unwrap()
            );
            assert_eq!(v["request"]["postData"]["_tollgateSize"].to_string(), "300");
            assert_eq!(
                v["request"]["postData"]["text"],
                "{\"password\":\"REDACTED\",\"q\":[1,2.50,{\"k\\u0065y\":null}]}"
            );
            assert_eq!(
                v["request"]["url"],
                "https://api.example/v1/items?page=2&token=REDACTED&flag="
            );
            assert_eq!(v["request"]["queryString"][1]["value"], "REDACTED");
            assert_eq!(
                v["request"]["headers"][4]["value"],
                "tab\there \"q\" \u{fffd}"
            );
            assert_eq!(v["request"]["cookies"][1]["name"], "sid");
            assert_eq!(v["request"]["cookies"][1]["value"], "REDACTED");
            if answer {
                let content = &v["response"]["content"];
                assert_eq!(
                    content["text"],
                    "{\"echo\":\"sk-live-123456\",\"n\":1E3,\"é\":\"\\u00e9\\n\"}"
                );
                assert!(content["compression"].as_i64().unwrap() < 0);
                assert_eq!(v["response"]["httpVersion"], "HTTP/2");
                assert_eq!(v["response"]["redirectURL"], "/next");
                assert_eq!(v["_tollgateError"], "upstream_timeout");
            } else {
                assert_eq!(v["response"]["content"]["mimeType"], "x-unknown");
                assert_eq!(v["response"]["status"], 0);
            }
        }
    }

    #[test]
    fn started_is_the_millisecond_in_utc() {
        for ns in [
            0u64,
            999_999,
            1_000_000,
            951_782_400_123_000_000,
            4_102_444_799_999_999_999,
        ] {
            let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
            let mut out = String::new();
            started(&mut out, at);
            let ts: jiff::Timestamp = at.try_into().unwrap();
            assert_eq!(out, ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
        }
    }
}
