//! Validation of the `diagnosis` section: every value range-checked, policy names
//! resolved, sink URLs parsed, errors at the field path with what to write.

use super::raw_diagnosis::*;
use super::units::format_duration;
use super::validate::{DAY, Errors, HOUR, MS, SEC};
use crate::diagnosis::settings::*;
use crate::routes::Route;
use crate::secret::Secret;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) fn diagnosis(e: &mut Errors, raw: &RawDiagnosis, policy_names: &[&str]) -> Diagnosis {
    Diagnosis {
        discovery: discovery(e, &raw.discovery),
        har: har(e, &raw.har, policy_names),
        traces: traces(e, &raw.traces),
    }
}

fn discovery(e: &mut Errors, d: &RawDiscovery) -> Discovery {
    let p = |f: &str| format!("diagnosis.discovery.{f}");
    Discovery {
        enabled: d.enabled,
        metrics: d.metrics,
        max_hosts: e.number(&p("max_hosts"), d.max_hosts, 1, 10_000),
        max_endpoints_per_host: e.number(
            &p("max_endpoints_per_host"),
            d.max_endpoints_per_host,
            1,
            10_000,
        ),
        max_endpoints: e.number(&p("max_endpoints"), d.max_endpoints, 1, 100_000),
        max_children: e.number(&p("max_children"), d.max_children, 2, 10_000),
        consumer_header: d
            .consumer_header
            .as_ref()
            .and_then(|h| e.read_header(&p("consumer_header"), h)),
        max_consumers: e.number(&p("max_consumers"), d.max_consumers, 1, 1000),
    }
}

fn fraction(e: &mut Errors, path: &str, v: f64) -> f64 {
    if !(0.0..=1.0).contains(&v) {
        e.fail(
            path,
            format!(
                "{v} is out of range; write a number from 0 to 1, e.g. 0.1 for one call in ten"
            ),
        );
        return 0.0;
    }
    v
}

fn har(e: &mut Errors, h: &RawHar, policy_names: &[&str]) -> Har {
    let p = |f: &str| format!("diagnosis.har.{f}");
    for (i, name) in h.policies.iter().enumerate() {
        if !policy_names.contains(&name.as_str()) {
            e.fail(
                &format!("diagnosis.har.policies[{i}]"),
                format!("no policy named `{name}`; write the `name` of one under `policies:`"),
            );
        }
    }
    let obfuscate = h
        .obfuscate
        .enabled
        .then(|| obfuscate(e, &h.obfuscate))
        .flatten();
    let file = h.file.as_ref().map(|f| HarFile {
        dir: f.dir.clone().into(),
        max_bytes: e.size(
            &p("file.max_bytes"),
            &f.max_bytes,
            1024,
            1 << 30,
            "1KiB to 1GiB",
        ),
        max_age: e.duration(&p("file.max_age"), &f.max_age, SEC, 7 * DAY),
        retain: e.number(&p("file.retain"), f.retain, 1, 10_000),
    });
    let collector = h.collector.as_ref().and_then(|c| {
        let at = p("collector");
        let url = e.env_checked(&format!("{at}.url"), &c.url, |u| Route::new("/", u, &c.url))?;
        Some(Collector {
            path: base_path(&url),
            display: url.display.clone(),
            url: url.target,
            headers: e.headers(&format!("{at}.headers"), &c.headers),
            batch_size: e.number(&format!("{at}.batch_size"), c.batch_size, 1, 10_000),
            interval: e.duration(&format!("{at}.interval"), &c.interval, 10 * MS, HOUR),
            buffer: e.number(&format!("{at}.buffer"), c.buffer, 1, 1 << 20),
            timeout: e.duration(&format!("{at}.timeout"), &c.timeout, 100 * MS, 5 * 60 * SEC),
            max_backoff: e.duration(&format!("{at}.max_backoff"), &c.max_backoff, 100 * MS, HOUR),
        })
    });
    if h.enabled && file.is_none() && collector.is_none() && !h.stdout {
        e.fail(
            &p("enabled"),
            "HAR capture needs a sink: add `file: { dir: har }`, `collector: { url: … }` or `stdout: true`".into(),
        );
    }
    Har {
        enabled: h.enabled,
        sample: fraction(e, &p("sample"), h.sample),
        policies: h.policies.clone(),
        max_body_bytes: e.size(
            &p("max_body_bytes"),
            &h.max_body_bytes,
            0,
            16 << 20,
            "0 to 16MiB",
        ),
        queue_capacity: e.number(&p("queue_capacity"), h.queue_capacity, 1, 1 << 20),
        max_queue_bytes: e.size(
            &p("max_queue_bytes"),
            &h.max_queue_bytes,
            1 << 20,
            4 << 30,
            "1MiB to 4GiB",
        ),
        redact: h
            .redact
            .iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .collect(),
        obfuscate,
        file,
        collector,
        stdout: h.stdout,
    }
}

