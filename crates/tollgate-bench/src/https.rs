//! `tollgate bench https`: HTTPS through the proxy as `HTTPS_PROXY` clients use it. Keep-
//! alive requests through a decrypted tunnel (interception) against a plain CONNECT
//! tunnel, straight to the provider, and mitmproxy (`mitmdump`, its own CA, no addons) in
//! the same run: the footprint per percentile (open loop, interleaved request by request),
//! requests per second on one core (closed loop, rounds A B A B), the CPU of a new
//! connection (leaf cached), and a storm of new hosts (the CPU of a leaf, and established
//! traffic's latency while the storm runs).

use crate::harness::{Harness, Interleave, Layout, Target};
use crate::loadgen::{Mode, Tls};
use crate::stats::{self, Series};
use crate::{CommonArgs, machine, procs, report};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct HttpsArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Requests per target for the footprint and for capacity, split over the rounds
    /// (default 30000; --quick 6000).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Open-loop arrival rate of the footprint, per target (requests/s).
    #[arg(long, default_value_t = 400.0)]
    pub rate: f64,
    /// Keep-alive connections of the capacity measurement.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// New connections measured for the handshake's CPU (default 2000; --quick 300).
    #[arg(long)]
    pub handshakes: Option<u64>,
    /// Distinct hosts of the leaf storm (default 1000; --quick 200).
    #[arg(long)]
    pub storm_hosts: Option<usize>,
    /// mitmproxy's `mitmdump` (default: the one on PATH; absent: mitmproxy is skipped,
    /// said in the report).
    #[arg(long)]
    pub mitmdump: Option<PathBuf>,
}

/// The path every request asks for: the provider's fixed 110-byte body, no delay.
const PATH: &str = "/static";

