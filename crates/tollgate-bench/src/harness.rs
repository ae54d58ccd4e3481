//! What every bench command shares: the output folder, where processes run, the provider,
//! tollgate instances per scenario, peers, and running one measurement.

use crate::loadgen::{self, LoadSpec, Mode, RunResult};
use crate::machine;
use crate::peers::{self, Peer};
use crate::procs::{self, Proc};
use http::Uri;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where things run. With two or more cores: servers on core 0, the load generator on the
/// last core, so that the proxy shares its core with the provider (the setting in which
/// the peers' published ratios were measured) and the client does not steal from either.
#[derive(Debug, Clone)]
pub struct Placement {
    pub servers: Option<String>,
    pub loadgen: Option<usize>,
}

impl Placement {
    pub fn default_for_machine(no_pin: bool) -> Self {
        let n = machine::cores();
        if no_pin || n < 2 {
            Placement {
                servers: None,
                loadgen: None,
            }
        } else {
            Placement {
                servers: Some("0".into()),
                loadgen: Some(n - 1),
            }
        }
    }

    /// Cores for a server using `threads` threads (0..threads-1), when pinning.
    pub fn server_cores(&self, threads: usize) -> Option<String> {
        self.servers.as_ref().map(|_| {
            if threads <= 1 {
                "0".into()
            } else {
                format!("0-{}", threads - 1)
            }
        })
    }
}

pub struct Harness {
    pub bin: PathBuf,
    pub out: PathBuf,
    pub placement: Placement,
    pub provider: SocketAddr,
    _provider_proc: Proc,
    pub lines: Vec<String>,
}

/// A thing to measure: a URL (base) and the process behind it (kept alive).
pub struct Target {
    pub name: String,
    pub base: String,
    pub headers: Vec<(String, String)>,
    pub config_hash: Option<String>,
    pub placement: String,
    pub idle_rss_kib: Option<u64>,
    _proc: Option<Proc>,
}

