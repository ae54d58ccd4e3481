//! Reading captured HAR files back (`tollgate har`): list entries, show one, and turn
//! one into a mock policy (capture in staging, replay as a mock in development).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The entries of a HAR file, or of every tollgate HAR file in a directory (oldest first).
pub fn load(path: &Path) -> Result<Vec<Value>, String> {
    let files = if path.is_dir() {
        super::file::har_files(path).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        vec![PathBuf::from(path)]
    };
    let mut out = Vec::new();
    for f in files {
        let text = super::file::document_text(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a HAR file: {e}", f.display()))?;
        let entries = doc["log"]["entries"]
            .as_array()
            .ok_or_else(|| format!("{}: no log.entries", f.display()))?;
        out.extend(entries.iter().cloned());
    }
    Ok(out)
}

/// Which entries `tollgate har list` and `tail` show: all by default.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The request URL's host (`api.github.com`, or `host:port`).
    pub host: Option<String>,
    /// A status (`429`) or a class (`5xx`).
    pub status: Option<String>,
    /// The policy that ran (`_tollgatePolicy`).
    pub policy: Option<String>,
}

impl Filter {
    /// A status filter that is neither a code nor a class is refused with the fix.
    pub fn check(&self) -> Result<(), String> {
        match self.status.as_deref() {
            Some(s) if status_matcher(s).is_none() => Err(format!(
                "--status `{s}`: write a status (`429`) or a class (`5xx`)"
            )),
            _ => Ok(()),
        }
    }

    pub fn keeps(&self, e: &Value) -> bool {
        let host_ok = self.host.as_deref().is_none_or(|h| {
            url_authority(e["request"]["url"].as_str().unwrap_or("")).is_some_and(
                |(host, authority)| {
                    h.eq_ignore_ascii_case(host) || h.eq_ignore_ascii_case(authority)
                },
            )
        });
        let status = e["response"]["status"].as_u64().unwrap_or(0);
        let status_ok = self
            .status
            .as_deref()
            .and_then(status_matcher)
            .is_none_or(|m| m(status));
        let policy_ok = self
            .policy
            .as_deref()
            .is_none_or(|p| e["_tollgatePolicy"].as_str() == Some(p));
        host_ok && status_ok && policy_ok
    }
}

/// `429` or `5xx` as a test on a status code.
fn status_matcher(s: &str) -> Option<Box<dyn Fn(u64) -> bool>> {
    if let Ok(code) = s.parse::<u64>() {
        return (100..600)
            .contains(&code)
            .then(|| Box::new(move |x| x == code) as _);
    }
    let class = s.strip_suffix("xx").or_else(|| s.strip_suffix("XX"))?;
    let c: u64 = class.parse().ok().filter(|c| (1..=5).contains(c))?;
    Some(Box::new(move |x| x / 100 == c))
}

/// The URL's host and authority (`host[:port]`).
fn url_authority(url: &str) -> Option<(&str, &str)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    Some((host, authority))
}

/// An entry as `har list --json` and `tail --json` print it: its number (what `show`
/// takes), request id, time, method, status, duration, URL, policy, remedies and error.
pub fn summary(n: usize, e: &Value) -> Value {
    json!({
        "n": n,
        "request_id": e["_tollgateRequestId"],
        "started": e["startedDateTime"],
        "method": e["request"]["method"],
        "status": e["response"]["status"],
        "time_ms": e["time"],
        "url": e["request"]["url"],
        "policy": e["_tollgatePolicy"],
        "remedies": e["_tollgateRemedies"],
        "error": e["_tollgateError"],
    })
}

/// The header of [`list`]'s table.
pub fn list_head() -> String {
    format!(
        "{:>5}  {:<24}  {:<7} {:>6} {:>10}  {:<16} URL\n",
        "#", "STARTED", "METHOD", "STATUS", "TIME ms", "POLICY"
    )
}

/// One line of [`list`]'s table: the entry numbered `n`.
pub fn list_line(n: usize, e: &Value) -> String {
    format!(
        "{:>5}  {:<24}  {:<7} {:>6} {:>10.3}  {:<16} {}\n",
        n,
        e["startedDateTime"].as_str().unwrap_or("-"),
        e["request"]["method"].as_str().unwrap_or("-"),
        e["response"]["status"].as_u64().unwrap_or(0),
        e["time"].as_f64().unwrap_or(0.0),
        e["_tollgatePolicy"].as_str().unwrap_or("-"),
        e["request"]["url"].as_str().unwrap_or("-"),
    )
}

/// One line per entry the filter keeps, numbered as in the whole file (what `show`
/// takes): index, time, method, status, duration, policy, URL.
pub fn list(entries: &[Value], filter: &Filter) -> String {
    let mut out = list_head();
    for (i, e) in entries.iter().enumerate().filter(|(_, e)| filter.keeps(e)) {
        out.push_str(&list_line(i + 1, e));
    }
    out
}

/// The entry numbered `n` (1-based, as `list` shows), or the one with this request id.
pub fn find<'a>(entries: &'a [Value], which: &str) -> Option<&'a Value> {
    match which.parse::<usize>() {
        Ok(n) if n >= 1 => entries.get(n - 1),
        _ => entries.iter().find(|e| e["_tollgateRequestId"] == which),
    }
}