pub fn run(args: HttpsArgs) -> Result<(), String> {
    let c = &args.common;
    let quick = c.quick;
    let requests = args.requests.unwrap_or(if quick { 6_000 } else { 30_000 });
    let handshakes = args.handshakes.unwrap_or(if quick { 300 } else { 2_000 });
    let storm_hosts = args.storm_hosts.unwrap_or(if quick { 200 } else { 1_000 });
    let load_before = machine::loadavg();
    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, c.placement(Layout::Shared)?)?;
    let (provider, provider_ca) = h.tls_provider()?;
    let origin = format!("https://localhost:{}", provider.port());

    // tollgate's CA, made for this run as `tollgate ca init` makes one.
    let ca_dir = h.out.join("tollgate-ca");
    tollgate::intercept::ca::Ca::create(&ca_dir, true).map_err(|e| e.to_string())?;
    let ca = ca_dir.join(tollgate::intercept::ca::CERT_FILE);
    let key = ca_dir.join(tollgate::intercept::ca::KEY_FILE);

    let tunnel_cfg = config(&h.out, "tunnel.yaml", "")?;
    let intercept_cfg = config(
        &h.out,
        "intercepted.yaml",
        &format!(
            "upstream:\n  tls:\n    extra_ca_file: {}\nintercept:\n  hosts: [localhost, '*.storm.test']\n  ca: {{cert_file: {}, key_file: {}}}\n  max_hosts: 100000\n",
            provider_ca.display(),
            ca.display(),
            key.display()
        ),
    )?;
    let tunnel_proc = h.tollgate("tunnel", &tunnel_cfg, c.threads)?;
    let intercept_proc = h.tollgate("intercepted", &intercept_cfg, c.threads)?;
    let direct = https_target(&tunnel_proc, "direct-tls", &origin, &provider_ca, None)?;
    let tunnel = https_target(
        &tunnel_proc,
        "tunnel",
        &origin,
        &provider_ca,
        addr(&tunnel_proc),
    )?;
    let intercepted = https_target(
        &intercept_proc,
        "intercepted",
        &origin,
        &ca,
        addr(&intercept_proc),
    )?;
    let mitm = match mitmproxy(&mut h, args.mitmdump.clone(), &provider_ca, c.threads) {
        Ok((proc, at, mitm_ca)) => Some(https_target(
            &proc,
            "mitmproxy",
            &origin,
            &mitm_ca,
            Some(at),
        )?),
        Err(why) => {
            let line = format!("mitmproxy: skipped ({why})");
            eprintln!("{line}");
            h.lines.push(line);
            None
        }
    };
    for l in &h.lines {
        eprintln!("{l}");
    }
    eprintln!("load average before: {load_before}");
    let mut all: Vec<&Target> = vec![&direct, &tunnel, &intercepted];
    all.extend(mitm.as_ref());
    let rounds = c.rounds.max(2);
    let warmup = c.warmup.unwrap_or(if quick { 200 } else { 1000 });

    // 1. Footprint: open loop, every target in the same run, request by request.
    let per_round = (requests / rounds as u64).max(1);
    let mut series: Vec<Series> = all.iter().map(|t| Series::new(&t.name)).collect();
    let connections = 32;
    for round in 0..rounds {
        let w = if round == 0 { warmup } else { 0 };
        let mode = Mode::Open { rate: args.rate };
        for m in h.round(
            &all,
            Interleave::Requests,
            PATH,
            per_round,
            w,
            connections,
            mode,
        )? {
            m.add_to(&mut series);
        }
    }
    let (base, others) = series.split_first().expect("direct is first");
    let rows = stats::rows(base, &others.iter().collect::<Vec<_>>());
    report::write(&c.out, "percentiles.csv", &report::percentiles_csv(&rows))?;
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let p50 = |name: &str| {
        series
            .iter()
            .find(|s| s.name == name)
            .map_or(0.0, |s| s.value_us(50.0))
    };
    let over_tunnel = p50("intercepted") - p50("tunnel");

    // 2. Capacity: closed loop, one target at a time, rounds A B A B.
    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); all.len()];
    let capacity_targets: Vec<&Target> = all[1..].to_vec();
    for _ in 0..rounds {
        for (i, t) in capacity_targets.iter().enumerate() {
            let r = h.measure(
                t,
                PATH,
                per_round,
                warmup / 2,
                args.concurrency,
                Mode::Closed,
            )?;
            eprintln!(
                "capacity {:<12} {:>8.0} req/s ({} errors, load-gen CPU {:.0}%)",
                t.name,
                r.rps(),
                r.errors,
                r.cpu_share() * 100.0
            );
            rps[i + 1].push(r.rps());
        }
    }
    let rps: Vec<f64> = rps.iter_mut().map(|v| stats::median(v)).collect();

    // 3. A new connection each request (the leaf cached): the proxy's CPU per connection.
    let mut per_conn = Vec::new();
    for t in &capacity_targets {
        let mut closing = t.view(&t.name, "");
        closing.tls = t.tls.clone();
        closing.headers.push(("connection".into(), "close".into()));
        let pid = t.pid().ok_or("no process")?;
        let before = procs::tree_cpu(pid).ok_or("no CPU reading")?;
        let r = h.measure(&closing, PATH, handshakes, 0, 8, Mode::Closed)?;
        let after = procs::tree_cpu(pid).ok_or("no CPU reading")?;
        let cpu = (after.0 + after.1).saturating_sub(before.0 + before.1);
        let us = cpu.as_secs_f64() * 1e6 / (r.ok.max(1)) as f64;
        eprintln!(
            "new connection {:<12} {us:>8.0} µs CPU each, p50 {:.3} ms ({} ok, {} errors)",
            t.name,
            stats::value_us(&r.hist, 50.0) / 1000.0,
            r.ok,
            r.errors
        );
        per_conn.push((t.name.clone(), us, stats::value_us(&r.hist, 50.0)));
    }

    // 4. The storm: new hosts, each a leaf to make, while established connections run.
    let storm = storm(
        &h,
        &intercepted,
        &intercept_proc,
        &ca,
        storm_hosts,
        args.rate,
        quick,
    )?;
    let load_after = machine::loadavg();
    eprintln!("load average after: {load_after}");

    let mut md = String::new();
    md += &format!(
        "# tollgate bench https\n\n{}, {} cores, one proxy thread each. Footprint: open loop at {} requests/s per target over {connections} connections, targets interleaved request by request, median of {rounds} rounds. Capacity: closed loop, {} keep-alive connections, rounds A B A B.\n\n",
        machine::cpu_model(),
        machine::cores(),
        args.rate,
        args.concurrency
    );
    md += &report::summary_table(&rows, &names);
    md += &format!(
        "\nintercepted − tunnel at p50: **{over_tunnel:+.0} µs**\n\n| target | requests/s (median) |\n|---|---:|\n"
    );
    for (t, r) in all.iter().zip(&rps).skip(1) {
        md += &format!("| {} | {r:.0} |\n", t.name);
    }
    let ratio = |a: &str, b: &str| {
        let at = |n: &str| all.iter().position(|t| t.name == n).map(|i| rps[i]);
        at(a).zip(at(b)).map(|(a, b)| a / b.max(1e-9))
    };
    if let Some(r) = ratio("intercepted", "mitmproxy") {
        md += &format!("\nintercepted ÷ mitmproxy: **{r:.1}×**\n");
    }
    md += "\n| new connection (CONNECT, TLS, one request) | proxy CPU per connection | p50 |\n|---|---:|---:|\n";
    for (n, us, p) in &per_conn {
        md += &format!("| {n} | {us:.0} µs | {:.2} ms |\n", p / 1000.0);
    }
    md += &storm.markdown();
    report::write(&c.out, "summary.md", &md)?;
    eprintln!("\n{md}");
    let mut meta = machine::metadata("bench https", &std::env::args().collect::<Vec<_>>());
    meta["footprint_p50_over_tunnel_us"] = json!(over_tunnel);
    meta["requests_per_second"] = json!(
        all.iter()
            .zip(&rps)
            .skip(1)
            .map(|(t, r)| (t.name.clone(), json!(r)))
            .collect::<serde_json::Map<_, _>>()
    );
    meta["new_connection_cpu_us"] = json!(
        per_conn
            .iter()
            .map(|(n, us, _)| (n.clone(), json!(us)))
            .collect::<serde_json::Map<_, _>>()
    );
    meta["storm"] = storm.json();
    report::write_metadata(
        &c.out,
        meta,
        &h.lines,
        (&load_before, &load_after),
        &[
            "percentiles.csv".into(),
            "summary.md".into(),
            "metadata.json".into(),
        ],
    )
}

