//! `tollgate bench aggregate`: KrakenD's published benchmark reproduced, tollgate against
//! a gateway built on KrakenD's own framework (Lura) in the same run. Both get the same
//! endpoints: `/foo`, a proxy endpoint (one backend), and `/social`, an aggregate endpoint
//! (three backends in parallel: one grouped, one reduced to its `data` object and grouped,
//! one grouped; a timeout and a cache TTL), as in KrakenD's configuration.
//!
//! - Capacity: closed loop, the backends answering at once: requests/s of each gateway on
//!   each endpoint, and its CPU per request (targets one after another per round, medians).
//! - Latency: open loop at a fixed rate, the three backends answering after their own
//!   delays (`/social-slow`): each gateway's percentiles against the slowest backend
//!   called directly, all measured at once, request by request.

use crate::harness::{Harness, Layout, Target};
use crate::loadgen::Mode;
use crate::lura::{self, Backend, Endpoint};
use crate::rounds::{in_rounds, summary};
use crate::stats::{self, Series};
use crate::{CommonArgs, charts, machine, report};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct AggregateArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Capacity concurrencies (connections, closed loop), comma separated.
    #[arg(long, default_value = "16,64", value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Requests per capacity measurement (default 30000; --quick 5000).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Response times of the three `/social-slow` backends (latency part), comma separated.
    #[arg(long, default_value = "1ms,2ms,3ms", value_delimiter = ',')]
    pub delays: Vec<String>,
    /// Arrival rate of the latency part, requests/s to each target (open loop).
    #[arg(long, default_value_t = 300.0)]
    pub rate: f64,
    /// Requests to each target in the latency part, split over the rounds (default 30000;
    /// --quick 6000).
    #[arg(long)]
    pub latency_requests: Option<u64>,
    /// The Lura gateway binary (default: built with `go build` from
    /// crates/tollgate-bench/lura, Go modules fetched the first time).
    #[arg(long)]
    pub lura_bin: Option<PathBuf>,
}

/// The latency target: tollgate's `/social` within this much of the slowest backend at p99.
const P99_BUDGET_US: f64 = 200.0;
/// The capacity target: tollgate's `/social` at least this many times Lura's requests/s.
const CAPACITY_TARGET: f64 = 3.0;

/// KrakenD's endpoints: `/foo` (one backend), `/social` (three), and `/social-slow`, the
/// same three backends answering after `delays`.
pub fn endpoints(delays: &[Duration; 3]) -> Vec<Endpoint> {
    let social = |path: &str, delays: [Option<Duration>; 3]| {
        let with = |url: &str, d: Option<Duration>| match d {
            Some(d) => format!("{url}?delay={}us", d.as_micros()),
            None => url.to_owned(),
        };
        Endpoint {
            path: path.into(),
            timeout: Some("1500ms"),
            cache_ttl: Some("3600s"),
            backends: vec![
                Backend {
                    url: with("/static", delays[0]),
                    group: Some("fb"),
                    target: None,
                },
                Backend {
                    url: with("/static/data", delays[1]),
                    group: Some("youtube"),
                    target: Some("data"),
                },
                Backend {
                    url: with("/static", delays[2]),
                    group: Some("twitter"),
                    target: None,
                },
            ],
        }
    };
    vec![
        Endpoint {
            path: "/foo".into(),
            timeout: None,
            cache_ttl: None,
            backends: vec![Backend {
                url: "/static".into(),
                group: None,
                target: None,
            }],
        },
        social("/social", [None; 3]),
        social("/social-slow", delays.map(Some)),
    ]
}

/// One capacity measurement's medians.
struct Point {
    /// The lowest and highest round's requests/s.
    rps_range: (f64, f64),
    concurrency: usize,
    target: String,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_us: Option<f64>,
    errors: u64,
}

