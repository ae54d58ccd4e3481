//! One captured call as a HAR 1.2 entry (http://www.softwareishard.com/blog/har-12-spec/),
//! redacted and obfuscated on the way. tollgate's own fields start with `_tollgate`, as
//! the spec allows for custom fields.

use super::Record;
use super::body::{self, content_type, decode};
use super::redact::{REDACTED, Secrets};
use crate::diagnosis::discovery::template;
use http::{HeaderMap, Version};
use serde_json::{Value, json};

/// The entry, and this entry's secret values: the client's credentials and the values
/// found under secret names in its bodies (the writer scrubs them from the whole entry:
/// a provider may echo them back anywhere).
pub fn build(r: &Record) -> (Value, Vec<String>) {
    let c = &r.capture;
    let mut red = Secrets {
        red: &c.redactor,
        own: c.redactor.request_secrets(&c.request_headers, &c.url),
    };
    // The request body first: secrets found there are scrubbed from the response too.
    let post = r
        .request_body
        .as_ref()
        .filter(|(_, n)| *n > 0)
        .map(|(data, size)| {
            let mime = content_type(&c.request_headers);
            let (text, encoding) = body::text(data, &mime, &mut red);
            let mut post = json!({ "mimeType": mime, "text": text });
            if let Some(e) = encoding {
                post["_encoding"] = e.into();
            }
            if *size > data.len() as u64 {
                post["_tollgateTruncated"] = true.into();
                post["_tollgateSize"] = (*size).into();
            }
            post
        });
    let red = &mut red;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let total = ms(r.total);
    let blocked = c.sent_after.map_or(0.0, ms);
    let wait = r.wait.map_or(0.0, ms);
    let receive = (total - blocked - wait).max(0.0);
    let started: jiff::Timestamp = c.started.try_into().unwrap_or(jiff::Timestamp::UNIX_EPOCH);

    // Built values are moved in by assignment: `json!` would serialize each one into a
    // copy (its `to_value`), the headers twice over as the entry nests them.
    let (url, query) = url_and_query(&c.url, red, r.template.as_deref());
    let mut request = json!({
        "method": c.method.as_str(),
        "url": url,
        "httpVersion": "HTTP/1.1",
        "headersSize": -1,
        "bodySize": r.request_body.as_ref().map_or(0, |(_, n)| *n as i64),
    });
    request["cookies"] = Value::Array(cookies(&c.request_headers, "cookie", red));
    request["headers"] = Value::Array(headers(&c.request_headers, red));
    request["queryString"] = Value::Array(query);
    if let Some(post) = post {
        request["postData"] = post;
    }

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
            let mut content =
                json!({ "size": body.len() as u64 + size - data.len() as u64, "mimeType": mime });
            if !body.is_empty() {
                content["text"] = text.into();
            }
            if let Some(e) = encoding {
                content["encoding"] = e.into();
            }
            if let Some(saved) = compression {
                content["compression"] = saved.into();
            }
            if truncated {
                content["_tollgateTruncated"] = true.into();
                content["_tollgateSize"] = size.into();
            }
            let mut response = json!({
                "status": h.status.as_u16(),
                "statusText": h.status.canonical_reason().unwrap_or(""),
                "httpVersion": version(h.version),
                "redirectURL": h.headers.get(http::header::LOCATION).and_then(|v| v.to_str().ok()).map(|v| red.scrub(v).into_owned()).unwrap_or_default(),
                "headersSize": -1,
                "bodySize": size,
            });
            response["cookies"] = Value::Array(cookies(&h.headers, "set-cookie", red));
            response["headers"] = Value::Array(headers(&h.headers, red));
            response["content"] = content;
            response
        }
        None => json!({
            "status": 0, "statusText": "", "httpVersion": "", "cookies": [], "headers": [],
            "content": { "size": 0, "mimeType": "x-unknown" }, "redirectURL": "",
            "headersSize": -1, "bodySize": -1,
        }),
    };

    let mut entry = json!({
        "startedDateTime": started.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        "time": total,
        "cache": {},
        "timings": {
            "blocked": blocked, "dns": -1, "connect": -1, "ssl": -1,
            "send": 0, "wait": wait, "receive": receive,
        },
        "_tollgateRequestId": r.request_id,
        "_tollgateRetries": r.retries,
        "_tollgateCompleted": r.completed,
    });
    entry["request"] = request;
    entry["response"] = response;
    entry["_tollgateRemedies"] = r
        .acted
        .iter()
        .map(|a| json!({"remedy": a.remedy, "action": a.action}))
        .collect();
    if let Some(p) = &r.policy {
        entry["_tollgatePolicy"] = p.as_ref().into();
    }
    if let Some(e) = r.error {
        entry["_tollgateError"] = e.into();
    }
    if let Some(m) = &r.llm {
        entry["_tollgateUsage"] = m.read().summary(m.api);
    }
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

fn headers(h: &HeaderMap, red: &Secrets) -> Vec<Value> {
    h.iter()
        .map(|(n, v)| {
            let value = String::from_utf8_lossy(v.as_bytes());
            json!({ "name": n.as_str(), "value": red.header(n.as_str(), &value) })
        })
        .collect()
}

/// Cookies of `Cookie` (request) or `Set-Cookie` (response): names kept, values
/// redacted while the header is a secret name (the default).
fn cookies(h: &HeaderMap, name: &str, red: &Secrets) -> Vec<Value> {
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
            out.push(json!({ "name": n, "value": value }));
        }
    }
    out
}

/// The URL with path parameters obfuscated (when on) and query values redacted or
/// obfuscated, and the query as HAR's `queryString`.
fn url_and_query(url: &str, red: &Secrets, template: Option<&str>) -> (String, Vec<Value>) {
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
        pairs.push(json!({ "name": name, "value": shown }));
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