/// Writes a tollgate config for this bench: any CONNECT port, quiet logs, and `extra`.
fn config(out: &Path, name: &str, extra: &str) -> Result<PathBuf, String> {
    report::write(
        out,
        name,
        &format!("egress:\n  connect_ports: ['*']\nlog:\n  level: warn\n{extra}"),
    )?;
    Ok(out.join(name))
}

fn addr(t: &Target) -> Option<std::net::SocketAddr> {
    t.base.strip_prefix("http://")?.parse().ok()
}

/// `origin` reached through `proxy` (or straight), trusting `roots`; keeps `process`'s
/// process for its CPU readings.
fn https_target(
    process: &Target,
    name: &str,
    origin: &str,
    roots: &Path,
    proxy: Option<std::net::SocketAddr>,
) -> Result<Target, String> {
    let mut t = process.view(name, "");
    t.base = origin.to_owned();
    t.tls = Some(Tls::trusting(roots, proxy)?);
    Ok(t)
}

/// Starts `mitmdump` with a CA of its own in the output folder, verifying the provider
/// with its CA; returns its process (as a target), address and CA.
fn mitmproxy(
    h: &mut Harness,
    bin: Option<PathBuf>,
    provider_ca: &Path,
    threads: usize,
) -> Result<(Target, std::net::SocketAddr, PathBuf), String> {
    let bin = bin
        .or_else(|| procs::on_path("mitmdump"))
        .ok_or("no `mitmdump` on PATH (pip install mitmproxy, or --mitmdump PATH)")?;
    let conf = h.out.join("mitmproxy");
    std::fs::create_dir_all(&conf).map_err(|e| e.to_string())?;
    let port = procs::free_port();
    let at: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let cores = h.placement.server_cores(threads);
    let (mut cmd, where_) = procs::command(&bin, cores.as_deref());
    cmd.args([
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        &port.to_string(),
    ])
    .arg("--set")
    .arg(format!("confdir={}", conf.display()))
    .arg("--set")
    .arg(format!(
        "ssl_verify_upstream_trusted_ca={}",
        provider_ca.display()
    ))
    .args(["--set", "flow_detail=0", "-q"])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let proc = procs::Proc::new("mitmproxy", child, where_.clone());
    procs::wait_port(at, Duration::from_secs(30))?;
    let ca = conf.join("mitmproxy-ca-cert.pem");
    if !ca.exists() {
        return Err(format!("mitmproxy made no CA in {}", conf.display()));
    }
    h.lines
        .push(format!("mitmproxy: {at} ({where_}, {})", bin.display()));
    Ok((Target::of_process("mitmproxy", proc, at), at, ca))
}

