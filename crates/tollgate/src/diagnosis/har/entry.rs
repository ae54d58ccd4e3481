//! One captured call as a HAR 1.2 entry (http://www.softwareishard.com/blog/har-12-spec/),
//! redacted and obfuscated on the way. tollgate's own fields start with `_tollgate`, as
//! the spec allows for custom fields.

use super::Record;
use super::body::{self, content_type, decode};
use super::redact::{REDACTED, Secrets};
use crate::diagnosis::discovery::template;
use http::{HeaderMap, Version};
use serde::Serialize;
use serde_json::{Value, json};

/// One entry as HAR writes it, serialized straight from these fields (no `Value` tree):
/// each struct's fields are in the order of their JSON names, as the entries have always
/// been written (sorted keys).
#[derive(Serialize)]
pub struct Entry<'a> {
    #[serde(rename = "_tollgateCompleted")]
    completed: bool,
    #[serde(rename = "_tollgateError", skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(rename = "_tollgatePolicy", skip_serializing_if = "Option::is_none")]
    policy: Option<&'a str>,
    #[serde(rename = "_tollgateRemedies")]
    remedies: Vec<Acted<'a>>,
    #[serde(rename = "_tollgateRequestId")]
    request_id: &'a str,
    #[serde(rename = "_tollgateRetries")]
    retries: u32,
    #[serde(rename = "_tollgateUsage", skip_serializing_if = "Option::is_none")]
    usage: Option<Value>,
    cache: Empty,
    request: Request<'a>,
    response: Response<'a>,
    #[serde(rename = "startedDateTime")]
    pub started: String,
    time: f64,
    timings: Timings,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Acted<'a> {
    action: &'a str,
    remedy: &'a str,
}

#[derive(Serialize)]
struct Pair<'a> {
    name: &'a str,
    value: String,
}

#[derive(Serialize)]
struct Request<'a> {
    #[serde(rename = "bodySize")]
    body_size: i64,
    #[serde(flatten)]
    head: Head<'a>,
    method: &'a str,
    #[serde(rename = "postData", skip_serializing_if = "Option::is_none")]
    post_data: Option<PostData>,
    #[serde(rename = "queryString")]
    query_string: Vec<Owned>,
    url: String,
}

/// What a request and a response share, in their key order.
#[derive(Serialize)]
struct Head<'a> {
    cookies: Vec<Owned>,
    headers: Vec<Pair<'a>>,
    #[serde(rename = "headersSize")]
    headers_size: i64,
    #[serde(rename = "httpVersion")]
    http_version: &'static str,
}

#[derive(Serialize)]
struct PostData {
    #[serde(rename = "_encoding", skip_serializing_if = "Option::is_none")]
    encoding: Option<&'static str>,
    #[serde(rename = "_tollgateSize", skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(rename = "_tollgateTruncated", skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(rename = "mimeType")]
    mime_type: String,
    text: String,
}

/// A query parameter (decoded) or a cookie: names that are not the map's own.
#[derive(Serialize)]
struct Owned {
    name: String,
    value: String,
}

#[derive(Serialize)]
struct Response<'a> {
    #[serde(rename = "bodySize")]
    body_size: i64,
    content: Content,
    #[serde(flatten)]
    head: Head<'a>,
    #[serde(rename = "redirectURL")]
    redirect_url: String,
    status: u16,
    #[serde(rename = "statusText")]
    status_text: &'static str,
}

#[derive(Serialize)]
struct Content {
    #[serde(rename = "_tollgateSize", skip_serializing_if = "Option::is_none")]
    full_size: Option<u64>,
    #[serde(rename = "_tollgateTruncated", skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compression: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding: Option<&'static str>,
    #[serde(rename = "mimeType")]
    mime_type: String,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
}

#[derive(Serialize)]
struct Timings {
    blocked: f64,
    connect: i8,
    dns: i8,
    receive: f64,
    send: u8,
    ssl: i8,
    wait: f64,
}