fn base_path(r: &Route) -> http::uri::PathAndQuery {
    let path = if r.base_path.is_empty() {
        "/"
    } else {
        &r.base_path
    };
    http::uri::PathAndQuery::try_from(path)
        .unwrap_or_else(|_| http::uri::PathAndQuery::from_static("/"))
}

fn obfuscate(e: &mut Errors, o: &RawObfuscate) -> Option<Obfuscate> {
    let p = |f: &str| format!("diagnosis.har.obfuscate.{f}");
    let Some(written) = &o.key else {
        e.fail(
            &p("key"),
            "obfuscation needs a key: write `key: ${TOLLGATE_HAR_KEY}` (at least 16 characters, kept secret)".into(),
        );
        return None;
    };
    let key = e.env_checked(&p("key"), written, |k| {
        if k.len() < 16 {
            Err("the key is shorter than 16 characters; use a long random value".to_owned())
        } else {
            Ok(k.to_owned())
        }
    })?;
    let mut json_paths = Vec::new();
    for (i, jp) in o.exclude_json_paths.iter().enumerate() {
        match parse_json_path(jp) {
            Ok(parts) => json_paths.push(parts),
            Err(m) => e.fail(&format!("{}[{i}]", p("exclude_json_paths")), m),
        }
    }
    Some(Obfuscate {
        key: Secret::new(key),
        exclude_headers: o
            .exclude_headers
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .collect(),
        exclude_query: o.exclude_query.clone(),
        exclude_path_params: o.exclude_path_params.clone(),
        exclude_json_paths: json_paths,
    })
}

/// `$.a.b[*].c` → `["a", "b", "*", "c"]`.
fn parse_json_path(s: &str) -> Result<Vec<String>, String> {
    let bad = || format!("`{s}` is not a JSON path; write e.g. `$.user.id` or `$.items[*].name`");
    let rest = s.trim().strip_prefix('$').ok_or_else(bad)?;
    let mut parts = Vec::new();
    for piece in rest.split('.').skip(1) {
        let (key, index) = match piece.split_once('[') {
            Some((k, i)) => (k, Some(i)),
            None => (piece, None),
        };
        if key.is_empty() && index.is_none() {
            return Err(bad());
        }
        if !key.is_empty() {
            parts.push(key.to_owned());
        }
        if let Some(i) = index {
            if i != "*]" {
                return Err(bad());
            }
            parts.push("*".to_owned());
        }
    }
    if !rest.is_empty() && !rest.starts_with('.') {
        return Err(bad());
    }
    Ok(parts)
}