impl Harness {
    pub fn start(
        bin: Option<PathBuf>,
        out: &Path,
        placement: Placement,
    ) -> Result<Harness, String> {
        let bin = match bin {
            Some(b) => b,
            None => std::env::current_exe().map_err(|e| e.to_string())?,
        };
        std::fs::create_dir_all(out)
            .map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        // Absolute: peers (nginx) resolve relative paths against their own prefix.
        let out = &std::fs::canonicalize(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let (mut cmd, where_) = procs::command(&bin, placement.servers.as_deref());
        cmd.args(["provider", "--listen", "127.0.0.1:0", "--threads", "1"]);
        let (proc, addrs) =
            procs::spawn_tollgate("provider", cmd, where_.clone(), "provider listening")?;
        let provider = *addrs.first().ok_or("provider printed no address")?;
        let mut lines = vec![format!("provider: {provider} ({where_}, 1 thread)")];
        lines.push(format!(
            "load generator: 1 thread, {}",
            placement
                .loadgen
                .map(|c| format!("core {c}"))
                .unwrap_or_else(|| "unpinned".into())
        ));
        Ok(Harness {
            bin,
            out: out.to_owned(),
            placement,
            provider,
            _provider_proc: proc,
            lines,
        })
    }

    pub fn direct(&self) -> Target {
        Target {
            name: "direct".into(),
            base: format!("http://{}", self.provider),
            headers: Vec::new(),
            config_hash: None,
            placement: "-".into(),
            idle_rss_kib: None,
            _proc: None,
        }
    }

    /// Writes the built-in passthrough config (route `/` to the provider) and returns its path.
    pub fn passthrough_config(&self) -> Result<PathBuf, String> {
        let path = self.out.join("passthrough.yaml");
        crate::report::write(
            &self.out,
            "passthrough.yaml",
            "# tollgate with no policies: one route to the provider.\nroutes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\nlog:\n  level: warn\n",
        )?;
        Ok(path)
    }

    /// Starts tollgate with `config`; `${TOLLGATE_BENCH_PROVIDER}` in it is the provider URL.
    pub fn tollgate(
        &mut self,
        name: &str,
        config: &Path,
        threads: usize,
    ) -> Result<Target, String> {
        let cores = self.placement.server_cores(threads);
        let (mut cmd, where_) = procs::command(&self.bin, cores.as_deref());
        cmd.args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--threads",
            &threads.to_string(),
            "--config",
        ])
        .arg(config)
        .env(
            "TOLLGATE_BENCH_PROVIDER",
            format!("http://{}", self.provider),
        )
        .env_remove("RUST_LOG");
        let (proc, addrs) =
            procs::spawn_tollgate(name, cmd, where_.clone(), "tollgate listening:")?;
        let addr = *addrs.first().ok_or("tollgate printed no address")?;
        std::thread::sleep(std::time::Duration::from_millis(200));
        let rss = proc.rss_kib();
        self.lines.push(format!(
            "{name}: tollgate {addr} ({where_}, {threads} thread{}), idle RSS {}",
            if threads == 1 { "" } else { "s" },
            rss.map(|k| format!("{:.1} MB", k as f64 / 1024.0))
                .unwrap_or_else(|| "?".into())
        ));
        Ok(Target {
            name: name.into(),
            base: format!("http://{addr}"),
            headers: Vec::new(),
            config_hash: Some(machine::file_hash(config)),
            placement: where_,
            idle_rss_kib: rss,
            _proc: Some(proc),
        })
    }

    /// Starts a peer, or returns the line saying why it is skipped.
    pub fn peer(&mut self, peer: Peer, workers: usize) -> Result<Target, String> {
        let cores = self.placement.server_cores(workers);
        match peers::start(peer, &self.out, self.provider, cores.as_deref(), workers) {
            Ok((proc, addr)) => {
                self.lines.push(format!(
                    "{}: {addr} ({}, {workers} worker{})",
                    peer.name(),
                    proc.placement,
                    if workers == 1 { "" } else { "s" }
                ));
                Ok(Target {
                    name: peer.name().into(),
                    base: format!("http://{addr}"),
                    headers: Vec::new(),
                    config_hash: None,
                    placement: proc.placement.clone(),
                    idle_rss_kib: proc.rss_kib(),
                    _proc: Some(proc),
                })
            }
            Err(why) => {
                let line = format!("peer {}: {why}", peer.name());
                eprintln!("{line}");
                self.lines.push(line);
                Err(why)
            }
        }
    }

    /// An already running target given by URL.
    pub fn url_target(name: &str, base: &str) -> Target {
        Target {
            name: name.into(),
            base: base.trim_end_matches('/').into(),
            headers: Vec::new(),
            config_hash: None,
            placement: "external".into(),
            idle_rss_kib: None,
            _proc: None,
        }
    }

    pub fn measure(
        &self,
        t: &Target,
        path: &str,
        requests: u64,
        warmup: u64,
        concurrency: usize,
        mode: Mode,
    ) -> Result<RunResult, String> {
        let url: Uri = format!("{}{path}", t.base)
            .parse()
            .map_err(|e| format!("bad URL for {}: {e}", t.name))?;
        let r = loadgen::run(LoadSpec {
            url,
            headers: t.headers.clone(),
            requests,
            warmup,
            concurrency,
            mode,
            core: self.placement.loadgen,
        })?;
        if r.cpu_share() > 0.9 {
            eprintln!(
                "warning: the load generator used {:.0}% of its core while measuring {}: it may be the bottleneck",
                r.cpu_share() * 100.0,
                t.name
            );
        }
        if r.errors > 0 || r.non_2xx > 0 {
            eprintln!(
                "{}: {} errors, {} non-2xx responses",
                t.name, r.errors, r.non_2xx
            );
        }
        Ok(r)
    }
}
