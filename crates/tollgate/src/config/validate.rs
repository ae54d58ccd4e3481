//! Raw → domain validation. Collects every error with its field path.

use super::raw::RawConfig;
use super::units::{format_duration, parse_duration, parse_size};
use super::{Admin, Config, ConfigError, Listen, Log, Shutdown, Upstream, env};
use crate::domains::DomainRules;
use crate::glob::HostGlob;
use crate::policy::{PathTemplate, Policy, PolicySet};
use crate::routes::{Route, RouteTable};
use http::Method;
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;

struct Errors(Vec<ConfigError>);

impl Errors {
    fn check<T>(&mut self, path: &str, r: Result<T, String>) -> Option<T> {
        r.map_err(|message| {
            self.0.push(ConfigError {
                path: path.to_owned(),
                message,
                location: None,
            })
        })
        .ok()
    }

    fn duration(&mut self, path: &str, s: &str) -> Duration {
        self.check(path, parse_duration(s)).unwrap_or_default()
    }

    fn addr(&mut self, path: &str, s: &str) -> SocketAddr {
        self.check(
            path,
            s.parse()
                .map_err(|_| format!("`{s}` is not an address; write e.g. `127.0.0.1:8000`")),
        )
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    fn env(&mut self, path: &str, s: &str) -> Option<String> {
        self.check(path, env::expand(s))
    }
}

pub(super) fn validate(raw: &RawConfig) -> Result<Config, Vec<ConfigError>> {
    let mut e = Errors(Vec::new());
    let max_header_bytes = e
        .check(
            "listen.max_header_bytes",
            parse_size(&raw.listen.max_header_bytes),
        )
        .unwrap_or(0);
    if max_header_bytes != 0 && !(1024..=1 << 24).contains(&max_header_bytes) {
        e.check::<()>(
            "listen.max_header_bytes",
            Err("must be between 1KiB and 16MiB".into()),
        );
    }
    let listen = Listen {
        address: e.addr("listen.address", &raw.listen.address),
        max_header_bytes,
        header_read_timeout: e.duration(
            "listen.header_read_timeout",
            &raw.listen.header_read_timeout,
        ),
        max_concurrent_streams: raw.listen.max_concurrent_streams,
    };
    let admin = Admin {
        address: e.addr("admin.address", &raw.admin.address),
    };

    let u = &raw.upstream;
    let upstream = Upstream {
        connect_timeout: e.duration("upstream.connect_timeout", &u.connect_timeout),
        response_timeout: e.duration("upstream.response_timeout", &u.response_timeout),
        dns_ttl: e.duration("upstream.dns_ttl", &u.dns_ttl),
        pool_idle_timeout: e.duration("upstream.pool.idle_timeout", &u.pool.idle_timeout),
        pool_max_idle_per_host: u.pool.max_idle_per_host,
        extra_ca_file: u.tls.extra_ca_file.as_deref().and_then(|f| {
            let path = "upstream.tls.extra_ca_file";
            let f = e.env(path, f)?;
            e.check(
                path,
                crate::upstream::tls::read_ca_file(f.as_ref()).map(|_| f.into()),
            )
        }),
        insecure_skip_verify: u
            .tls
            .insecure_skip_verify
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let ok = !h.is_empty() && !h.contains(['*', '/', ':', '@']);
                e.check(
                    &format!("upstream.tls.insecure_skip_verify[{i}]"),
                    if ok {
                        Ok(h.to_ascii_lowercase())
                    } else {
                        Err(format!("`{h}` must be an exact host name"))
                    },
                )
            })
            .collect(),
    };
    for (name, d) in [
        ("connect_timeout", upstream.connect_timeout),
        ("response_timeout", upstream.response_timeout),
    ] {
        if d.is_zero() {
            e.check::<()>(
                &format!("upstream.{name}"),
                Err("must be greater than zero".into()),
            );
        }
    }

    let mut globs = |kind: &str, list: &[String]| -> Vec<HostGlob> {
        list.iter()
            .enumerate()
            .filter_map(|(i, p)| e.check(&format!("domains.{kind}[{i}]"), HostGlob::new(p)))
            .collect()
    };
    let domains = DomainRules {
        allow: globs("allow", &raw.domains.allow),
        deny: globs("deny", &raw.domains.deny),
    };

    let mut routes = Vec::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let upstream_url = e.env(&format!("routes[{i}].upstream"), &r.upstream);
        if let Some(url) = upstream_url {
            let path = format!("routes[{i}]");
            if let Some(route) = e.check(&path, Route::new(&r.prefix, &url, &r.upstream)) {
                if routes.iter().any(|o: &Route| o.prefix == route.prefix) {
                    e.check::<()>(
                        &format!("routes[{i}].prefix"),
                        Err(format!("prefix `{}` is declared twice", r.prefix)),
                    );
                }
                routes.push(route);
            }
        }
    }

    let mut policies = Vec::new();
    for (i, p) in raw.policies.iter().enumerate() {
        let at = |f: &str| format!("policies[{i}].{f}");
        if p.name.trim().is_empty() {
            e.check::<()>(&at("name"), Err("must not be empty".into()));
        }
        if policies.iter().any(|o: &Policy| o.name == p.name) {
            e.check::<()>(
                &at("name"),
                Err(format!("policy name `{}` is used twice", p.name)),
            );
        }
        let host = p
            .matcher
            .host
            .as_deref()
            .and_then(|h| e.check(&at("match.host"), HostGlob::new(h)));
        let path = p
            .matcher
            .path
            .as_deref()
            .and_then(|t| e.check(&at("match.path"), PathTemplate::new(t)));
        let methods = p
            .matcher
            .methods
            .iter()
            .enumerate()
            .filter_map(|(j, m)| {
                e.check(
                    &format!("policies[{i}].match.methods[{j}]"),
                    Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                        .map_err(|_| format!("`{m}` is not an HTTP method")),
                )
            })
            .collect();
        policies.push(Policy {
            name: p.name.clone(),
            host,
            path,
            methods,
        });
    }

    let json = match raw.log.format.as_str() {
        "text" => false,
        "json" => true,
        other => e
            .check(
                "log.format",
                Err(format!("`{other}` is not one of `text`, `json`")),
            )
            .unwrap_or(false),
    };
    if let Err(err) = tracing_subscriber::EnvFilter::try_new(&raw.log.level) {
        e.check::<()>("log.level", Err(format!("`{}`: {err}", raw.log.level)));
    }
    if raw.log.queue_capacity == 0 {
        e.check::<()>("log.queue_capacity", Err("must be at least 1".into()));
    }
    let log = Log {
        level: raw.log.level.clone(),
        json,
        access_log: raw.log.access_log,
        access_log_file: raw.log.access_log_file.as_ref().map(Into::into),
        queue_capacity: raw.log.queue_capacity,
    };
    let shutdown = Shutdown {
        drain_timeout: e.duration("shutdown.drain_timeout", &raw.shutdown.drain_timeout),
    };

    if !e.0.is_empty() {
        return Err(e.0);
    }
    Ok(Config {
        listen,
        admin,
        upstream,
        domains,
        routes: RouteTable::new(routes),
        policies: PolicySet { policies },
        log,
        shutdown,
    })
}