/// What the storm of new hosts measured.
struct Storm {
    hosts: usize,
    handshakes_ok: usize,
    wall: Duration,
    /// tollgate's CPU per new host (a leaf made, and its handshake).
    cpu_per_host_us: f64,
    leaves: u64,
    /// Established traffic's (p50, p99) in µs, before and during the storm.
    quiet: (f64, f64),
    during: (f64, f64),
}

impl Storm {
    fn markdown(&self) -> String {
        format!(
            "\nLeaf storm: {} new hosts ({} handshakes completed, {} leaves made) in {:.2} s; tollgate CPU per new host (leaf and handshake) **{:.0} µs**. Established keep-alive requests meanwhile: p50 {:.0} µs / p99 {:.0} µs (without the storm: {:.0} / {:.0}).\n",
            self.hosts,
            self.handshakes_ok,
            self.leaves,
            self.wall.as_secs_f64(),
            self.cpu_per_host_us,
            self.during.0,
            self.during.1,
            self.quiet.0,
            self.quiet.1
        )
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "hosts": self.hosts, "handshakes_ok": self.handshakes_ok, "wall_s": self.wall.as_secs_f64(),
            "cpu_per_host_us": self.cpu_per_host_us, "leaves_made": self.leaves,
            "established_p50_p99_us": {"quiet": [self.quiet.0, self.quiet.1], "during": [self.during.0, self.during.1]},
        })
    }
}

/// Handshakes to `hosts` new names under `*.storm.test` through `target`'s proxy, 16 at a
/// time on a thread of their own, while the load generator runs established keep-alive
/// requests to the provider through the same proxy; and the same requests without it.
fn storm(
    h: &Harness,
    target: &Target,
    process: &Target,
    ca: &Path,
    hosts: usize,
    rate: f64,
    quick: bool,
) -> Result<Storm, String> {
    let proxy = addr(process).ok_or("no proxy address")?;
    let pid = process.pid().ok_or("no process")?;
    let tls = Tls::trusting(ca, Some(proxy))?;
    let requests = if quick { 1_000 } else { 4_000 };
    let open = Mode::Open { rate };
    let quiet = h.measure(target, PATH, requests, 100, 16, open)?;
    let before = procs::tree_cpu(pid).ok_or("no CPU reading")?;
    let started = Instant::now();
    let storm = std::thread::spawn(move || handshakes(&tls, hosts));
    let during = h.measure(target, PATH, requests, 0, 16, open)?;
    let ok = storm.join().map_err(|_| "the storm panicked")??;
    let wall = started.elapsed();
    let after = procs::tree_cpu(pid).ok_or("no CPU reading")?;
    let cpu = (after.0 + after.1).saturating_sub(before.0 + before.1);
    // The established requests' share of that CPU is what the quiet run cost per request.
    let pct = |r: &crate::loadgen::RunResult| {
        (
            stats::value_us(&r.hist, 50.0),
            stats::value_us(&r.hist, 99.0),
        )
    };
    Ok(Storm {
        hosts,
        handshakes_ok: ok,
        wall,
        cpu_per_host_us: cpu.as_secs_f64() * 1e6 / hosts.max(1) as f64,
        leaves: process
            .metrics()
            .and_then(|m| crate::harness::counter(&m, "tollgate_intercept_leaf_certificates_total"))
            .unwrap_or(0),
        quiet: pct(&quiet),
        during: pct(&during),
    })
}

/// `n` TLS handshakes with new names through the proxy, 16 at a time: how many completed.
fn handshakes(tls: &Arc<Tls>, n: usize) -> Result<usize, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (tls, next) = (tls.clone(), next.clone());
            set.spawn(async move {
                let mut ok = 0;
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return ok;
                    }
                    let host = format!("h{i}.storm.test");
                    if crate::loadgen::tls_handshake(&tls, &host, 443)
                        .await
                        .is_ok()
                    {
                        ok += 1;
                    }
                }
            });
        }
        let mut ok = 0;
        while let Some(r) = set.join_next().await {
            ok += r.unwrap_or(0);
        }
        Ok(ok)
    })
}