/// Response headers a mock does not repeat: framing, encoding (the text is decoded),
/// hop-by-hop, per-response values, tollgate's own, and anything redacted.
fn kept(name: &str, value: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !matches!(
        n.as_str(),
        "content-length"
            | "content-encoding"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "date"
            | "set-cookie"
            | "via"
            | "age"
    ) && !n.starts_with("x-tollgate-")
        && value != super::redact::REDACTED
}

/// A config holding one policy that answers this entry's request with its response, as
/// YAML.
pub fn mock(e: &Value) -> Result<String, String> {
    let doc = std::collections::BTreeMap::from([("policies", [mock_policy(e)?])]);
    yaml_serde::to_string(&doc).map_err(|e| e.to_string())
}

/// A mock policy, its keys in the order a person writes them.
#[derive(serde::Serialize)]
pub struct MockPolicy {
    pub name: String,
    #[serde(rename = "match")]
    pub matches: yaml_serde::Value,
    pub mock: yaml_serde::Value,
}

/// A JSON value as YAML; `None` when a number would not be written back as it is
/// (serde_json keeps numbers as text, which YAML's serializer cannot take as they are).
fn yaml(v: &Value) -> Option<yaml_serde::Value> {
    use yaml_serde::Value as Y;
    Some(match v {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::String(s) => Y::String(s.clone()),
        Value::Number(n) => {
            let text = n.to_string();
            if let Some(i) = n.as_i64().filter(|i| i.to_string() == text) {
                Y::Number(i.into())
            } else if let Some(u) = n.as_u64().filter(|u| u.to_string() == text) {
                Y::Number(u.into())
            } else {
                let f = n.as_f64().filter(|f| f.to_string() == text)?;
                Y::Number(f.into())
            }
        }
        Value::Array(a) => Y::Sequence(a.iter().map(yaml).collect::<Option<_>>()?),
        Value::Object(o) => Y::Mapping(
            o.iter()
                .map(|(k, v)| Some((Y::String(k.clone()), yaml(v)?)))
                .collect::<Option<_>>()?,
        ),
    })
}

/// The policy that answers this entry's request with its response.
pub fn mock_policy(e: &Value) -> Result<MockPolicy, String> {
    let url: http::Uri = e["request"]["url"]
        .as_str()
        .ok_or("the entry has no request.url")?
        .parse()
        .map_err(|e| format!("request.url: {e}"))?;
    let method = e["request"]["method"].as_str().unwrap_or("GET");
    let host = url.host().unwrap_or("");
    let resp = &e["response"];
    let mut headers = serde_json::Map::new();
    for h in resp["headers"].as_array().into_iter().flatten() {
        if let (Some(n), Some(v)) = (h["name"].as_str(), h["value"].as_str())
            && kept(n, v)
        {
            headers.insert(n.to_ascii_lowercase(), v.into());
        }
    }
    let content = &resp["content"];
    let mut mock = json!({ "status": resp["status"].as_u64().unwrap_or(200), "headers": headers });
    if let Some(text) = content["text"].as_str() {
        if content["encoding"] == "base64" {
            return Err("the response body is binary (base64 in the HAR); a mock body must be text: save it to a file and use `body_file`".into());
        }
        if content["_tollgateTruncated"] == true {
            return Err(
                "the response body was truncated at capture (raise diagnosis.har.max_body_bytes)"
                    .into(),
            );
        }
        // JSON as a YAML mapping when YAML can carry every number as written;
        // else the text as it is (a 30-digit id, `19.990`).
        mock["body"] = match serde_json::from_str::<Value>(text) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) if yaml(&v).is_some() => v,
            _ => text.into(),
        };
    }
    let name: String = format!("mock {method} {host}{}", url.path())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let matches = json!({ "host": host, "path": url.path(), "methods": [method] });
    Ok(MockPolicy {
        name,
        matches: yaml(&matches).ok_or("the request cannot be written as YAML")?,
        mock: yaml(&mock).ok_or("the response cannot be written as YAML")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mock_body_keeps_its_numbers() {
        let e = json!({
            "request": {"url": "https://api.example.com/v1/x", "method": "GET"},
            "response": {"status": 200, "headers": [], "content": {
                "text": r#"{"price": 19.990, "id": 123456789012345678901234567890, "n": 7, "s": "x"}"#
            }},
        });
        let yaml = mock(&e).unwrap();
        assert!(!yaml.contains("serde_json"), "{yaml}");
        let c = crate::Config::from_yaml(&yaml).unwrap_or_else(|err| panic!("{err:?}\n{yaml}"));
        assert_eq!(c.policies.policies.len(), 1);
        for kept in ["19.990", "123456789012345678901234567890", "status: 200"] {
            assert!(yaml.contains(kept), "{kept} in {yaml}");
        }
        // Numbers YAML carries as written: the body as a mapping.
        let mut e = e;
        e["response"]["content"]["text"] = r#"{"n": 7, "f": 1.5}"#.into();
        let yaml = mock(&e).unwrap();
        assert!(yaml.contains("n: 7") && yaml.contains("f: 1.5"), "{yaml}");
    }
}
