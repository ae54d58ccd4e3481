//! Raw → domain validation. Collects every error with its field path.

use super::raw::RawConfig;
use super::raw::RawPort;
use super::{Admin, Config, ConfigError, Listen, Log, Upstream};
use crate::domains::DomainRules;
use crate::egress::{EgressRules, METADATA, PRIVATE, PortSet};
pub(super) use crate::fields::Errors;
use crate::glob::HostGlob;
use crate::routes::{Route, RouteTable};
use crate::secret::Secret;
use crate::upstream::tls::Roots;
use ipnet::IpNet;
use serde_json::json;

fn parse_port(p: &RawPort) -> Result<(u16, u16), String> {
    let bad = || {
        "write a port number (443), a range (`\"8000-8100\"`) or `\"*\"` for any port".to_owned()
    };
    match p {
        RawPort::Number(0) => Err(format!("port 0 is not a port; {}", bad())),
        RawPort::Number(n) => Ok((*n, *n)),
        RawPort::Range(s) if s.trim() == "*" => Ok((1, u16::MAX)),
        RawPort::Range(s) => {
            let (lo, hi) = s
                .split_once('-')
                .ok_or_else(|| format!("`{s}`: {}", bad()))?;
            let n = |t: &str| t.trim().parse::<u16>().ok().filter(|&p| p > 0);
            match (n(lo), n(hi)) {
                (Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
                _ => Err(format!("`{s}`: {}", bad())),
            }
        }
    }
}

pub(super) fn validate(raw: &RawConfig) -> Result<Config, Vec<ConfigError>> {
    validate_env(raw, Vec::new(), false).map(|(c, _)| c)
}

/// [`validate`], reporting `units` (the values the parser found outside their unit
/// types) with its own errors; with `env_optional`, unset `${VARS}` are warnings
/// (returned) rather than errors, their values placeholders.
pub(super) fn validate_env(
    raw: &RawConfig,
    units: Vec<ConfigError>,
    env_optional: bool,
) -> Result<(Config, Vec<String>), Vec<ConfigError>> {
    let mut e = Errors(units, env_optional.then(Vec::new));
    let l = &raw.listen;
    let listen = Listen {
        address: e.addr("listen.address", &l.address),
        max_header_bytes: l.max_header_bytes.get(),
        header_read_timeout: l.header_read_timeout.get(),
        max_concurrent_streams: l.max_concurrent_streams.u32(),
        send_timeout: l.send_timeout.get(),
    };
    let admin = admin(&mut e, raw);
    e.check("admin.address", apart(listen.address, admin.address));

    let upstream = upstream(&mut e, raw);

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

    let g = &raw.egress;
    let mut deny = e.nets("egress.deny", &g.deny);
    fn builtin(list: &'static [&'static str]) -> impl Iterator<Item = IpNet> {
        list.iter().map(|n| n.parse::<IpNet>().expect("valid"))
    }
    if g.deny_metadata {
        deny.extend(builtin(METADATA));
    }
    if g.deny_private {
        deny.extend(builtin(PRIVATE));
    }
    // An address in the domain deny list means "never connect there", by whatever name.
    deny.extend(
        domains
            .deny
            .iter()
            .filter_map(|h| crate::egress::canonical_ip(h.as_str()).map(IpNet::from)),
    );
    let connect_ports = g
        .connect_ports
        .iter()
        .enumerate()
        .filter_map(|(i, p)| e.check(&format!("egress.connect_ports[{i}]"), parse_port(p)))
        .collect();
    let egress = EgressRules {
        allow: e.nets("egress.allow", &g.allow),
        deny,
        connect_ports: PortSet(connect_ports),
    };

    let intercept = super::validate_intercept::intercept(&mut e, &raw.intercept);
    let store = super::validate_store::store(&mut e, &raw.store);

    let mut routes = Vec::new();
    for (i, r) in raw.routes.iter().enumerate() {
        // Its errors are the route's (a prefix or an upstream), at `routes[i]`.
        let route = e.env_checked_at(
            &format!("routes[{i}].upstream"),
            &format!("routes[{i}]"),
            &r.upstream,
            |url| Route::new(&r.prefix, url, &r.upstream),
        );
        if let Some(route) = route {
            if routes.iter().any(|o: &Route| o.prefix == route.prefix) {
                e.check::<()>(
                    &format!("routes[{i}].prefix"),
                    Err(format!("prefix `{}` is declared twice", r.prefix)),
                );
            }
            routes.push(route);
        }
    }

    let endpoints =
        super::validate_endpoints::endpoints(&mut e, &raw.endpoints, &raw.endpoint_defaults);
    let policies = super::validate_policy::policies(&mut e, raw);

    let json = raw.log.format.get() == super::raw::LogFormat::Json;
    if let Err(err) = log_level(&raw.log.level) {
        e.check::<()>("log.level", Err(err));
    }
    let log = Log {
        level: raw.log.level.clone(),
        json,
        access_log: raw.log.access_log,
        access_log_file: raw.log.access_log_file.as_ref().map(Into::into),
        queue_capacity: raw.log.queue_capacity.usize(),
    };
    let names: Vec<&str> = raw.policies.iter().map(|p| p.name.as_str()).collect();
    let diagnosis = super::validate_diagnosis::diagnosis(&mut e, &raw.diagnosis, &names);

    if !e.0.is_empty() {
        return Err(e.0);
    }
    let unset = e.1.unwrap_or_default();
    let config = Config {
        listen,
        admin,
        upstream,
        domains,
        egress,
        intercept,
        store,
        routes: RouteTable::new(routes),
        endpoints,
        policies,
        log,
        metrics: raw.metrics.clone(),
        diagnosis,
        shutdown: raw.shutdown.clone(),
        written: super::written::written(raw),
        fingerprints: crate::fields::fingerprinting(|| super::written::everything(raw)),
    };
    Ok((config, unset))
}