fn traces(e: &mut Errors, t: &RawTraces) -> Traces {
    let p = |f: &str| format!("diagnosis.traces.{f}");
    let endpoint = if t.enabled {
        e.env_checked(&p("endpoint"), &t.endpoint, |u| {
            Route::new("/", u, &t.endpoint)
        })
        .map(|url| Collector {
            path: base_path(&url),
            display: url.display.clone(),
            url: url.target,
            headers: e.headers(&p("headers"), &t.headers),
            batch_size: e.number(&p("batch_size"), t.batch_size, 1, 100_000),
            interval: e.duration(&p("interval"), &t.interval, 10 * MS, HOUR),
            buffer: t.queue_capacity,
            timeout: e.duration(&p("timeout"), &t.timeout, 100 * MS, 5 * 60 * SEC),
            max_backoff: Duration::from_secs(30),
        })
    } else {
        None
    };
    Traces {
        enabled: t.enabled,
        endpoint,
        sample: fraction(e, &p("sample"), t.sample),
        service_name: t.service_name.clone(),
        queue_capacity: e.number(&p("queue_capacity"), t.queue_capacity, 1, 1 << 20),
    }
}

fn masked(headers: &[(http::HeaderName, http::HeaderValue)]) -> BTreeMap<String, &'static str> {
    headers
        .iter()
        .map(|(n, _)| (n.to_string(), "MASKED"))
        .collect()
}

fn sink(c: &Collector) -> Value {
    json!({
        "url": c.display, "headers": masked(&c.headers), "batch_size": c.batch_size,
        "interval": format_duration(c.interval), "buffer": c.buffer,
        "timeout": format_duration(c.timeout), "max_backoff": format_duration(c.max_backoff),
    })
}

pub(super) fn effective(d: &Diagnosis) -> Value {
    let o = d.har.obfuscate.as_ref();
    json!({
        "discovery": {
            "enabled": d.discovery.enabled,
            "metrics": d.discovery.metrics,
            "max_hosts": d.discovery.max_hosts,
            "max_endpoints_per_host": d.discovery.max_endpoints_per_host,
            "max_endpoints": d.discovery.max_endpoints,
            "max_children": d.discovery.max_children,
            "consumer_header": d.discovery.consumer_header.as_ref().map(|h| h.as_str()),
            "max_consumers": d.discovery.max_consumers,
        },
        "har": {
            "enabled": d.har.enabled,
            "sample": d.har.sample,
            "policies": d.har.policies,
            "max_body_bytes": d.har.max_body_bytes,
            "queue_capacity": d.har.queue_capacity,
            "max_queue_bytes": d.har.max_queue_bytes,
            "redact": d.har.redact,
            "obfuscate": {
                "enabled": o.is_some(),
                "key": o.map(|o| o.key.to_string()),
                "exclude_headers": o.map(|o| o.exclude_headers.clone()).unwrap_or_default(),
                "exclude_query": o.map(|o| o.exclude_query.clone()).unwrap_or_default(),
                "exclude_path_params": o.map(|o| o.exclude_path_params.clone()).unwrap_or_default(),
                "exclude_json_paths": o.map(|o| o.exclude_json_paths.iter().map(|p| p.join(".")).collect::<Vec<_>>()).unwrap_or_default(),
            },
            "file": d.har.file.as_ref().map(|f| json!({
                "dir": f.dir.display().to_string(), "max_bytes": f.max_bytes,
                "max_age": format_duration(f.max_age), "retain": f.retain,
            })),
            "collector": d.har.collector.as_ref().map(sink),
            "stdout": d.har.stdout,
        },
        "traces": {
            "enabled": d.traces.enabled,
            "endpoint": d.traces.endpoint.as_ref().map(sink),
            "sample": d.traces.sample,
            "service_name": d.traces.service_name,
            "queue_capacity": d.traces.queue_capacity,
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_paths() {
        assert_eq!(super::parse_json_path("$.a.b").unwrap(), ["a", "b"]);
        assert_eq!(
            super::parse_json_path("$.items[*].name").unwrap(),
            ["items", "*", "name"]
        );
        assert_eq!(super::parse_json_path("$").unwrap(), Vec::<String>::new());
        assert!(super::parse_json_path("a.b").is_err());
        assert!(super::parse_json_path("$.a[0]").is_err());
        assert!(super::parse_json_path("$..a").is_err());
    }
}
