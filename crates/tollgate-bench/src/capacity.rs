//! `tollgate bench capacity`: requests per second on the provider's 110-byte `/static`
//! body, closed loop, at several concurrencies and tollgate core counts, with direct and
//! peers measured in the same run (interleaved rounds, medians). With `--placement
//! dedicated` the proxy, the provider and the load generator each run on cores of their
//! own, for multi-core figures; the report then compares tollgate with each peer at the
//! same core count and shows how each scales.

use crate::harness::{Harness, Layout, Placement, Target};
use crate::loadgen::Mode;
use crate::rounds::{in_rounds, summary};
use crate::{CommonArgs, charts, machine, report};
use std::fmt::Write as _;

#[derive(Debug, clap::Args)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Concurrencies (connections), comma separated.
    #[arg(long, default_value = "32,64,128,256", value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Proxy core counts (tollgate's `--threads`, the peers' workers), comma separated.
    /// Default: 1 up to the core count; with `--placement dedicated`, the powers of two up
    /// to half the cores (1,2,4,8 on 16 cores).
    #[arg(long, value_delimiter = ',')]
    pub cores: Vec<usize>,
    /// Requests per measurement (default 50000; --quick 10000).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Also measure tollgate answering from its cache (`cache-hit`: no provider call) and with every request through a policy (`with-remedy`).
    #[arg(long)]
    pub remedies: bool,
    /// Also measure tollgate with every call captured to HAR files and discovery on (`with-diagnosis`).
    #[arg(long)]
    pub diagnosis: bool,
    /// Also measure tollgate with its dashboard's live view open and streaming every call (`dashboard-open`: a reader of `/ui/api/live`, as a browser keeps it).
    #[arg(long)]
    pub dashboard: bool,
    /// Also measure a second tollgate with the passthrough's config (`tollgate-twin`): the noise floor between two processes of the same build, for comparing scenarios that each run in a process of their own.
    #[arg(long)]
    pub twin: bool,
    /// Also sample where each tollgate target's CPU goes (`perf record` on the CPU clock),
    /// in one extra pass per point that is not measured: `profile-TARGET-Ncores-cCONC.txt`
    /// beside the results, and in the summary the functions whose share grew most from the
    /// fewest cores to the most.
    #[arg(long)]
    pub profile: bool,
}

struct Point {
    target: String,
    cores: usize,
    concurrency: usize,
    requests: u64,
    rps: f64,
    /// The lowest and highest round.
    rps_range: (f64, f64),
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    /// Share of its core the load generator used (near 1: the client may be the limit).
    loadgen_cpu: f64,
    /// The target process's CPU per request, user and kernel, in µs (targets the bench
    /// started; not direct).
    cpu_us: Option<(f64, f64)>,
    /// Its cycles and instructions per request, where the machine counts them.
    counters: Option<(f64, f64)>,
    /// tollgate's observer thread's share of one core.
    observer: Option<f64>,
    /// The target's wake-ups per request.
    wakeups: Option<f64>,
}

