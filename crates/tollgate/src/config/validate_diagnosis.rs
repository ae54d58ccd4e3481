//! Validation of the `diagnosis` section: every value range-checked, policy names
//! resolved, sink URLs parsed, errors at the field path with what to write.

use super::raw_diagnosis::*;
use crate::diagnosis::settings::*;
use crate::fields::Errors;
use crate::routes::Route;
use crate::secret::Secret;
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
        max_hosts: d.max_hosts.usize(),
        max_endpoints_per_host: d.max_endpoints_per_host.usize(),
        max_endpoints: d.max_endpoints.usize(),
        max_children: d.max_children.usize(),
        consumer_header: d
            .consumer_header
            .as_ref()
            .and_then(|h| e.read_header(&p("consumer_header"), h)),
        max_consumers: d.max_consumers.usize(),
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
        max_bytes: f.max_bytes.get(),
        max_age: f.max_age.get(),
        retain: f.retain.usize(),
    });
    let collector = h.collector.as_ref().and_then(|c| {
        let at = p("collector");
        let url = e.env_checked(&format!("{at}.url"), &c.url, |u| Route::new("/", u, &c.url))?;
        Some(Collector {
            path: base_path(&url),
            display: url.display.clone(),
            url: url.target,
            headers: e.headers(&format!("{at}.headers"), &c.headers),
            batch_size: c.batch_size.usize(),
            interval: c.interval.get(),
            buffer: c.buffer.usize(),
            timeout: c.timeout.get(),
            max_backoff: c.max_backoff.get(),
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
        max_body_bytes: h.max_body_bytes.get(),
        queue_capacity: h.queue_capacity.usize(),
        max_queue_bytes: h.max_queue_bytes.get(),
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
    let export = t.enabled.then(|| {
        // A URL written here is checked as one; the OTEL_ variables are read by the
        // exporter when it starts.
        let endpoint = t.endpoint.as_deref().and_then(|written| {
            e.env_checked(&p("endpoint"), written, |u| {
                Route::new("/", u, written).map(|r| (u.to_owned(), r.display))
            })
        });
        let display = endpoint.as_ref().map_or_else(
            || "the OTEL_EXPORTER_OTLP_ endpoint".to_owned(),
            |(_, d)| d.clone(),
        );
        TraceExport {
            endpoint: endpoint.map(|(u, _)| u),
            protocol: t.protocol.as_ref().map(|w| w.get()),
            headers: e.headers(&p("headers"), &t.headers),
            service_name: t.service_name.clone(),
            batching: Batching {
                batch_size: t.batch_size.usize(),
                interval: t.interval.get(),
                max_backoff: Duration::from_secs(30),
                display,
            },
            timeout: t.timeout.get(),
        }
    });
    Traces {
        enabled: t.enabled,
        export,
        sample: fraction(e, &p("sample"), t.sample),
        queue_capacity: t.queue_capacity.usize(),
    }
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
