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
    #[command(flatten)]
    pub mix: crate::MixArgs,
    /// Open-loop arrival rate of mitmproxy's footprint, measured in a run of its own beside
    /// the provider straight (requests/s): well under what it sustains, so its latency is
    /// not a queue's, and its CPU does not crowd the other targets' run.
    #[arg(long, default_value_t = 50.0)]
    pub mitmproxy_rate: f64,
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
    let requests = args.mix.requests(quick);
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
    // The process target lives as long as its view: dropping it stops mitmdump.
    let mut mitm_proc = None;
    let mut mitm_skipped = None;
    let mitm = match mitmproxy(&mut h, args.mitmdump.clone(), &provider_ca, c.threads) {
        Ok((proc, at, mitm_ca)) => {
            let view = https_target(&proc, "mitmproxy", &origin, &mitm_ca, Some(at))?;
            mitm_proc = Some(proc);
            Some(view)
        }
        Err(why) => {
            let line = format!("mitmproxy: skipped ({why})");
            eprintln!("{line}");
            h.lines.push(line.clone());
            mitm_skipped = Some(line);
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

    // 1. Footprint: open loop, tollgate's targets in the same run, request by request;
    // mitmproxy in a slower run of its own beside the provider straight.
    let per_round = (requests / rounds as u64).max(1);
    let connections = 32;
    let footprint = |targets: &[&Target], per_round: u64, rate: f64| {
        let mut series: Vec<Series> = targets.iter().map(|t| Series::new(&t.name)).collect();
        for round in 0..rounds {
            let w = if round == 0 { warmup } else { 0 };
            let mode = Mode::Open { rate };
            for m in h.round(
                targets,
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
        Ok::<_, String>((series, rows))
    };
    let (series, rows) = footprint(&all[..3], per_round, args.mix.rate)?;
    let mitm_footprint = match &mitm {
        Some(m) => {
            let n = (per_round / 10).max(100);
            Some(footprint(&[&direct, m], n, args.mitmproxy_rate)?.1)
        }
        None => None,
    };
    let mut csv_rows = rows.clone();
    // mitmproxy's rows (their Δ is against the provider straight in its own run).
    csv_rows.extend(
        mitm_footprint
            .iter()
            .flatten()
            .filter(|r| r.scenario == "mitmproxy")
            .cloned(),
    );
    report::write(
        &c.out,
        "percentiles.csv",
        &report::percentiles_csv(&csv_rows),
    )?;
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let p50 = |name: &str| stats::p50_of(&series, name);
    let over_tunnel = p50("intercepted") - p50("tunnel");

    // 2. Capacity: closed loop, one target at a time, rounds A B A B.
    let capacity_targets: Vec<&Target> = all[1..].to_vec();
    let load = crate::rounds::Load {
        path: PATH,
        per_round,
        warmup,
        rounds,
    };
    let measured = crate::rounds::capacity(&h, &capacity_targets, &load, args.mix.concurrency)?;
    // Indexed as `all`: direct, the baseline, is not measured for capacity.
    let rps: Vec<f64> = std::iter::once(0.0)
        .chain(measured.iter().map(|m| m.rps))
        .collect();

    // 3. A new connection each request (the leaf cached): the proxy's CPU per connection.
    let mut per_conn = Vec::new();
    for t in &capacity_targets {
        let mut closing = t.view(&t.name, "");
        closing.tls = t.tls.clone();
        closing.headers.push(("connection".into(), "close".into()));
        let pid = t.pid().ok_or("no process")?;
        let before = procs::tree_sched(pid).ok_or("no CPU reading")?;
        let r = h.measure(&closing, PATH, handshakes, 0, 8, Mode::Closed)?;
        let after = procs::tree_sched(pid).ok_or("no CPU reading")?;
        let cpu = after.since(&before).run;
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
        &ca,
        storm_hosts,
        args.mix.rate,
        c.threads,
        // Established requests beside the new hosts: a round's worth, at most 4 000.
        per_round.min(4_000),
    )?;
    let load_after = machine::loadavg();
    eprintln!("load average after: {load_after}");

    let mut md = String::new();
    md += &format!(
        "# tollgate bench https\n\n{}, {} cores, one proxy thread each. Footprint: open loop at {} requests/s per target over {connections} connections, targets interleaved request by request, median of {rounds} rounds. Capacity: closed loop, {} keep-alive connections, rounds A B A B.\n\n",
        machine::cpu_model(),
        machine::cores(),
        args.mix.rate,
        args.mix.concurrency
    );
    md += &report::summary_table(&rows, &names);
    if let Some(m) = &mitm_footprint {
        md += &format!(
            "\nmitmproxy, in a run of its own beside the provider straight at {} requests/s (it sustains about {:.0} on this core):\n\n",
            args.mitmproxy_rate,
            rps.last().copied().unwrap_or(0.0)
        );
        md += &report::summary_table(m, &["direct-tls".into(), "mitmproxy".into()]);
    }
    md += &format!(
        "\nintercepted − tunnel at p50: **{over_tunnel:+.0} µs** (target ≤ +150 µs)\n\n| target | requests/s (median) | CPU per request | failed |\n|---|---:|---:|---:|\n"
    );
    for (t, m) in capacity_targets.iter().zip(&measured) {
        md += &format!(
            "| {} | {:.0} | {} | {} |\n",
            t.name,
            m.rps,
            crate::rounds::cpu_text(m.cpu_us),
            m.errors
        );
    }
    let ratio = |a: &str, b: &str| {
        let at = |n: &str| all.iter().position(|t| t.name == n).map(|i| rps[i]);
        at(a).zip(at(b)).map(|(a, b)| a / b.max(1e-9))
    };
    if let Some(r) = ratio("intercepted", "mitmproxy") {
        md += &format!("\nintercepted ÷ mitmproxy: **{r:.1}×** (target ≥ 10×)\n");
    }
    if let Some(line) = &mitm_skipped {
        md += &format!("\n{line}\n");
    }
    md += "\n| new connection (CONNECT, TLS, one request; the leaf cached) | proxy CPU per connection (target ≤ 1 ms) | p50 |\n|---|---:|---:|\n";
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
    meta["capacity"] = crate::rounds::capacity_json(&capacity_targets, &measured);
    meta["new_connection_cpu_us"] = json!(
        per_conn
            .iter()
            .map(|(n, us, _)| (n.clone(), json!(us)))
            .collect::<serde_json::Map<_, _>>()
    );
    meta["storm"] = storm.json();
    let written = report::write_metadata(
        &c.out,
        meta,
        &h.lines,
        (&load_before, &load_after),
        &report::footprint_files(),
    );
    drop(mitm_proc);
    written
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
    // Checked here: started under `taskset`, a missing binary would only show as a port
    // that never opens.
    if !bin.is_file() {
        return Err(format!("--mitmdump {}: no such file", bin.display()));
    }
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
    /// New hosts per second of the paced storm that ran beside established traffic.
    paced_rate: f64,
    paced_ok: usize,
    /// The burst: as fast as 16 clients go, nothing else running.
    burst_ok: usize,
    burst_wall: Duration,
    /// tollgate's CPU per new host in the burst (a leaf made, and its handshake).
    cpu_per_host_us: f64,
    /// One leaf (key pair and signature) made in this process, µs: the part of a new
    /// host's cost that runs on the blocking pool.
    leaf_us: f64,
    leaves: u64,
    /// Established traffic's (p50, p99) in µs, without and during the paced storm.
    quiet: (f64, f64),
    during: (f64, f64),
    /// The core the paced storm's clients ran on, when one was free.
    spare: Option<usize>,
}

impl Storm {
    fn markdown(&self) -> String {
        let clients = match self.spare {
            Some(core) => {
                format!("The new hosts' clients ran on core {core}, apart from what was measured.\n")
            }
            None => "The new hosts' clients had no core of their own: they shared this machine's cores with the proxy, the provider and the load generator, so part of the established requests' p99 during them is the clients' CPU.\n".to_owned(),
        };
        format!(
            "\nNew hosts (each a leaf to make): a burst of {} (16 clients at once, {} handshakes completed) took {:.2} s, **{:.0} new hosts/s**; tollgate CPU per new host (leaf and handshake) **{:.0} µs**, of which the leaf (key pair and signature, on the blocking pool) {:.0} µs; {} leaves made in all. Established keep-alive requests while {} other new hosts arrived at {:.0}/s ({} completed): p50 {:.0} µs / p99 {:.0} µs (without them: {:.0} / {:.0}).\n",
            self.hosts,
            self.burst_ok,
            self.burst_wall.as_secs_f64(),
            self.burst_ok as f64 / self.burst_wall.as_secs_f64().max(1e-9),
            self.cpu_per_host_us,
            self.leaf_us,
            self.leaves,
            self.hosts,
            self.paced_rate,
            self.paced_ok,
            self.during.0,
            self.during.1,
            self.quiet.0,
            self.quiet.1
        ) + &clients
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "hosts": self.hosts,
            "burst": {"handshakes_ok": self.burst_ok, "wall_s": self.burst_wall.as_secs_f64(),
                      "cpu_per_host_us": self.cpu_per_host_us},
            "leaf_us": self.leaf_us, "leaves_made": self.leaves,
            "paced": {"hosts_per_second": self.paced_rate, "handshakes_ok": self.paced_ok, "client_core": self.spare},
            "established_p50_p99_us": {"quiet": [self.quiet.0, self.quiet.1], "during": [self.during.0, self.during.1]},
        })
    }
}

/// New hosts through `target`'s proxy (a view of the intercepting process): `hosts` names under `*.storm.test` paced over the
/// time established keep-alive requests run through the same proxy (their latency with
/// and without the new hosts), then a burst of as many other names with nothing else
/// running (the proxy's CPU per new host), and the cost of one leaf made here.
fn storm(
    h: &Harness,
    target: &Target,
    ca: &Path,
    hosts: usize,
    rate: f64,
    threads: usize,
    requests: u64,
) -> Result<Storm, String> {
    let proxy = target
        .tls
        .as_ref()
        .and_then(|t| t.proxy)
        .ok_or("no proxy address")?;
    let pid = target.pid().ok_or("no process")?;
    let tls = Tls::trusting(ca, Some(proxy))?;
    let open = Mode::Open { rate };
    let cpu_now = || {
        procs::tree_sched(pid)
            .map(|s| s.run)
            .ok_or("no CPU reading")
    };
    let quiet = h.measure(target, PATH, requests, 100, 16, open)?;
    // Spread over the established run's time, so the whole run sees new hosts.
    let window = Duration::from_secs_f64(requests as f64 / rate.max(1.0));
    let pace = window / hosts.max(1) as u32;
    let spare = spare_core(h, threads);
    let paced = {
        let tls = tls.clone();
        std::thread::spawn(move || {
            if let Some(core) = spare {
                core_affinity::set_for_current(core_affinity::CoreId { id: core });
            }
            handshakes(&tls, "p", hosts, Some(pace))
        })
    };
    let during = h.measure(target, PATH, requests, 0, 16, open)?;
    let (paced_ok, _) = paced.join().map_err(|_| "the storm panicked")??;
    let before = cpu_now()?;
    let (burst_ok, burst_wall) = handshakes(&tls, "b", hosts, None)?;
    let cpu = cpu_now()? - before;
    let pct = |r: &crate::loadgen::RunResult| {
        (
            stats::value_us(&r.hist, 50.0),
            stats::value_us(&r.hist, 99.0),
        )
    };
    Ok(Storm {
        hosts,
        paced_rate: 1.0 / pace.as_secs_f64().max(1e-9),
        paced_ok,
        spare,
        burst_ok,
        burst_wall,
        cpu_per_host_us: cpu.as_secs_f64() * 1e6 / hosts.max(1) as f64,
        leaf_us: leaf_cost(ca, hosts.clamp(20, 500))?,
        leaves: target
            .metrics()
            .and_then(|m| crate::harness::counter(&m, "tollgate_intercept_leaf_certificates_total"))
            .unwrap_or(0),
        quiet: pct(&quiet),
        during: pct(&during),
    })
}

/// A core that neither the proxy, the provider nor the load generator runs on (`shared`
/// placement on a machine with one to spare), for the storm's clients: elsewhere they
/// compete with what is measured, which the report says.
fn spare_core(h: &Harness, threads: usize) -> Option<usize> {
    let n = machine::cores();
    (h.placement.layout == Layout::Shared && threads.max(1) + 1 < n).then_some(threads.max(1))
}

/// The mean time to make one leaf with the CA whose certificate is `ca` (its key beside
/// it), on this thread: a key pair and a signature, as the gateway makes them.
fn leaf_cost(ca: &Path, n: usize) -> Result<f64, String> {
    let dir = ca.parent().ok_or("the CA has no folder")?;
    let ca = tollgate::intercept::ca::Ca::load_dir(dir).map_err(|e| e.to_string())?;
    let validity = Duration::from_secs(7 * 24 * 3600);
    let started = Instant::now();
    for i in 0..n {
        ca.leaf(&format!("l{i}.storm.test"), validity)
            .map_err(|e| e.to_string())?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64)
}

/// `n` TLS handshakes with new names (`{prefix}{i}.storm.test`) through the proxy, 16 at
/// a time, the i-th not before `i × pace` when paced: how many completed, and how long
/// they took.
fn handshakes(
    tls: &Arc<Tls>,
    prefix: &'static str,
    n: usize,
    pace: Option<Duration>,
) -> Result<(usize, Duration), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let started = tokio::time::Instant::now();
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
                    if let Some(pace) = pace {
                        tokio::time::sleep_until(started + pace * i as u32).await;
                    }
                    let host = format!("{prefix}{i}.storm.test");
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
        Ok((ok, started.elapsed()))
    })
}