pub fn run(args: CapacityArgs) -> Result<(), String> {
    let c = &args.common;
    let requests = args
        .requests
        .unwrap_or(if c.quick { 10_000 } else { 50_000 });
    let n = machine::cores();
    let dedicated = c.layout(Layout::Shared) == Layout::Dedicated;
    let core_list: Vec<usize> = match (args.cores.is_empty(), dedicated) {
        (false, _) => args.cores.iter().map(|&k| k.max(1)).collect(),
        (true, false) => (1..=n).collect(),
        (true, true) => std::iter::successors(Some(1usize), |k| Some(k * 2))
            .take_while(|&k| k == 1 || k <= n / 2)
            .collect(),
    };
    // Planned before anything starts: a machine too small is refused, not measured.
    let placement = if dedicated {
        Placement::dedicated(core_list.iter().copied().max().unwrap_or(1), n)?
    } else {
        c.placement(Layout::Shared)?
    };
    let load_before = machine::loadavg();
    let mut caveats: Vec<String> = machine::busy(&load_before).into_iter().collect();
    for c in &caveats {
        eprintln!("warning: {c}");
    }
    let mut points: Vec<Point> = Vec::new();
    let mut profiles: Vec<Profile> = Vec::new();
    let mut placement_lines = Vec::new();
    let rounds = c.rounds.max(1);
    for &cores in &core_list {
        if let Some(shared) = placement.shared_cores(cores) {
            eprintln!("warning: {shared}");
            caveats.push(shared);
        }
        let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, placement.clone())?;
        let cfg = h.passthrough_config()?;
        let mut targets: Vec<Target> = vec![h.direct(), h.tollgate("tollgate", &cfg, cores)?];
        if args.remedies {
            let hit = h.cache_hit_config()?;
            targets.push(h.tollgate("cache-hit", &hit, cores)?);
            let remedy = h.with_remedy_config()?;
            targets.push(h.tollgate("with-remedy", &remedy, cores)?);
        }
        if args.diagnosis {
            let d = h.with_diagnosis_config()?;
            targets.push(h.tollgate("with-diagnosis", &d, cores)?);
        }
        if args.twin {
            targets.push(h.tollgate("tollgate-twin", &cfg, cores)?);
        }
        let mut views = Vec::new();
        if args.dashboard {
            let t = h.tollgate("dashboard-open", &cfg, cores)?;
            let admin = t.admin.ok_or("dashboard-open: no admin address")?;
            views.push((crate::live_view::LiveView::open(admin)?, targets.len()));
            targets.push(t);
        }
        for p in c.peers()? {
            if let Ok(t) = h.peer(p, cores) {
                targets.push(t);
            }
        }
        for l in &h.lines {
            eprintln!("{l}");
        }
        placement_lines.extend(h.lines.iter().cloned());
        for &conc in &args.concurrency {
            let warmup = c.warmup.unwrap_or(2000);
            let samples = in_rounds(&h, &targets, "/static", requests, warmup, conc, rounds)?;
            for (t, s) in targets.iter().zip(samples) {
                let m = summary(&s);
                let p = Point {
                    target: t.name.clone(),
                    cores,
                    concurrency: conc,
                    requests,
                    rps: m.rps,
                    rps_range: m.rps_range,
                    p50_ms: m.p50_ms,
                    p99_ms: m.p99_ms,
                    errors: m.errors,
                    loadgen_cpu: m.loadgen_cpu,
                    cpu_us: m.cpu_us,
                    counters: m.counters,
                    observer: m.observer,
                    wakeups: m.wakeups,
                };
                eprintln!(
                    "cores {cores} c {conc:>3} {:<9} {:>9.0} req/s p50 {:.3} ms p99 {:.3} ms",
                    p.target, p.rps, p.p50_ms, p.p99_ms
                );
                points.push(p);
            }
        }
        if args.profile {
            for &conc in &args.concurrency {
                let rps = |n: &str| {
                    points
                        .iter()
                        .find(|p| p.target == n && p.cores == cores && p.concurrency == conc)
                        .map_or(0.0, |p| p.rps)
                };
                profiles.extend(profile_point(&h, &targets, &c.out, (cores, conc), rps)?);
            }
        }
        for (view, i) in &views {
            let dropped = targets[*i]
                .metrics()
                .and_then(|m| crate::harness::counter(&m, "tollgate_ui_live_dropped_total"))
                .unwrap_or(0);
            placement_lines.push(format!(
                "{cores} core(s): dashboard-open: its live view received {} calls, skipped {dropped} (tollgate_ui_live_dropped_total)",
                view.calls()
            ));
        }
        placement_lines.extend(
            crate::latency::har_drop_lines(&targets)
                .into_iter()
                .map(|l| format!("{cores} core(s): {l}")),
        );
    }
    let load_after = machine::loadavg();

    let direct_rps = |cores: usize, conc: usize| {
        points
            .iter()
            .find(|p| p.target == "direct" && p.cores == cores && p.concurrency == conc)
            .map(|p| p.rps)
            .unwrap_or(f64::NAN)
    };
    let mut csv = String::from(
        "concurrency,cores,target,requests,requests_per_second,p50_ms,p99_ms,ratio_to_direct,errors,loadgen_cpu,user_us_per_request,kernel_us_per_request,observer_core_share,wakeups_per_request\n",
    );
    let mut md = String::from(
        "| Concurrency | Cores | Target | Requests | Requests/s | p50 ms | p99 ms | × direct | load-gen CPU | CPU µs/request (user + kernel) |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in &points {
        let ratio = p.rps / direct_rps(p.cores, p.concurrency);
        let (cpu_csv, cpu_md) = match p.cpu_us {
            Some((u, k)) => (
                format!("{u:.1},{k:.1}"),
                format!("{:.1} ({u:.1} + {k:.1})", u + k),
            ),
            None => (",".to_string(), "–".to_string()),
        };
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.0},{:.3},{:.3},{:.3},{},{:.2},{cpu_csv},{},{}",
            p.concurrency,
            p.cores,
            p.target,
            p.requests,
            p.rps,
            p.p50_ms,
            p.p99_ms,
            ratio,
            p.errors,
            p.loadgen_cpu,
            p.observer.map_or(String::new(), |o| format!("{o:.3}")),
            p.wakeups.map_or(String::new(), |w| format!("{w:.4}"))
        );
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {:.3} | {:.3} | {:.2} | {:.0}% | {cpu_md} |",
            p.concurrency,
            p.cores,
            p.target,
            p.requests,
            p.rps,
            p.p50_ms,
            p.p99_ms,
            ratio,
            p.loadgen_cpu * 100.0
        );
    }
    // tollgate against each peer, per cores and concurrency.
    let mut vs = String::new();
    for &cores in &core_list {
        for &conc in &args.concurrency {
            let get = |n: &str| {
                points
                    .iter()
                    .find(|p| p.target == n && p.cores == cores && p.concurrency == conc)
                    .map(|p| p.rps)
            };
            if let Some(t) = get("tollgate") {
                for peer in ["nginx", "haproxy", "hyper"] {
                    if let Some(v) = get(peer) {
                        let _ = writeln!(
                            vs,
                            "- {cores} core(s), concurrency {conc}: tollgate {:.2}× {peer}",
                            t / v
                        );
                    }
                }
            }
        }
    }
    let peers_md = peer_table(&points, &core_list, &args.concurrency);
    let scaling = scaling_lines(&points, &core_list, &args.concurrency)
        + &remedy_lines(&points, &core_list, &args.concurrency)
        + &contention_lines(&points, &core_list, &args.concurrency)
        + &observer_lines(&points, &core_list, &args.concurrency)
        + &profile_lines(args.profile, &profiles, &core_list, &args.concurrency);
    report::write(&c.out, "capacity.csv", &csv)?;
    let mut files = Vec::new();
    if core_list.len() > 1 {
        files.extend(charts::soft(charts::capacity_chart(
            &c.out,
            "capacity-scaling",
            "Requests/s on /static by proxy cores",
            charts::XAxis::Cores,
            &scaling_series(&points, &args.concurrency),
        )));
    }
    for &cores in &core_list {
        let mut series = Vec::new();
        for name in [
            "direct",
            "tollgate",
            "nginx",
            "haproxy",
            "haproxy-tcp",
            "hyper",
        ] {
            let pts: Vec<_> = points
                .iter()
                .filter(|p| p.target == name && p.cores == cores)
                .map(|p| (p.concurrency as f64, p.rps, p.rps_range.0, p.rps_range.1))
                .collect();
            if !pts.is_empty() {
                series.push(charts::Series::new(name, pts));
            }
        }
        files.extend(charts::soft(charts::capacity_chart(
            &c.out,
            &format!("capacity-{cores}core"),
            &format!("Requests/s on /static, tollgate on {cores} thread(s)"),
            charts::XAxis::Concurrency,
            &series,
        )));
    }
    let caveats: String = caveats.iter().map(|c| format!("- caveat: {c}\n")).collect();
    let summary = format!(
        "# tollgate bench capacity\n\n{} · {} ({n} cores) · placement {} · closed loop on the 110-byte `/static`, {requests} requests per point, median of {rounds} interleaved round(s)\n\n{caveats}{md}\n{peers_md}{vs}\n{scaling}\n{}\n- load average before {load_before}, after {load_after}\n",
        machine::now(),
        machine::cpu_model(),
        placement.layout.name(),
        placement_lines
            .iter()
            .map(|l| format!("- {l}\n"))
            .collect::<String>()
    );
    report::write(&c.out, "capacity.md", &md)?;
    report::write(&c.out, "summary.md", &summary)?;
    let meta = machine::metadata("capacity", &std::env::args().collect::<Vec<_>>());
    report::write_metadata(
        &c.out,
        meta,
        &placement_lines,
        (&load_before, &load_after),
        &files,
    )?;
    println!("{summary}");
    Ok(())
}