pub fn run(args: AggregateArgs) -> Result<(), String> {
    let c = &args.common;
    if !c.peers.is_empty() {
        return Err("`tollgate bench aggregate` measures the Lura gateway; --peer is for latency and capacity".into());
    }
    let delays: Vec<Duration> = args
        .delays
        .iter()
        .map(|d| crate::latency::parse_delay(d))
        .collect::<Result<_, _>>()?;
    let delays: [Duration; 3] = delays.try_into().map_err(|_| {
        "--delays takes three response times, one per /social backend (1ms,2ms,3ms)".to_owned()
    })?;
    let requests = args
        .requests
        .unwrap_or(if c.quick { 5_000 } else { 30_000 });
    let latency_requests = args
        .latency_requests
        .unwrap_or(if c.quick { 6_000 } else { 30_000 });
    let rounds = c.rounds.max(2);
    let placement = c.placement(Layout::Shared)?;
    let threads = c.threads.max(1);
    let load_before = machine::loadavg();

    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, placement.clone())?;
    let eps = endpoints(&delays);
    report::write(&h.out, "aggregate.yaml", &lura::tollgate_config(&eps))?;
    let config = h.out.join("aggregate.yaml");
    let tollgate = h.tollgate("tollgate", &config, threads)?;
    let lura = lura::binary(args.lura_bin.as_deref(), &h.out).and_then(|bin| {
        let cores = placement.server_cores(threads);
        lura::start(&bin, &h.out, &eps, h.provider, cores.as_deref(), threads)
    });
    let lura = match lura {
        Ok((proc, addr)) => {
            h.lines.push(format!(
                "lura: {addr} ({}, GOMAXPROCS={threads})",
                proc.placement
            ));
            Some(Target::of_process("lura", proc, addr))
        }
        Err(why) => {
            let line = format!("lura: skipped: {why}");
            eprintln!("{line}");
            h.lines.push(line);
            None
        }
    };
    for l in &h.lines {
        eprintln!("{l}");
    }
    let direct = h.direct();
    let gateways: Vec<&Target> = std::iter::once(&tollgate).chain(lura.as_ref()).collect();

    // Capacity: every gateway on both endpoints, and direct on the backend path.
    let mut targets = vec![direct.view("direct /static", "/static")];
    for ep in ["/foo", "/social"] {
        for g in &gateways {
            targets.push(g.view(&format!("{} {ep}", g.name), ep));
        }
    }
    let mut points = Vec::new();
    for &conc in &args.concurrency {
        let warmup = c.warmup.unwrap_or(2000);
        let samples = in_rounds(&h, &targets, "", requests, warmup, conc, rounds)?;
        for (t, s) in targets.iter().zip(samples) {
            let m = summary(&s);
            let p = Point {
                concurrency: conc,
                target: t.name.clone(),
                rps: m.rps,
                rps_range: m.rps_range,
                p50_ms: m.p50_ms,
                p99_ms: m.p99_ms,
                cpu_us: m.cpu_us.map(|(u, k)| u + k),
                errors: m.errors,
            };
            eprintln!(
                "c {conc:>3} {:<16} {:>8.0} req/s p50 {:.3} ms p99 {:.3} ms",
                p.target, p.rps, p.p50_ms, p.p99_ms
            );
            points.push(p);
        }
    }

    // Latency: the slowest backend directly, and each gateway's /social-slow, at once.
    let slowest = (0..3).max_by_key(|&i| delays[i]).unwrap_or(2);
    let social_slow = &eps[2];
    let mut lat_targets = vec![direct.view("slowest backend", &social_slow.backends[slowest].url)];
    for g in &gateways {
        lat_targets.push(g.view(&format!("{} /social", g.name), "/social-slow"));
    }
    let mut series: Vec<Series> = lat_targets.iter().map(|t| Series::new(&t.name)).collect();
    let per_round = (latency_requests / rounds as u64).max(1);
    let refs: Vec<&Target> = lat_targets.iter().collect();
    for round in 0..rounds {
        let warmup = if round == 0 {
            c.warmup.unwrap_or(1000)
        } else {
            0
        };
        let results = h.measure_many(
            &refs,
            "",
            per_round,
            warmup,
            32,
            Mode::Open { rate: args.rate },
        )?;
        for (s, r) in series.iter_mut().zip(results) {
            s.add_round(r.hist);
        }
    }
    let load_after = machine::loadavg();
    write_report(
        &args,
        &h,
        &points,
        &series,
        &delays,
        slowest,
        (&load_before, &load_after),
    )
}

