//! What every bench command shares: the output folder, where processes run, the provider,
//! tollgate instances per scenario, peers, and running one measurement.

use crate::loadgen::{self, LoadSpec, Mode, RunResult};
use crate::machine;
use crate::peers::{self, Peer};
use crate::procs::{self, Proc};
use http::Uri;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where the processes under test run (`--placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// The provider and the proxy on core 0, the load generator alone on the last core:
    /// the proxy competes with the provider, the setting of the peers' published
    /// one-core ratios (the default).
    Shared,
    /// The provider alone on core 0, the proxy on the load generator's core: a sidecar
    /// next to the application, in front of a provider that is elsewhere (the deployment
    /// tollgate is made for).
    Sidecar,
    /// Disjoint core sets (capacity): the proxy under test on cores 0..N-1, the provider
    /// (multi-threaded) on the next cores and the load generator (multi-threaded) on the
    /// last ones, so neither of them is what limits the proxy. Refused on a machine too
    /// small for the layout asked for.
    Dedicated,
    /// No pinning: the scheduler decides.
    None,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Shared => "shared",
            Layout::Sidecar => "sidecar",
            Layout::Dedicated => "dedicated",
            Layout::None => "none",
        }
    }
}

/// How targets share a round (`--interleave`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Interleave {
    Requests,
    Rounds,
}

impl Interleave {
    /// How the targets of a round were measured, in words, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Interleave::Requests => "interleaved request by request",
            Interleave::Rounds => "one after another per round",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Interleave::Requests => "requests",
            Interleave::Rounds => "rounds",
        }
    }

    /// What the noise floor is, in words, for reports.
    pub fn noise_text(self) -> &'static str {
        match self {
            Interleave::Requests => {
                "the largest difference, in any round, between two copies of direct measured at the same time"
            }
            Interleave::Rounds => "the spread between the direct rounds",
        }
    }
}

/// One target's result in a round; `twin` marks the second copy of the baseline.
pub struct Measured {
    pub index: usize,
    pub twin: bool,
    pub result: RunResult,
}

impl Measured {
    /// Adds this round to its target's series (`series[index]`; the twin to the baseline's).
    pub fn add_to(self, series: &mut [crate::stats::Series]) {
        if self.twin {
            series[0].add_twin_round(self.result.hist);
        } else {
            series[self.index].add_round(self.result.hist);
        }
    }
}

/// Cores per role for a [`Layout`] on this machine (none when not pinning).
#[derive(Debug, Clone)]
pub struct Placement {
    pub layout: Layout,
    /// The provider's cores (a `taskset` list) and its threads.
    pub provider: Option<String>,
    pub provider_threads: usize,
    /// The load generator's cores, one thread on each (empty: one unpinned thread).
    pub loadgen: Vec<usize>,
}

impl Placement {
    /// A placement with one provider thread and one load-generator thread
    /// (`shared`, `sidecar`, `none`); see [`Placement::dedicated`] for the other.
    pub fn new(layout: Layout) -> Self {
        let n = machine::cores();
        if matches!(layout, Layout::None | Layout::Dedicated) || n < 2 {
            return Placement {
                layout: Layout::None,
                provider: None,
                provider_threads: 1,
                loadgen: Vec::new(),
            };
        }
        Placement {
            layout,
            provider: Some("0".into()),
            provider_threads: 1,
            loadgen: vec![n - 1],
        }
    }

    /// The `dedicated` layout on a machine of `n` cores for a proxy of up to `max_proxy`
    /// cores: the proxy on 0..max_proxy-1, then half of the cores left for the provider
    /// (rounded up) and the rest for the load generator. Refused, saying why, when fewer
    /// than one core each would be left.
    pub fn dedicated(max_proxy: usize, n: usize) -> Result<Self, String> {
        let max_proxy = max_proxy.max(1);
        if max_proxy + 2 > n {
            return Err(format!(
                "--placement dedicated needs {max_proxy} core(s) for the proxy plus at least one for the provider and one for the load generator ({} in all); this machine has {n}. Lower --cores or measure on a larger machine: nothing was measured",
                max_proxy + 2
            ));
        }
        let spare = n - max_proxy;
        let provider = spare.div_ceil(2);
        let first_loadgen = max_proxy + provider;
        Ok(Placement {
            layout: Layout::Dedicated,
            provider: Some(range(max_proxy, first_loadgen - 1)),
            provider_threads: provider,
            loadgen: (first_loadgen..n).collect(),
        })
    }

    /// How many load-generator threads run (one per core given, at least one).
    pub fn loadgen_threads(&self) -> usize {
        self.loadgen.len().max(1)
    }

    /// The load generator's cores in words, for reports.
    pub fn loadgen_text(&self) -> String {
        match self.loadgen.as_slice() {
            [] => "unpinned".into(),
            [c] => format!("core {c}"),
            [a, .., b] => format!("cores {a}-{b}"),
        }
    }

    /// Why a proxy on `threads` cores does not have them to itself, when it does not: the
    /// cores it shares with the provider or the load generator (a proxy of 2 threads on
    /// a 2-core machine shares both). `None` under `dedicated`, or when it has its own.
    pub fn shared_cores(&self, threads: usize) -> Option<String> {
        self.shared_on(threads, machine::cores())
    }

    fn shared_on(&self, threads: usize, n: usize) -> Option<String> {
        let t = threads.max(1);
        let with = |provider: bool, loadgen: bool| match (provider, loadgen) {
            (true, true) => Some("the provider and the load generator"),
            (true, false) => Some("the provider"),
            (false, true) => Some("the load generator"),
            (false, false) => None,
        };
        let shares = match self.layout {
            Layout::Dedicated => None,
            Layout::None => (t + 2 > n).then_some("the provider and the load generator (unpinned)"),
            Layout::Shared => with(true, t >= n),
            Layout::Sidecar => with(t >= n, true),
        }?;
        Some(format!(
            "at {t} core(s) the proxy shares cores with {shares} ({n} cores on this machine): its requests/s and scaling there are understated"
        ))
    }

    /// Cores for a proxy using `threads` threads, when pinning: from core 0 up (shared),
    /// or from the last core down (sidecar, so one thread shares the load generator's core).
    pub fn server_cores(&self, threads: usize) -> Option<String> {
        if self.layout == Layout::Dedicated {
            // Planned for these counts already (`Placement::dedicated`).
            return Some(range(0, threads.max(1) - 1));
        }
        let n = machine::cores();
        let threads = threads.clamp(1, n.max(1));
        match self.layout {
            Layout::None | Layout::Dedicated => None,
            Layout::Shared if threads == 1 => Some("0".into()),
            Layout::Shared => Some(format!("0-{}", threads - 1)),
            Layout::Sidecar if threads == 1 => Some((n - 1).to_string()),
            Layout::Sidecar => Some(format!("{}-{}", n - threads, n - 1)),
        }
    }
}

/// A `taskset` core list from `a` to `b`.
fn range(a: usize, b: usize) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

pub struct Harness {
    pub bin: PathBuf,
    /// What the measured binary says it is (`tollgate 0.1.0 (commit …)`): with
    /// `--tollgate-bin` another build than the one driving the bench.
    pub measured: String,
    pub out: PathBuf,
    pub placement: Placement,
    pub provider: SocketAddr,
    /// A tool the proxies under test run under (`valgrind …`; empty: none); the provider
    /// and the load generator never do.
    pub tool: Vec<std::ffi::OsString>,
    _provider_proc: Proc,
    /// Other processes that live as long as the harness (the TLS provider).
    keep: Vec<Proc>,
    pub lines: Vec<String>,
    /// The points whose load generator was already said to be busy: the warning is
    /// printed once per point, not once per round.
    warned: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// A thing to measure: a URL (base) and the process behind it (kept alive).
pub struct Target {
    pub name: String,
    pub base: String,
    pub headers: Vec<(String, String)>,
    pub config_hash: Option<String>,
    pub placement: String,
    pub idle_rss_kib: Option<u64>,
    /// tollgate's admin listener (targets the bench started).
    pub admin: Option<std::net::SocketAddr>,
    /// The process of the target this one is a view of ([`Target::view`]).
    view_of: Option<u32>,
    /// An `https` target: its proxy (CONNECT) and what its TLS clients trust.
    pub tls: Option<std::sync::Arc<crate::loadgen::Tls>>,
    /// Each request to it POSTs this body as JSON (an MCP call); `None`: a GET.
    pub post: Option<bytes::Bytes>,
    _proc: Option<Proc>,
}

impl Target {
    /// HAR entries encoded and dropped (writer queue full), from the target's `/metrics`.
    pub fn har_counts(&self) -> Option<(u64, u64)> {
        let text = self.metrics()?;
        let value = |name: &str| counter(&text, name).unwrap_or(0);
        Some((
            value("tollgate_har_entries_total{sink=\"encoded\"}"),
            value("tollgate_har_dropped_total{sink=\"queue\"}"),
        ))
    }

    /// The target's `/metrics` (targets the bench started with an admin listener).
    pub fn metrics(&self) -> Option<String> {
        use std::io::{Read, Write};
        let admin = self.admin?;
        let mut s = std::net::TcpStream::connect(admin).ok()?;
        // Its address as `Host`: an admin listener without a token answers no other name.
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The process behind this target, when the bench started it (not direct, not URLs).
    pub fn pid(&self) -> Option<u32> {
        self._proc.as_ref().map(|p| p.pid()).or(self.view_of)
    }

    /// The same server under another name, at `path` below its base (measured with an
    /// empty path): several endpoints of one process measured as targets of their own.
    /// This target keeps the process; keep it alive while the view is used.
    pub fn view(&self, name: &str, path: &str) -> Target {
        Target {
            name: name.into(),
            base: format!("{}{path}", self.base),
            headers: self.headers.clone(),
            config_hash: self.config_hash.clone(),
            placement: self.placement.clone(),
            idle_rss_kib: self.idle_rss_kib,
            admin: self.admin,
            view_of: self.pid(),
            _proc: None,
            tls: self.tls.clone(),
            post: self.post.clone(),
        }
    }

    /// A target for a process the bench started by other means (the Lura gateway).
    pub fn of_process(name: &str, proc: Proc, addr: std::net::SocketAddr) -> Target {
        Target {
            name: name.into(),
            base: format!("http://{addr}"),
            headers: Vec::new(),
            config_hash: None,
            placement: proc.placement.clone(),
            idle_rss_kib: proc.rss_kib(),
            admin: None,
            view_of: None,
            _proc: Some(proc),
            tls: None,
            post: None,
        }
    }
}

/// The value of the series `name` (with its labels) in a `/metrics` text.
pub fn counter(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

impl Harness {
    /// Starts a second provider serving HTTPS (`provider --tls-dir`), placed as the first;
    /// returns its address and the CA its certificate chains to. It lives as long as the
    /// harness.
    pub fn tls_provider(&mut self) -> Result<(SocketAddr, PathBuf), String> {
        let dir = self.out.join("provider-tls");
        let (mut cmd, where_) = procs::command(&self.bin, self.placement.provider.as_deref());
        let pt = self.placement.provider_threads.max(1);
        cmd.args(["provider", "--listen", "127.0.0.1:0", "--threads"])
            .arg(pt.to_string())
            .arg("--tls-dir")
            .arg(&dir);
        let (proc, addrs) =
            procs::spawn_tollgate("tls provider", cmd, where_.clone(), "provider listening")?;
        let addr = *addrs.first().ok_or("the TLS provider printed no address")?;
        self.lines
            .push(format!("TLS provider: {addr} ({where_}, {pt} thread(s))"));
        self.keep.push(proc);
        Ok((addr, dir.join(tollgate_provider::tls::CA_FILE)))
    }

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
        // Results name the build they measured: with `--tollgate-bin`, not the driver's.
        // One that cannot say is still measured, and named as unknown.
        let measured =
            procs::version_of(&bin, out).unwrap_or_else(|e| format!("an unknown build ({e})"));
        let (mut cmd, where_) = procs::command(&bin, placement.provider.as_deref());
        let pt = placement.provider_threads.max(1);
        cmd.args([
            "provider",
            "--listen",
            "127.0.0.1:0",
            "--threads",
            &pt.to_string(),
        ]);
        let (proc, addrs) =
            procs::spawn_tollgate("provider", cmd, where_.clone(), "provider listening")?;
        let provider = *addrs.first().ok_or("provider printed no address")?;
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let mut lines = vec![
            format!("gateway measured: {measured} ({})", bin.display()),
            format!("provider: {provider} ({where_}, {pt} thread{})", plural(pt)),
        ];
        let lt = placement.loadgen_threads();
        lines.push(format!(
            "load generator: {lt} thread{}, {}",
            plural(lt),
            placement.loadgen_text()
        ));
        Ok(Harness {
            bin,
            measured,
            out: out.to_owned(),
            placement,
            provider,
            tool: Vec::new(),
            _provider_proc: proc,
            keep: Vec::new(),
            lines,
            warned: Default::default(),
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
            admin: None,
            view_of: None,
            _proc: None,
            tls: None,
            post: None,
        }
    }

    /// Writes config `file` (under the output directory) with `yaml`, and returns its path.
    fn config(&self, file: &str, yaml: &str) -> Result<PathBuf, String> {
        crate::report::write(&self.out, file, yaml)?;
        Ok(self.out.join(file))
    }

    /// Writes the built-in passthrough config (route `/` to the provider) and returns its path.
    pub fn passthrough_config(&self) -> Result<PathBuf, String> {
        self.config("passthrough.yaml", "# tollgate with no policies: one route to the provider.\nroutes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\nlog:\n  level: warn\n")
    }

    /// Writes the built-in `with-remedy` config: one policy matching every request, with
    /// a rate limit that never rejects and a cache lookup that always misses (it stores
    /// only a status the provider never sends), so every request runs the policy engine,
    /// two remedies and the provider call.
    pub fn with_remedy_config(&self) -> Result<PathBuf, String> {
        self.config("with-remedy.yaml", "# Every request matched: a rate limit that never rejects and a cache that always misses.
routes:
  - prefix: /
    upstream: ${TOLLGATE_BENCH_PROVIDER}
policies:
  - name: all
    rate_limit: {limit: 1000000000000, window: second}
    cache: {ttl: 1h, statuses: [299]}
log:
  level: warn
")
    }

    /// Writes the built-in `matched` config: one policy matching every request that only
    /// frames it (`timeouts`, a per-attempt setting): the matched path's own cost, which
    /// every remedy pays before its own.
    pub fn matched_config(&self) -> Result<PathBuf, String> {
        self.config(
            "matched.yaml",
            "# Every request matched by a policy that only frames it.
routes:
  - prefix: /
    upstream: ${TOLLGATE_BENCH_PROVIDER}
policies:
  - name: all
    timeouts: {response: 1m}
log:
  level: warn
",
        )
    }

    /// Writes the built-in `with-credentials` config: one policy matching every request
    /// that sets an API key on each attempt (`credentials`, a remedy of the attempt stack),
    /// as a policy that only holds a provider's key does.
    pub fn with_credentials_config(&self) -> Result<PathBuf, String> {
        self.config(
            "with-credentials.yaml",
            "# Every request matched: an API key set on each attempt.
routes:
  - prefix: /
    upstream: ${TOLLGATE_BENCH_PROVIDER}
policies:
  - name: all
    credentials: {header: {name: x-api-key, value: bench-key}}
log:
  level: warn
",
        )
    }

    /// Writes the built-in `with-diagnosis` config: no policy; every call captured as a
    /// HAR entry to a file sink (under the output directory), discovery and per-endpoint
    /// metrics on.
    pub fn with_diagnosis_config(&self) -> Result<PathBuf, String> {
        let path = self.out.join("with-diagnosis.yaml");
        let har = self.out.join("har");
        crate::report::write(
            &self.out,
            "with-diagnosis.yaml",
            &format!(
                "# Every call captured to HAR files, discovered and measured per endpoint.
routes:
  - prefix: /
    upstream: ${{TOLLGATE_BENCH_PROVIDER}}
diagnosis:
  discovery: {{enabled: true, metrics: true}}
  har:
    enabled: true
    file: {{dir: {}, retain: 4}}
log:
  level: warn
",
                har.display()
            ),
        )?;
        Ok(path)
    }

    /// Writes the built-in `cache-hit` config: every GET answered from the cache after
    /// the first (no provider call).
    pub fn cache_hit_config(&self) -> Result<PathBuf, String> {
        self.config(
            "cache-hit.yaml",
            "# Every request after the first answered from the cache.
routes:
  - prefix: /
    upstream: ${TOLLGATE_BENCH_PROVIDER}
policies:
  - name: cached
    cache: {ttl: 1h}
log:
  level: warn
",
        )
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
        let cmd = procs::under(&self.tool, cmd);
        let (proc, addrs) =
            procs::spawn_tollgate(name, cmd, where_.clone(), "tollgate listening:")?;
        let addr = *addrs.first().ok_or("tollgate printed no address")?;
        let admin = addrs.get(1).copied();
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
            admin,
            view_of: None,
            _proc: Some(proc),
            tls: None,
            post: None,
        })
    }

    /// Starts a peer, or returns the line saying why it is skipped.
    pub fn peer(&mut self, peer: Peer, workers: usize) -> Result<Target, String> {
        let cores = self.placement.server_cores(workers);
        let at = peers::At {
            dir: &self.out,
            provider: self.provider,
            cores: cores.as_deref(),
            tool: &self.tool,
        };
        match peers::start(peer, &at, workers) {
            Ok((proc, addr)) => {
                self.lines.push(format!(
                    "{}: {addr} ({}, {workers} worker{})",
                    peer.name(),
                    proc.placement,
                    if workers == 1 { "" } else { "s" }
                ));
                Ok(Target::of_process(peer.name(), proc, addr))
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
            admin: None,
            view_of: None,
            _proc: None,
            tls: None,
            post: None,
        }
    }

    /// One round over `targets` (the first is the baseline, direct): one after another, or
    /// all at once request by request with a second copy of the baseline (its twin).
    #[allow(clippy::too_many_arguments)]
    pub fn round(
        &self,
        targets: &[&Target],
        how: Interleave,
        path: &str,
        requests: u64,
        warmup: u64,
        connections: usize,
        mode: Mode,
    ) -> Result<Vec<Measured>, String> {
        match how {
            Interleave::Rounds => {
                let mut v = Vec::new();
                for (index, t) in targets.iter().enumerate() {
                    let result = self.measure(t, path, requests, warmup, connections, mode)?;
                    v.push(Measured {
                        index,
                        twin: false,
                        result,
                    });
                }
                Ok(v)
            }
            Interleave::Requests => {
                let mut list = targets.to_vec();
                if let Some(first) = targets.first() {
                    list.insert(1, first);
                }
                let results =
                    self.measure_many(&list, path, requests, warmup, connections, mode)?;
                Ok(results
                    .into_iter()
                    .enumerate()
                    .map(|(k, result)| Measured {
                        index: k.saturating_sub(1),
                        twin: k == 1,
                        result,
                    })
                    .collect())
            }
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
        self.measure_many(&[t], path, requests, warmup, concurrency, mode)?
            .pop()
            .ok_or_else(|| "no result".into())
    }

    /// Measures several targets at once, interleaved request by request
    /// ([`loadgen::run_many`]); each gets `requests` at `mode`'s rate.
    pub fn measure_many(
        &self,
        targets: &[&Target],
        path: &str,
        requests: u64,
        warmup: u64,
        concurrency: usize,
        mode: Mode,
    ) -> Result<Vec<RunResult>, String> {
        self.measure_requests(targets, (path, None), requests, warmup, concurrency, mode)
    }

    /// [`Harness::measure`] with each request POSTing `body` as JSON, closed loop.
    pub fn measure_post(
        &self,
        t: &Target,
        (path, body): (&str, &bytes::Bytes),
        requests: u64,
        concurrency: usize,
    ) -> Result<RunResult, String> {
        self.measure_requests(
            &[t],
            (path, Some(body.clone())),
            requests,
            0,
            concurrency,
            Mode::Closed,
        )?
        .pop()
        .ok_or_else(|| "no result".into())
    }

    fn measure_requests(
        &self,
        targets: &[&Target],
        (path, body): (&str, Option<bytes::Bytes>),
        requests: u64,
        warmup: u64,
        concurrency: usize,
        mode: Mode,
    ) -> Result<Vec<RunResult>, String> {
        let mut specs = Vec::with_capacity(targets.len());
        for t in targets {
            let url: Uri = format!("{}{path}", t.base)
                .parse()
                .map_err(|e| format!("bad URL for {}: {e}", t.name))?;
            specs.push(LoadSpec {
                url,
                headers: t.headers.clone(),
                body: body.clone().or_else(|| t.post.clone()),
                requests,
                warmup,
                concurrency,
                mode,
                cores: self.placement.loadgen.clone(),
                threads: self.placement.loadgen_threads(),
                tls: t.tls.clone(),
            });
        }
        let results = loadgen::run_many(specs)?;
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        let point = format!("{} {path} c={concurrency}", names.join(","));
        if let Some(r) = results.first()
            && r.cpu_share() > 0.9
            && self
                .warned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(point)
        {
            eprintln!(
                "warning: the load generator used {:.0}% of its core(s) while measuring {}: it may be the bottleneck",
                r.cpu_share() * 100.0,
                names.join(", ")
            );
        }
        for (t, r) in targets.iter().zip(&results) {
            if r.errors > 0 || r.non_2xx > 0 {
                eprintln!(
                    "{}: {} errors, {} non-2xx responses",
                    t.name, r.errors, r.non_2xx
                );
            }
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_sharing_its_cores_is_said_to() {
        let on = |layout, t, n| {
            Placement {
                layout,
                provider: None,
                provider_threads: 1,
                loadgen: Vec::new(),
            }
            .shared_on(t, n)
        };
        let two = on(Layout::Shared, 2, 2).unwrap();
        assert!(
            two.contains("with the provider and the load generator (2 cores"),
            "{two}"
        );
        assert!(
            on(Layout::Shared, 1, 16)
                .unwrap()
                .contains("with the provider (")
        );
        assert!(
            on(Layout::Sidecar, 1, 16)
                .unwrap()
                .contains("with the load generator (")
        );
        assert_eq!(on(Layout::None, 4, 16), None);
        assert!(on(Layout::None, 2, 2).is_some());
        assert_eq!(on(Layout::Dedicated, 4, 16), None);
    }

    #[test]
    fn dedicated_gives_each_role_cores_of_its_own() {
        let p = Placement::dedicated(8, 16).unwrap();
        assert_eq!(p.server_cores(8).as_deref(), Some("0-7"));
        assert_eq!(p.server_cores(1).as_deref(), Some("0"));
        assert_eq!(p.provider.as_deref(), Some("8-11"));
        assert_eq!(p.provider_threads, 4);
        assert_eq!(p.loadgen, vec![12, 13, 14, 15]);
        assert_eq!(p.loadgen_text(), "cores 12-15");
        let small = Placement::dedicated(1, 3).unwrap();
        assert_eq!(
            (small.provider.as_deref(), small.loadgen.as_slice()),
            (Some("1"), &[2][..])
        );
    }

    #[test]
    fn dedicated_refuses_a_machine_too_small() {
        let e = Placement::dedicated(8, 9).unwrap_err();
        assert!(e.contains("this machine has 9"), "{e}");
        assert!(e.contains("nothing was measured"), "{e}");
    }
}
