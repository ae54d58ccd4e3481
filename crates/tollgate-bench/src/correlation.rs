//! `tollgate bench correlation`: the footprint at several provider delays, one delta line
//! per delay, to show whether it depends on the provider's response time.

use crate::charts::{self, Line};
use crate::harness::{Harness, Interleave, Layout};
use crate::latency::{delay_path, parse_delay};
use crate::loadgen::Mode;
use crate::stats::{self, Series};
use crate::{CommonArgs, machine, report};
use serde_json::json;
use std::fmt::Write as _;

#[derive(Debug, clap::Args)]
pub struct CorrelationArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Provider delays, comma separated.
    #[arg(
        long,
        default_value = "200ms,300ms,500ms,1000ms",
        value_delimiter = ','
    )]
    pub delays: Vec<String>,
    /// The tollgate config to compare with direct (default: the built-in passthrough).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Requests per delay and target, split over the rounds (default 20000; --quick 5000).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Requests in flight; the open-loop rate per delay is concurrency / delay.
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,
    /// How targets share the run: `requests` (all at once, request by request, with a
    /// second copy of direct whose difference is the noise floor) or `rounds` (one target
    /// after another in each round; the noise floor is the spread of the direct rounds).
    #[arg(long, value_enum, default_value_t = Interleave::Requests)]
    pub interleave: Interleave,
}

pub fn run(args: CorrelationArgs) -> Result<(), String> {
    let c = &args.common;
    let requests = args
        .requests
        .unwrap_or(if c.quick { 5_000 } else { 20_000 });
    let delays = args
        .delays
        .iter()
        .map(|d| parse_delay(d))
        .collect::<Result<Vec<_>, _>>()?;
    let load_before = machine::loadavg();
    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, c.placement(Layout::Shared)?)?;
    let cfg = match &args.config {
        Some(p) => p.clone(),
        None => h.passthrough_config()?,
    };
    let direct = h.direct();
    let tollgate = h.tollgate("tollgate", &cfg, c.threads)?;
    for l in &h.lines {
        eprintln!("{l}");
    }
    let rounds = c.rounds.max(2);
    let per_round = (requests / rounds as u64).max(1);
    let mut csv = String::from(
        "delay_ms,percentile,label,direct_us,tollgate_us,delta_us,noise_us,within_noise\n",
    );
    let mut lines = Vec::new();
    let mut table = String::from(
        "| delay | p50 Δ µs | p90 Δ µs | p99 Δ µs | p99.9 Δ µs |\n|---|---:|---:|---:|---:|\n",
    );
    for (i, delay) in delays.iter().enumerate() {
        let rate = args.concurrency as f64 / delay.as_secs_f64().max(0.001);
        let mode = Mode::Open { rate };
        let path = delay_path(*delay);
        let mut series = [Series::new("direct"), Series::new("tollgate")];
        for round in 0..rounds {
            let w = if round == 0 && i == 0 {
                c.warmup.unwrap_or(500)
            } else {
                0
            };
            let results = h.round(
                &[&direct, &tollgate],
                args.interleave,
                &path,
                per_round,
                w,
                args.concurrency * 2,
                mode,
            )?;
            for m in results {
                m.add_to(&mut series);
            }
        }
        let rows = stats::rows(&series[0], &[&series[1]]);
        let ms = delay.as_millis();
        let mut points = Vec::new();
        for p in stats::points() {
            let d = rows
                .iter()
                .find(|r| r.percentile == p && r.scenario == "direct")
                .expect("row");
            let t = rows
                .iter()
                .find(|r| r.percentile == p && r.scenario == "tollgate")
                .expect("row");
            let delta = t.delta_us.unwrap_or_default();
            let _ = writeln!(
                csv,
                "{ms},{p},{},{:.1},{:.1},{delta:.1},{:.1},{}",
                stats::label(p),
                d.latency_us,
                t.latency_us,
                d.noise_us,
                t.within_noise.unwrap_or(false)
            );
            points.push((p, delta));
        }
        let at = |p: f64| {
            points
                .iter()
                .find(|x| x.0 == p)
                .map(|x| x.1)
                .unwrap_or_default()
        };
        let _ = writeln!(
            table,
            "| {ms} ms | {:+.0} | {:+.0} | {:+.0} | {:+.0} |",
            at(50.0),
            at(90.0),
            at(99.0),
            at(99.9)
        );
        eprintln!(
            "delay {ms} ms: p50 {:+.0} µs, p99 {:+.0} µs",
            at(50.0),
            at(99.0)
        );
        lines.push(Line {
            name: format!("{ms} ms provider"),
            points,
            dashed: false,
        });
    }
    report::write(&c.out, "correlation.csv", &csv)?;
    let files = charts::soft(charts::percentile_chart(
        &c.out,
        "correlation",
        "Added latency vs direct by provider delay",
        "delta (µs)",
        &lines,
    ));
    let load_after = machine::loadavg();
    let summary = format!(
        "# tollgate bench correlation\n\n{} · {} · {requests} requests per delay and target, open loop at {} in flight, targets {} · placement {}\n\n{table}\nNoise floor: {}.\n\n- load average before {load_before}, after {load_after}\n",
        machine::now(),
        machine::cpu_model(),
        args.concurrency,
        args.interleave.describe(),
        h.placement.layout.name(),
        args.interleave.noise_text(),
    );
    report::write(&c.out, "summary.md", &summary)?;
    let mut meta = machine::metadata("correlation", &std::env::args().collect::<Vec<_>>());
    meta["config_hash"] = json!(machine::file_hash(&cfg));
    meta["settings"] =
        json!({"interleave": args.interleave.name(), "placement": h.placement.layout.name()});
    report::write_metadata(&c.out, meta, &h.lines, (&load_before, &load_after), &files)?;
    println!("{summary}");
    Ok(())
}
