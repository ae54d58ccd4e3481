//! The Lura peer of `tollgate bench aggregate`: a gateway built on KrakenD's own framework
//! (the Go program in `crates/tollgate-bench/lura/`, built here with `go build` from Go
//! modules, or given with `--lura-bin`), its configuration written from the same
//! endpoints tollgate is given, and its process started on the gateway's cores with
//! `GOMAXPROCS` set to its core count.

use crate::procs::{self, Proc, free_port, on_path, wait_port};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// One backend of a benchmark endpoint, as both gateways are given it.
pub struct Backend {
    /// Path and query on the provider.
    pub url: String,
    pub group: Option<&'static str>,
    pub target: Option<&'static str>,
}

/// One benchmark endpoint.
pub struct Endpoint {
    pub path: String,
    pub timeout: Option<&'static str>,
    pub cache_ttl: Option<&'static str>,
    pub backends: Vec<Backend>,
}

/// Lura's configuration (version 3) for `endpoints` in front of `provider`, listening on
/// `listen`: the access log off, as tollgate's is in the bench.
pub fn config(endpoints: &[Endpoint], provider: SocketAddr, listen: SocketAddr) -> Value {
    let host = format!("http://{provider}");
    json!({
        "version": 3,
        "port": listen.port(),
        "listen_ip": listen.ip().to_string(),
        "timeout": "3s",
        "extra_config": {
            "github_com/luraproject/lura/router/gin": { "disable_access_log": true }
        },
        "endpoints": endpoints.iter().map(|e| {
            let mut v = json!({
                "endpoint": e.path,
                "method": "GET",
                "backend": e.backends.iter().map(|b| {
                    let mut v = json!({ "host": [host], "url_pattern": b.url });
                    if let Some(g) = b.group { v["group"] = json!(g); }
                    if let Some(t) = b.target { v["target"] = json!(t); }
                    v
                }).collect::<Vec<_>>(),
            });
            if let Some(t) = e.timeout { v["timeout"] = json!(t); }
            if let Some(c) = e.cache_ttl { v["cache_ttl"] = json!(c); }
            v
        }).collect::<Vec<_>>(),
    })
}

/// tollgate's configuration for the same endpoints (`${TOLLGATE_BENCH_PROVIDER}` is the
/// provider's URL).
pub fn tollgate_config(endpoints: &[Endpoint]) -> String {
    let mut y =
        String::from("# KrakenD's benchmark endpoints (tollgate bench aggregate).\nendpoints:\n");
    for e in endpoints {
        y.push_str(&format!("  - path: {}\n", e.path));
        if let Some(t) = e.timeout {
            y.push_str(&format!("    timeout: {t}\n"));
        }
        if let Some(c) = e.cache_ttl {
            y.push_str(&format!("    cache_ttl: {c}\n"));
        }
        y.push_str("    backends:\n");
        for b in &e.backends {
            y.push_str(&format!(
                "      - url: ${{TOLLGATE_BENCH_PROVIDER}}{}\n",
                b.url
            ));
            if let Some(t) = b.target {
                y.push_str(&format!("        target: {t}\n"));
            }
            if let Some(g) = b.group {
                y.push_str(&format!("        group: {g}\n"));
            }
        }
    }
    y.push_str("log:\n  level: warn\n");
    y
}

/// The Lura gateway binary: `given`, else built from the Go source beside this crate into
/// `out` (Go modules are fetched the first time). `Err` says why there is none.
pub fn binary(given: Option<&Path>, out: &Path) -> Result<PathBuf, String> {
    if let Some(b) = given {
        return if b.is_file() {
            Ok(b.to_owned())
        } else {
            Err(format!("--lura-bin {}: no such file", b.display()))
        };
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("lura");
    if !src.join("main.go").is_file() {
        return Err(format!(
            "the Lura gateway's source is not at {} (a binary built elsewhere): pass --lura-bin",
            src.display()
        ));
    }
    let go = on_path("go").ok_or(
        "go is not on PATH: install Go (1.22 or later) to build the Lura gateway, or pass --lura-bin",
    )?;
    let bin = out.join("lura-gateway");
    eprintln!("building the Lura gateway (go build in {})", src.display());
    let built = std::process::Command::new(go)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run go build: {e}"))?;
    if !built.status.success() {
        return Err(format!(
            "go build failed in {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    Ok(bin)
}

/// Starts the Lura gateway on `cores` with `threads` Go processors, in front of `provider`.
pub fn start(
    bin: &Path,
    dir: &Path,
    endpoints: &[Endpoint],
    provider: SocketAddr,
    cores: Option<&str>,
    threads: usize,
) -> Result<(Proc, SocketAddr), String> {
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("valid address");
    let conf = dir.join("lura.json");
    let text = serde_json::to_string_pretty(&config(endpoints, provider, listen))
        .expect("JSON serialises");
    crate::report::write(dir, "lura.json", &text)?;
    let (mut cmd, placement) = procs::command(bin, cores);
    cmd.arg("-c")
        .arg(&conf)
        .env("GOMAXPROCS", threads.max(1).to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the Lura gateway: {e}"))?;
    let proc = Proc::new("lura", child, placement);
    wait_port(listen, Duration::from_secs(10))
        .map_err(|e| format!("the Lura gateway did not start: {e}"))?;
    Ok((proc, listen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn social() -> Vec<Endpoint> {
        vec![Endpoint {
            path: "/social".into(),
            timeout: Some("1500ms"),
            cache_ttl: Some("3600s"),
            backends: vec![
                Backend {
                    url: "/static".into(),
                    group: Some("fb"),
                    target: None,
                },
                Backend {
                    url: "/static/data".into(),
                    group: Some("youtube"),
                    target: Some("data"),
                },
            ],
        }]
    }

    #[test]
    fn both_gateways_get_the_same_endpoints() {
        let (p, l) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        let lura = config(&social(), p, l);
        assert_eq!(lura["port"], 2);
        assert_eq!(lura["listen_ip"], "127.0.0.1");
        let e = &lura["endpoints"][0];
        assert_eq!(
            (e["endpoint"].as_str(), e["timeout"].as_str()),
            (Some("/social"), Some("1500ms"))
        );
        assert_eq!(e["backend"][1]["target"], "data");
        assert_eq!(e["backend"][1]["host"][0], "http://127.0.0.1:1");
        assert!(e["backend"][0].get("target").is_none());

        let yaml = tollgate_config(&social());
        let cfg = tollgate::Config::from_yaml(
            &yaml.replace("${TOLLGATE_BENCH_PROVIDER}", "http://127.0.0.1:1"),
        )
        .expect("tollgate accepts the benchmark's endpoints");
        let eff = cfg.effective();
        let ep = &eff["endpoints"][0];
        assert_eq!(ep["timeout"], "1500ms");
        assert_eq!(ep["backends"][1]["group"], "youtube");
    }
}