/// Targets other than direct, in report order: tollgate's scenarios, then the peers.
fn proxies(points: &[Point]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in points {
        if p.target != "direct" && !names.contains(&p.target) {
            names.push(p.target.clone());
        }
    }
    names
}

fn point<'a>(points: &'a [Point], target: &str, cores: usize, conc: usize) -> Option<&'a Point> {
    points
        .iter()
        .find(|p| p.target == target && p.cores == cores && p.concurrency == conc)
}

fn rps_of(points: &[Point], target: &str, cores: usize, conc: usize) -> Option<f64> {
    point(points, target, cores, conc).map(|p| p.rps)
}

/// tollgate against each peer at the same core count and concurrency: requests/s of
/// every proxy, and tollgate's ratio to each peer. Empty when no peer was measured.
fn peer_table(points: &[Point], core_list: &[usize], concurrency: &[usize]) -> String {
    let names = proxies(points);
    let peers: Vec<&String> = names
        .iter()
        .filter(|n| crate::peers::Peer::parse(n).is_ok())
        .collect();
    if peers.is_empty() {
        return String::new();
    }
    let mut md = String::from("| Cores | Concurrency |");
    for n in &names {
        let _ = write!(md, " {n} |");
    }
    for p in &peers {
        let _ = write!(md, " tollgate ÷ {p} |");
    }
    md.push_str("\n|---:|---:|");
    md.push_str(&"---:|".repeat(names.len() + peers.len()));
    md.push('\n');
    for &cores in core_list {
        for &conc in concurrency {
            let _ = write!(md, "| {cores} | {conc} |");
            for n in &names {
                match rps_of(points, n, cores, conc) {
                    Some(v) => {
                        let _ = write!(md, " {v:.0} |");
                    }
                    None => md.push_str(" – |"),
                }
            }
            let t = rps_of(points, "tollgate", cores, conc);
            for p in &peers {
                match (t, rps_of(points, p, cores, conc)) {
                    (Some(t), Some(v)) if v > 0.0 => {
                        let _ = write!(md, " {:.2} |", t / v);
                    }
                    _ => md.push_str(" – |"),
                }
            }
            md.push('\n');
        }
    }
    md.push('\n');
    md
}