/// The entry, and this entry's secret values: the client's credentials and the values
/// found under secret names in its bodies (the writer scrubs them from the whole entry:
/// a provider may echo them back anywhere).
pub fn build(r: &Record) -> (Entry<'_>, Vec<String>) {
    let c = &r.capture;
    let mut red = Secrets {
        red: &c.redactor,
        own: c.redactor.request_secrets(&c.request_headers, &c.url),
    };
    // The request body first: secrets found there are scrubbed from the response too.
    let post_data = r
        .request_body
        .as_ref()
        .filter(|(_, n)| *n > 0)
        .map(|(data, size)| {
            let mime = content_type(&c.request_headers);
            let (text, encoding) = body::text(data, &mime, &mut red);
            let truncated = *size > data.len() as u64;
            PostData {
                encoding,
                size: truncated.then_some(*size),
                truncated: truncated.then_some(true),
                mime_type: mime,
                text,
            }
        });
    let red = &mut red;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let total = ms(r.total);
    let blocked = c.sent_after.map_or(0.0, ms);
    let wait = r.wait.map_or(0.0, ms);
    let receive = (total - blocked - wait).max(0.0);
    let started: jiff::Timestamp = c.started.try_into().unwrap_or(jiff::Timestamp::UNIX_EPOCH);

    let (url, query_string) = url_and_query(&c.url, red, r.template.as_deref());
    let request = Request {
        body_size: r.request_body.as_ref().map_or(0, |(_, n)| *n as i64),
        head: Head {
            cookies: cookies(&c.request_headers, "cookie", red),
            headers: headers(&c.request_headers, red),
            headers_size: -1,
            http_version: "HTTP/1.1",
        },
        method: c.method.as_str(),
        post_data,
        query_string,
        url,
    };

    let response = match &c.response {
        Some(h) => {
            let mime = content_type(&h.headers);
            let (data, size) = (&c.response_body.data, c.response_body.size);
            let truncated = c.response_body.truncated();
            let decoded = decode(&h.headers, data);
            let (body, compression) = match &decoded {
                Some(d) => (&d[..], Some(d.len() as i64 - data.len() as i64)),
                None => (&data[..], None),
            };
            let (text, encoding) = body::text(body, &mime, red);
            let content = Content {
                full_size: truncated.then_some(size),
                truncated: truncated.then_some(true),
                compression,
                encoding,
                size: body.len() as u64 + size - data.len() as u64,
                mime_type: mime,
                text: (!body.is_empty()).then_some(text),
            };
            Response {
                body_size: size as i64,
                content,
                head: Head {
                    cookies: cookies(&h.headers, "set-cookie", red),
                    headers: headers(&h.headers, red),
                    headers_size: -1,
                    http_version: version(h.version),
                },
                redirect_url: h
                    .headers
                    .get(http::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| red.scrub(v).into_owned())
                    .unwrap_or_default(),
                status: h.status.as_u16(),
                status_text: h.status.canonical_reason().unwrap_or(""),
            }
        }
        None => Response {
            body_size: -1,
            content: Content {
                full_size: None,
                truncated: None,
                compression: None,
                encoding: None,
                mime_type: "x-unknown".into(),
                size: 0,
                text: None,
            },
            head: Head {
                cookies: Vec::new(),
                headers: Vec::new(),
                headers_size: -1,
                http_version: "",
            },
            redirect_url: String::new(),
            status: 0,
            status_text: "",
        },
    };

    let entry = Entry {
        completed: r.completed,
        error: r.error,
        policy: r.policy.as_deref(),
        remedies: r
            .acted
            .iter()
            .map(|a| Acted {
                action: a.action,
                remedy: a.remedy,
            })
            .collect(),
        request_id: &r.request_id,
        retries: r.retries,
        usage: r.llm.as_ref().map(|m| m.read().summary(m.api)),
        cache: Empty {},
        request,
        response,
        started: started.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        time: total,
        timings: Timings {
            blocked,
            connect: -1,
            dns: -1,
            receive,
            send: 0,
            ssl: -1,
            wait,
        },
    };
    let own = std::mem::take(&mut red.own);
    (entry, own)
}

fn version(v: Version) -> &'static str {
    match v {
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

fn headers<'a>(h: &'a HeaderMap, red: &Secrets) -> Vec<Pair<'a>> {
    h.iter()
        .map(|(n, v)| {
            let value = String::from_utf8_lossy(v.as_bytes());
            Pair {
                name: n.as_str(),
                value: red.header(n.as_str(), &value),
            }
        })
        .collect()
}

/// Cookies of `Cookie` (request) or `Set-Cookie` (response): names kept, values
/// redacted while the header is a secret name (the default).
fn cookies(h: &HeaderMap, name: &str, red: &Secrets) -> Vec<Owned> {
    let mut out = Vec::new();
    for v in h.get_all(name) {
        let v = String::from_utf8_lossy(v.as_bytes());
        let pairs: Vec<&str> = if name == "cookie" {
            v.split(';').collect()
        } else {
            v.split(';').take(1).collect()
        };
        for pair in pairs {
            let (n, val) = pair.trim().split_once('=').unwrap_or((pair.trim(), ""));
            let value = if red.red.is_secret(name) {
                REDACTED.to_owned()
            } else {
                red.header(name, val)
            };
            out.push(Owned {
                name: n.to_owned(),
                value,
            });
        }
    }
    out
}

/// The URL with path parameters obfuscated (when on) and query values redacted or
/// obfuscated, and the query as HAR's `queryString`.
fn url_and_query(url: &str, red: &Secrets, template: Option<&str>) -> (String, Vec<Owned>) {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
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
        pairs.push(Owned { name, value: shown });
    }
    let url = if q.is_empty() {
        base
    } else {
        format!("{base}?{q}")
    };
    (red.scrub(&url).into_owned(), pairs)
}

/// The HAR document around entries: `{"log": {"version": "1.2", "creator", "entries"}}`.
pub fn document(entries: Vec<Value>) -> Value {
    json!({ "log": { "version": "1.2", "creator": creator(), "entries": entries } })
}

pub fn creator() -> Value {
    json!({ "name": "tollgate", "version": env!("CARGO_PKG_VERSION") })
}