/// The effective config as JSON with defaults filled in and secrets masked.
pub(super) fn effective(c: &Config) -> serde_json::Value {
    let d = |d: Duration| format_duration(d);
    json!({
        "listen": {
            "address": c.listen.address.to_string(),
            "max_header_bytes": c.listen.max_header_bytes,
            "header_read_timeout": d(c.listen.header_read_timeout),
            "max_concurrent_streams": c.listen.max_concurrent_streams,
        },
        "admin": { "address": c.admin.address.to_string() },
        "upstream": {
            "connect_timeout": d(c.upstream.connect_timeout),
            "response_timeout": d(c.upstream.response_timeout),
            "dns_ttl": d(c.upstream.dns_ttl),
            "pool": {
                "idle_timeout": d(c.upstream.pool_idle_timeout),
                "max_idle_per_host": c.upstream.pool_max_idle_per_host,
            },
            "tls": {
                "extra_ca_file": c.upstream.extra_ca_file.as_ref().map(|p| p.display().to_string()),
                "insecure_skip_verify": c.upstream.insecure_skip_verify,
            },
        },
        "domains": {
            "allow": c.domains.allow.iter().map(|g| g.as_str()).collect::<Vec<_>>(),
            "deny": c.domains.deny.iter().map(|g| g.as_str()).collect::<Vec<_>>(),
        },
        "routes": c.routes.iter().map(|r| json!({"prefix": r.prefix, "upstream": r.display})).collect::<Vec<_>>(),
        "policies": c.policies.policies.iter().map(|p| json!({
            "name": p.name,
            "match": {
                "host": p.host.as_ref().map(|h| h.as_str()),
                "path": p.path.as_ref().map(|t| t.as_str()),
                "methods": p.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
            }
        })).collect::<Vec<_>>(),
        "log": {
            "level": c.log.level,
            "format": if c.log.json { "json" } else { "text" },
            "access_log": c.log.access_log,
            "access_log_file": c.log.access_log_file.as_ref().map(|p| p.display().to_string()),
            "queue_capacity": c.log.queue_capacity,
        },
        "shutdown": { "drain_timeout": d(c.shutdown.drain_timeout) },
    })
}