/// How each proxy scales: its requests/s at each core count over its own at the fewest.
fn scaling_lines(points: &[Point], core_list: &[usize], concurrency: &[usize]) -> String {
    let mut out = String::new();
    let Some(&base) = core_list.iter().min() else {
        return out;
    };
    if core_list.len() < 2 {
        return out;
    }
    for n in proxies(points) {
        for &conc in concurrency {
            let Some(b) = rps_of(points, &n, base, conc) else {
                continue;
            };
            let steps: Vec<String> = core_list
                .iter()
                .filter(|&&k| k != base)
                .filter_map(|&k| {
                    rps_of(points, &n, k, conc).map(|v| format!("{k} cores {:.2}×", v / b))
                })
                .collect();
            let tail = format!(" (of its {base}-core requests/s)");
            steps_line(
                &mut out,
                &format!("scaling, {n} at concurrency {conc}"),
                &steps,
                &tail,
            );
            // Work per request stays flat when nothing the cores share grows with them.
            let at = |k: usize| point(points, &n, k, conc);
            growth_line(
                &mut out,
                &format!("CPU µs/request, {n} at concurrency {conc}"),
                (core_list, base),
                |k| at(k)?.cpu_us.map(|(u, k)| u + k),
                (1, true),
            );
            // The fixed cost of a wake-up, spread over fewer requests as each core's share
            // of the connections shrinks: the part of that growth that is not contention.
            growth_line(
                &mut out,
                &format!("wake-ups per request, {n} at concurrency {conc}"),
                (core_list, base),
                |k| at(k)?.wakeups,
                // From a core that never sleeps (0.002) a change in percent says nothing.
                (3, false),
            );
        }
    }
    out
}