/// The effective config as JSON: the file as read (every key, defaults filled in, units
/// in their canonical spelling, secrets masked: the raw types serialise so), with what
/// validation resolved shown over it: a route's normalised prefix, the egress ranges as
/// matched, each endpoint with the defaults it inherits, each policy's compiled chain.
pub(super) fn effective(c: &Config) -> serde_json::Value {
    let mut shown = json!({
        "egress": {
            "allow": c.egress.allow.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "deny": c.egress.deny.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "connect_ports": c.egress.connect_ports.to_string(),
        },
        "routes": c.routes.as_written().map(|r| json!({"prefix": r.prefix, "upstream": r.display})).collect::<Vec<_>>(),
        "endpoints": c.endpoints.effective(),
        "policies": super::validate_policy::effective(c),
    });
    // Each declared section as written (defaults filled in, secrets masked).
    for (section, v) in c.written.as_object().into_iter().flatten() {
        if !matches!(section.as_str(), "all" | "policies") {
            shown[section] = v.clone();
        }
    }
    // The addresses listened on, `--listen`/`--admin` applied, not the file's.
    shown["listen"] = json!({"address": c.listen.address.to_string()});
    shown["admin"] = json!({"address": c.admin.address.to_string()});
    super::written::fill_missing(&mut shown, &c.written["all"]);
    shown
}

/// The `admin` section: its address and token (a printable word).
fn admin(e: &mut Errors, raw: &RawConfig) -> Admin {
    Admin {
        address: e.addr("admin.address", &raw.admin.address),
        token: raw.admin.token.as_deref().and_then(|t| {
            let t = e.env("admin.token", t)?;
            let ok = !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic());
            e.check(
                "admin.token",
                if ok {
                    Ok(Secret::new(t))
                } else {
                    Err("must be non-empty printable ASCII without spaces".into())
                },
            )
        }),
        hosts: raw
            .admin
            .hosts
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                e.check(
                    &format!("admin.hosts[{i}]"),
                    crate::glob::HostGlob::new(h).map_err(|m| {
                        format!("{m}: write a host name (`tollgate-admin.monitoring.svc`) or `*.example.internal`")
                    }),
                )
            })
            .collect(),
        ui: crate::config::Ui {
            enabled: raw.admin.ui.enabled,
            session_ttl: raw.admin.ui.session_ttl.get(),
            max_sessions: raw.admin.ui.max_sessions.usize(),
        },
    }
}

/// The `upstream` section, its TLS configs built as `run` builds them.
fn upstream(e: &mut Errors, raw: &RawConfig) -> Upstream {
    let u = &raw.upstream;
    Upstream {
        connect_timeout: u.connect_timeout.get(),
        response_timeout: u.response_timeout.get(),
        dns_ttl: u.dns_ttl.get(),
        dns_servers: u
            .dns_servers
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let parsed = s
                    .parse::<std::net::SocketAddr>()
                    .or_else(|_| s.parse::<std::net::IpAddr>().map(|ip| (ip, 53).into()))
                    .map_err(|_| format!("`{s}` is not a DNS server address; write an IP address, optionally with a port (`10.0.0.2`, `10.0.0.2:53`, `[fd00::2]:53`)"));
                e.check(&format!("upstream.dns_servers[{i}]"), parsed)
            })
            .collect(),
        expect_continue_timeout: u.expect_continue_timeout.get(),
        pool_idle_timeout: u.pool.idle_timeout.get(),
        pool_max_idle_per_host: u.pool.max_idle_per_host.usize(),
        // `check` builds what `run` builds: the TLS configs themselves, so a CA file
        // rustls would refuse fails here, not at start.
        // The system's store is read now, so `check` fails where it is empty.
        roots: match u.tls.roots.get() {
            Roots::Webpki => Roots::Webpki,
            other => e
                .check(
                    "upstream.tls.roots",
                    crate::upstream::tls::client_configs(other, None).map(|_| other),
                )
                .unwrap_or_default(),
        },
        extra_ca_file: u.tls.extra_ca_file.as_deref().and_then(|f| {
            e.env_checked("upstream.tls.extra_ca_file", f, |f| {
                crate::upstream::tls::client_configs(u.tls.roots.get(), Some(f.as_ref()))
                    .map(|_| f.into())
            })
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
    }
}

/// The admin API's address apart from the proxy's: both on one port would pass `check`
/// and fail at `run` (the second bind).
fn apart(l: std::net::SocketAddr, a: std::net::SocketAddr) -> Result<(), String> {
    let overlap = l.ip() == a.ip() || l.ip().is_unspecified() || a.ip().is_unspecified();
    if l.port() != 0 && l.port() == a.port() && overlap {
        return Err(format!(
            "`{a}` is the proxy's own address (`listen.address: {l}`): give the admin API a port of its own, e.g. `127.0.0.1:8081`"
        ));
    }
    Ok(())
}

/// A `log.level` `tracing` reads as meant: each directive a level (`info`) or
/// `target=level` (`tollgate=debug`). `tracing` would read a bare word that is no level
/// (`verbose`) as a target to log at every level, switching everything else off.
fn log_level(level: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` is not a level; write one of {} (or `target=level`, e.g. `info,tollgate=debug`)",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(level)
        .map(drop)
        .map_err(|err| format!("`{level}`: {err}"))
}