/// The CSVs, the chart, `summary.md` and `metadata.json`.
fn write_report(
    args: &AggregateArgs,
    h: &Harness,
    points: &[Point],
    series: &[Series],
    delays: &[Duration; 3],
    slowest: usize,
    load: (&str, &str),
) -> Result<(), String> {
    let c = &args.common;
    let rps = |conc: usize, name: &str| {
        points
            .iter()
            .find(|p| p.concurrency == conc && p.target == name)
    };
    let mut csv = String::from(
        "concurrency,target,requests_per_second,p50_ms,p99_ms,cpu_us_per_request,errors\n",
    );
    let mut md = String::from(
        "| Concurrency | Target | Requests/s | p50 ms | p99 ms | CPU µs/request | errors |\n|---:|---|---:|---:|---:|---:|---:|\n",
    );
    for p in points {
        let cpu = p.cpu_us.map(|v| format!("{v:.1}"));
        let _ = writeln!(
            csv,
            "{},{},{:.0},{:.3},{:.3},{},{}",
            p.concurrency,
            p.target,
            p.rps,
            p.p50_ms,
            p.p99_ms,
            cpu.clone().unwrap_or_default(),
            p.errors
        );
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.3} | {:.3} | {} | {} |",
            p.concurrency,
            p.target,
            p.rps,
            p.p50_ms,
            p.p99_ms,
            cpu.unwrap_or_else(|| "–".into()),
            p.errors
        );
    }
    let mut verdicts = String::new();
    for &conc in &args.concurrency {
        for ep in ["/foo", "/social"] {
            if let (Some(t), Some(l)) = (
                rps(conc, &format!("tollgate {ep}")),
                rps(conc, &format!("lura {ep}")),
            ) {
                let ratio = t.rps / l.rps.max(1e-9);
                let target = if ep == "/social" {
                    format!(
                        " (target ≥ {CAPACITY_TARGET}×: {})",
                        if ratio >= CAPACITY_TARGET {
                            "met"
                        } else {
                            "missed"
                        }
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    verdicts,
                    "- concurrency {conc}, {ep}: tollgate {:.0} req/s, Lura {:.0} req/s: **{ratio:.2}×**{target}",
                    t.rps, l.rps
                );
            }
        }
    }
    // Latency percentiles, and the difference to the slowest backend.
    const HEAD: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 100.0];
    let base = &series[0];
    let mut lat_md = String::from("| Target |");
    let mut lat_csv = String::from("target,percentile,latency_us,over_slowest_backend_us\n");
    for p in HEAD {
        let _ = write!(lat_md, " {} ms | over slowest µs |", stats::label(p));
    }
    lat_md.push_str("\n|---|");
    lat_md.push_str(&"---:|---:|".repeat(HEAD.len()));
    lat_md.push('\n');
    for s in series {
        let _ = write!(lat_md, "| {} |", s.name);
        for p in HEAD {
            let v = s.value_us(p);
            let over = v - base.value_us(p);
            let _ = write!(
                lat_md,
                " {:.3} | {} |",
                v / 1000.0,
                if std::ptr::eq(s, base) {
                    "–".into()
                } else {
                    format!("{over:+.0}")
                }
            );
            let _ = writeln!(lat_csv, "{},{},{v:.1},{over:.1}", s.name, stats::label(p));
        }
        lat_md.push('\n');
    }
    if let Some(t) = series.iter().find(|s| s.name == "tollgate /social") {
        let over = t.value_us(99.0) - base.value_us(99.0);
        let _ = writeln!(
            verdicts,
            "- latency, /social at p99: tollgate {over:+.0} µs over the slowest backend (target ≤ +{P99_BUDGET_US:.0} µs: {})",
            if over <= P99_BUDGET_US {
                "met"
            } else {
                "missed"
            }
        );
    }
    if let Some(l) = series.iter().find(|s| s.name == "lura /social") {
        let _ = writeln!(
            verdicts,
            "- latency, /social at p99: Lura {:+.0} µs over the slowest backend",
            l.value_us(99.0) - base.value_us(99.0)
        );
    }
    report::write(&h.out, "aggregate-capacity.csv", &csv)?;
    report::write(&h.out, "aggregate-latency.csv", &lat_csv)?;
    let mut files = Vec::new();
    if args.concurrency.len() > 1 {
        let mut lines: Vec<charts::Series> = Vec::new();
        for name in points.iter().map(|p| p.target.clone()) {
            if lines.iter().any(|s| s.name == name) {
                continue;
            }
            let pts = points
                .iter()
                .filter(|p| p.target == name)
                .map(|p| (p.concurrency as f64, p.rps, p.rps_range.0, p.rps_range.1))
                .collect();
            lines.push(charts::Series::new(name, pts));
        }
        files.extend(charts::soft(charts::capacity_chart(
            &h.out,
            "aggregate-capacity",
            "Requests/s: KrakenD's /foo and /social on tollgate and Lura",
            charts::XAxis::Concurrency,
            &lines,
        )));
    }
    let ms = |d: &Duration| format!("{} ms", d.as_secs_f64() * 1000.0);
    let summary = format!(
        "# tollgate bench aggregate\n\n{} · {} ({} cores) · placement {} · gateways on {} thread(s) · capacity: closed loop, {} requests per point, median of {} rounds (targets one after another per round) · latency: open loop at {} req/s per target, all at once, /social's backends answering after {}, {} and {} (slowest: backend {slowest})\n\n## Capacity\n\n{md}\n## Latency (/social, backends delayed)\n\n{lat_md}\n## Against Lura\n\n{verdicts}\n{}\n- configurations: aggregate.yaml (tollgate), lura.json (Lura)\n- load average before {}, after {}\n",
        machine::now(),
        machine::cpu_model(),
        machine::cores(),
        h.placement.layout.name(),
        c.threads.max(1),
        args.requests
            .unwrap_or(if c.quick { 5_000 } else { 30_000 }),
        c.rounds.max(2),
        args.rate,
        ms(&delays[0]),
        ms(&delays[1]),
        ms(&delays[2]),
        h.lines
            .iter()
            .map(|l| format!("- {l}\n"))
            .collect::<String>(),
        load.0,
        load.1,
    );
    report::write(&h.out, "summary.md", &summary)?;
    let meta = machine::metadata("aggregate", &std::env::args().collect::<Vec<_>>());
    report::write_metadata(&h.out, meta, &h.lines, load, &files)?;
    println!("{summary}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn krakends_endpoints_with_the_slow_copy_of_social() {
        let eps = endpoints(&[
            Duration::from_millis(1),
            Duration::from_millis(2),
            Duration::from_micros(3500),
        ]);
        let paths: Vec<&str> = eps.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/foo", "/social", "/social-slow"]);
        assert_eq!(eps[1].backends[1].url, "/static/data");
        assert_eq!(eps[1].backends[1].target, Some("data"));
        assert_eq!(eps[2].backends[2].url, "/static?delay=3500us");
        assert_eq!(eps[1].cache_ttl, Some("3600s"));
    }
}