/// `- head: 22.1 at 1 core(s), 23.0 at 2 (+4 %), …`: a figure at each core count with
/// `digits` decimals, and when `relative` its change from the fewest cores; nothing when
/// the fewest cores have no figure or no other count has one.
fn growth_line(
    out: &mut String,
    head: &str,
    (core_list, base): (&[usize], usize),
    figure: impl Fn(usize) -> Option<f64>,
    (digits, relative): (usize, bool),
) {
    let Some(first) = figure(base) else {
        return;
    };
    let steps: Vec<String> = core_list
        .iter()
        .filter(|&&k| k != base)
        .filter_map(|&k| {
            figure(k).map(|v| match relative {
                true => format!("{v:.digits$} at {k} ({:+.0} %)", (v / first - 1.0) * 100.0),
                false => format!("{v:.digits$} at {k}"),
            })
        })
        .collect();
    if !steps.is_empty() {
        let first = format!("{first:.digits$} at {base} core(s)");
        steps_line(out, head, &[[first].as_slice(), &steps].concat(), "");
    }
}

/// Per proxy and concurrency, cycles and instructions per request from the fewest cores
/// to the most: cycles that grow while the instructions stay flat are stalls on what the
/// cores share. Where the machine has no counters, the one line saying so.
fn contention_lines(points: &[Point], core_list: &[usize], concurrency: &[usize]) -> String {
    let (Some(&base), Some(&top)) = (core_list.iter().min(), core_list.iter().max()) else {
        return String::new();
    };
    if base == top {
        return String::new();
    }
    if let Err(why) = crate::counters::available() {
        return format!(
            "- contention: not measured: {why}; CPU µs per request by core count is the measure\n"
        );
    }
    let mut out = String::new();
    for n in proxies(points) {
        for &conc in concurrency {
            let at = |k: usize| point(points, &n, k, conc)?.counters;
            let (Some((c0, i0)), Some((c1, i1))) = (at(base), at(top)) else {
                continue;
            };
            let (dc, di) = ((c1 / c0 - 1.0) * 100.0, (i1 / i0 - 1.0) * 100.0);
            let verdict = if dc > di + 5.0 {
                "the cycles grew more than the work: stalls on what the cores share"
            } else {
                "no contention beyond 5 %"
            };
            let _ = writeln!(
                out,
                "- contention, {n} at concurrency {conc}: cycles/request {c0:.0} at {base} core(s), {c1:.0} at {top} ({dc:+.0} %); instructions/request {i0:.0} → {i1:.0} ({di:+.0} %): {verdict}"
            );
        }
    }
    out
}

/// Per tollgate scenario and concurrency, the share of a core its one observer thread used
/// at each core count: the workers grow with the cores, the observer does not, so a share
/// near 1 says it is what limits the gateway.
fn observer_lines(points: &[Point], core_list: &[usize], concurrency: &[usize]) -> String {
    let mut out = String::new();
    for n in proxies(points) {
        for &conc in concurrency {
            let steps: Vec<String> = core_list
                .iter()
                .filter_map(|&k| {
                    let share = point(points, &n, k, conc)?.observer?;
                    Some(format!("{share:.2} at {k} core(s)"))
                })
                .collect();
            steps_line(
                &mut out,
                &format!("observer thread, {n} at concurrency {conc}"),
                &steps,
                " of one core",
            );
        }
    }
    out
}

/// A target's profile at one point: its name, cores, concurrency and function shares.
type Profile = ((String, usize, usize), Vec<(f64, String)>);

/// How long a profile samples: a few thousand samples per core at 999 Hz.
const PROFILE_SECONDS: f64 = 2.0;

/// One pass of about [`PROFILE_SECONDS`] (from `rps`, the target's measured requests/s
/// there) per tollgate target (those the bench started with an admin listener) under
/// `perf record`, not measured: each one's report written beside the results, and its
/// shares.
fn profile_point(
    h: &Harness,
    targets: &[Target],
    out: &std::path::Path,
    (cores, conc): (usize, usize),
    rps: impl Fn(&str) -> f64,
) -> Result<Vec<Profile>, String> {
    let mut profiles = Vec::new();
    for t in targets.iter().filter(|t| t.admin.is_some()) {
        let (Some(pid), true) = (t.pid(), crate::profile::available().is_ok()) else {
            continue;
        };
        let name = format!("profile-{}-{cores}cores-c{conc}", t.name);
        let Some(rec) = crate::profile::start(pid, &out.join(format!("{name}.data"))) else {
            continue;
        };
        let n = ((rps(&t.name) * PROFILE_SECONDS) as u64).max(1000);
        h.measure(t, "/static", n, 0, conc, Mode::Closed)?;
        if let Some((shares, text)) = rec.finish() {
            report::write(out, &format!("{name}.txt"), &text)?;
            profiles.push(((t.name.clone(), cores, conc), shares));
        }
    }
    Ok(profiles)
}

/// Per profiled target and concurrency, the functions whose share of the CPU grew most
/// from the fewest cores to the most (on one core count, the largest shares); where no
/// profile could be taken, why.
fn profile_lines(
    asked: bool,
    profiles: &[Profile],
    core_list: &[usize],
    concurrency: &[usize],
) -> String {
    if !asked {
        return String::new();
    }
    if let Err(why) = crate::profile::available() {
        return format!("- profile: not taken: {why}\n");
    }
    let (Some(&base), Some(&top)) = (core_list.iter().min(), core_list.iter().max()) else {
        return String::new();
    };
    let of = |n: &str, k: usize, conc: usize| {
        profiles
            .iter()
            .find(|((t, c, cc), _)| t == n && *c == k && *cc == conc)
            .map(|(_, s)| s.as_slice())
    };
    let mut names: Vec<&str> = Vec::new();
    for ((n, ..), _) in profiles {
        if !names.contains(&n.as_str()) {
            names.push(n);
        }
    }
    let mut out = String::new();
    for n in names {
        for &conc in concurrency {
            let (Some(b), Some(t)) = (of(n, base, conc), of(n, top, conc)) else {
                continue;
            };
            if base == top {
                let most: Vec<String> = t
                    .iter()
                    .take(6)
                    .map(|(p, sym)| format!("`{sym}` {p:.1} %"))
                    .collect();
                let _ = writeln!(
                    out,
                    "- profile, {n} at concurrency {conc}, {top} core(s): {}",
                    most.join(", ")
                );
                continue;
            }
            let grew = crate::profile::grown(b, t, 6);
            let what = match grew.is_empty() {
                true => "no function's share grew by 0.5 points or more".to_owned(),
                false => grew.join(", "),
            };
            let _ = writeln!(
                out,
                "- profile, {n} at concurrency {conc}, {base} → {top} core(s): {what}"
            );
        }
    }
    out
}

/// `- head: step, step, …tail`, when there are steps.
fn steps_line(out: &mut String, head: &str, steps: &[String], tail: &str) {
    if !steps.is_empty() {
        let _ = writeln!(out, "- {head}: {}{tail}", steps.join(", "));
    }
}

/// tollgate's remedy scenarios against its passthrough, at each point: what a matched
/// policy costs in requests/s, and what a cache hit saves.
fn remedy_lines(points: &[Point], core_list: &[usize], concurrency: &[usize]) -> String {
    let mut out = String::new();
    for scenario in ["with-remedy", "cache-hit", "with-diagnosis"] {
        for &conc in concurrency {
            let steps: Vec<String> = core_list
                .iter()
                .filter_map(|&k| {
                    let s = rps_of(points, scenario, k, conc)?;
                    let t = rps_of(points, "tollgate", k, conc)?;
                    Some(format!("{:.2}× at {k} core(s)", s / t))
                })
                .collect();
            steps_line(
                &mut out,
                &format!("{scenario} ÷ passthrough (tollgate) at concurrency {conc}"),
                &steps,
                "",
            );
        }
    }
    out
}

/// One line per proxy and concurrency: requests/s by core count; and, dashed, tollgate's
/// ideal scaling (its fewest cores' requests/s per core, times the cores).
fn scaling_series(points: &[Point], concurrency: &[usize]) -> Vec<charts::Series> {
    let mut series = Vec::new();
    let mut ideal = Vec::new();
    for n in proxies(points) {
        for &conc in concurrency {
            let mut pts: Vec<_> = points
                .iter()
                .filter(|p| p.target == n && p.concurrency == conc)
                .map(|p| (p.cores as f64, p.rps, p.rps_range.0, p.rps_range.1))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let (true, Some(&(k0, r0, _, _))) = (n == "tollgate", pts.first()) {
                let line = pts.iter().map(|p| (p.0, r0 * p.0 / k0, 0.0, 0.0)).collect();
                ideal.push(charts::Series {
                    name: format!("ideal, {n} c={conc}"),
                    points: line,
                    dashed: true,
                });
            }
            if !pts.is_empty() {
                series.push(charts::Series::new(format!("{n} c={conc}"), pts));
            }
        }
    }
    series.extend(ideal);
    series
}
