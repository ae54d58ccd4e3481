//! Closed-loop measurements in rounds (A B A B …): each target's requests/s, latency and
//! its process's CPU per request, and each target's medians over the rounds.

use crate::harness::{Harness, Target};
use crate::loadgen::Mode;
use crate::procs;
use crate::stats::{self, median};
use std::borrow::Borrow;
use std::time::Instant;

/// One closed-loop measurement of one target.
#[derive(Clone)]
pub struct Sample {
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    /// The load generator's share of its cores.
    pub cpu: f64,
    /// The target process's CPU per request, user and kernel, in µs (processes the bench
    /// started).
    pub cpu_us: Option<(f64, f64)>,
    /// Its cycles and instructions per request, where the machine counts them
    /// ([`crate::counters`]).
    pub counters: Option<(f64, f64)>,
    /// The share of one core that tollgate's observer thread used (every request's event,
    /// from all workers, goes through that one thread): near 1, it is the limit.
    pub observer: Option<f64>,
    /// Times the target's threads were given a CPU, per request ([`procs::Sched`]): about
    /// its wake-ups, since a proxy's thread sleeps in `epoll_wait` between events. Fewer
    /// requests per wake-up means more of the fixed cost of each (the scheduler, the
    /// event loop's turn) per request.
    pub wakeups: Option<f64>,
}

/// tollgate's observer thread, by name ([`procs::thread_run`]).
const OBSERVER: &str = "tollgate-observer";

/// Every target measured once per round, one after another (A B A B …), warm-up requests
/// in the first round only: each target's samples, in target order.
pub fn in_rounds<T: Borrow<Target>>(
    h: &Harness,
    targets: &[T],
    path: &str,
    requests: u64,
    warmup: u64,
    concurrency: usize,
    rounds: usize,
) -> Result<Vec<Vec<Sample>>, String> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for (i, t) in targets.iter().enumerate() {
            let w = if round == 0 { warmup } else { 0 };
            samples[i].push(sample(h, t.borrow(), path, requests, w, concurrency)?);
        }
    }
    Ok(samples)
}

/// Measures `t` at `path` in closed loop, with the CPU its process used per request.
pub fn sample(
    h: &Harness,
    t: &Target,
    path: &str,
    requests: u64,
    warmup: u64,
    concurrency: usize,
) -> Result<Sample, String> {
    let pid = t.pid();
    let before = pid.and_then(procs::tree_cpu);
    let sched = pid.and_then(procs::tree_sched);
    let counting = pid.and_then(crate::counters::start);
    let observed = pid.and_then(|p| Some((procs::thread_run(p, OBSERVER)?, Instant::now())));
    let r = h.measure(t, path, requests, warmup, concurrency, Mode::Closed)?;
    let observer = observed.and_then(|(run, at)| {
        let now = procs::thread_run(pid?, OBSERVER)?;
        Some(now.saturating_sub(run).as_secs_f64() / at.elapsed().as_secs_f64())
    });
    let counted = counting.and_then(|c| c.finish());
    // Warm-up requests ran inside the window too: count them.
    let served = (r.ok + r.non_2xx + warmup).max(1) as f64;
    let cpu_us = match (before, pid.and_then(procs::tree_cpu)) {
        (Some((u0, s0)), Some((u1, s1))) => Some((
            (u1 - u0).as_secs_f64() * 1e6 / served,
            (s1 - s0).as_secs_f64() * 1e6 / served,
        )),
        _ => None,
    };
    let counters = counted.map(|(c, i)| (c as f64 / served, i as f64 / served));
    let wakeups = sched
        .zip(pid.and_then(procs::tree_sched))
        .map(|(a, b)| b.since(&a).slices as f64 / served);
    Ok(Sample {
        rps: r.rps(),
        p50_ms: stats::value_us(&r.hist, 50.0) / 1000.0,
        p99_ms: stats::value_us(&r.hist, 99.0) / 1000.0,
        errors: r.errors + r.non_2xx,
        cpu: r.cpu_share(),
        cpu_us,
        counters,
        observer,
        wakeups,
    })
}

/// One target's samples over the rounds: the median of each figure, errors summed.
pub struct Summary {
    pub rps: f64,
    /// The lowest and highest requests/s of the rounds (the charts' error bars).
    pub rps_range: (f64, f64),
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub loadgen_cpu: f64,
    /// User and kernel µs per request, each the median over the rounds that had them.
    pub cpu_us: Option<(f64, f64)>,
    /// Cycles and instructions per request, each the median over the rounds counted.
    pub counters: Option<(f64, f64)>,
    /// The observer thread's share of a core, the median over the rounds.
    pub observer: Option<f64>,
    /// Wake-ups per request, the median over the rounds.
    pub wakeups: Option<f64>,
    pub errors: u64,
}

pub fn summary(s: &[Sample]) -> Summary {
    let col = |f: fn(&Sample) -> f64| median(&mut s.iter().map(f).collect::<Vec<_>>());
    // The median of a figure over the rounds that had it; none when no round had it.
    let some = |f: &dyn Fn(&Sample) -> Option<f64>| {
        let mut v: Vec<f64> = s.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    let pair = |a: Option<f64>, b: Option<f64>| a.zip(b);
    let rps = s.iter().map(|x| x.rps);
    Summary {
        rps_range: (
            rps.clone().fold(f64::INFINITY, f64::min),
            rps.fold(f64::NEG_INFINITY, f64::max),
        ),
        rps: col(|x| x.rps),
        p50_ms: col(|x| x.p50_ms),
        p99_ms: col(|x| x.p99_ms),
        loadgen_cpu: col(|x| x.cpu),
        cpu_us: pair(
            some(&|x| x.cpu_us.map(|c| c.0)),
            some(&|x| x.cpu_us.map(|c| c.1)),
        ),
        counters: pair(
            some(&|x| x.counters.map(|c| c.0)),
            some(&|x| x.counters.map(|c| c.1)),
        ),
        observer: some(&|x| x.observer),
        wakeups: some(&|x| x.wakeups),
        errors: s.iter().map(|x| x.errors).sum(),
    }
}

/// Each target's summary of its samples ([`in_rounds`]), each printed: what `bench redis`
/// and `bench https` report as capacity.
pub fn summaries<T: Borrow<Target>>(targets: &[T], samples: Vec<Vec<Sample>>) -> Vec<Summary> {
    targets
        .iter()
        .zip(samples)
        .map(|(t, s)| {
            let m = summary(&s);
            eprintln!(
                "capacity {:<12} {:>8.0} req/s ({} failed, CPU {} per request)",
                t.borrow().name,
                m.rps,
                m.errors,
                cpu_text(m.cpu_us)
            );
            m
        })
        .collect()
}

/// `9.8 µs`: user and kernel together, or `–` when not measured. The split alone is not
/// shown: the kernel keeps each of the two monotonic by scaling them to the process's
/// run time with the tick ratio of its whole life, so over a window of a second or two
/// one can stand still while the other takes it all (a run showed `0.0 + 19.0`).
pub fn cpu_text(cpu_us: Option<(f64, f64)>) -> String {
    cpu_us.map_or("–".into(), |(u, k)| format!("{:.1} µs", u + k))
}

/// Each target's summary for `metadata.json`: `{name: {requests_per_second,
/// cpu_us_per_request: {user, kernel} | null, failed}}`.
pub fn capacity_json<T: Borrow<Target>>(targets: &[T], summaries: &[Summary]) -> serde_json::Value {
    targets
        .iter()
        .zip(summaries)
        .map(|(t, m)| {
            let cpu = m.cpu_us.map_or(
                serde_json::Value::Null,
                |(u, k)| serde_json::json!({"user": u, "kernel": k}),
            );
            (
                t.borrow().name.clone(),
                serde_json::json!({
                    "requests_per_second": m.rps,
                    "cpu_us_per_request": cpu,
                    "failed": m.errors,
                }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// What one run sends each target: to `path`, `per_round` requests a round over
/// `rounds` rounds, with `warmup` requests first.
pub struct Load<'a> {
    pub path: &'a str,
    pub per_round: u64,
    pub warmup: u64,
    pub rounds: usize,
}

impl<'a> Load<'a> {
    /// `requests` per target over the run's rounds (at least 2) to `path`; the warm-up
    /// asked for, or `quick`'s or a full run's.
    pub fn of_run(path: &'a str, requests: u64, c: &crate::CommonArgs) -> Self {
        let rounds = c.rounds.max(2);
        Self {
            path,
            per_round: (requests / rounds as u64).max(1),
            warmup: c.warmup.unwrap_or(if c.quick { 200 } else { 1000 }),
            rounds,
        }
    }
}

/// A capacity table in Markdown: each target's median requests/s, its ratio to the
/// first (named `base`), CPU per request and failed requests.
pub fn capacity_table(targets: &[&Target], measured: &[Summary], base: &str) -> String {
    let first = measured.first().map_or(1e-9, |m| m.rps.max(1e-9));
    let mut md = format!(
        "\n| target | requests/s (median) | ÷ {base} | CPU per request | failed |\n|---|---:|---:|---:|---:|\n"
    );
    for (t, m) in targets.iter().zip(measured) {
        md += &format!(
            "| {} | {:.0} | {:.2} | {} | {} |\n",
            t.name,
            m.rps,
            m.rps / first,
            cpu_text(m.cpu_us),
            m.errors
        );
    }
    md
}

/// The footprint of `all` (the first, direct, the baseline): open loop at `rate` per
/// target over `connections`, the targets sharing each round as `how` says, the warm-up
/// in the first round; a series per target (and none for the twin).
pub fn footprint(
    h: &Harness,
    all: &[&Target],
    how: crate::harness::Interleave,
    load: &Load<'_>,
    (connections, rate): (usize, f64),
) -> Result<Vec<stats::Series>, String> {
    let mut series: Vec<stats::Series> = all.iter().map(|t| stats::Series::new(&t.name)).collect();
    for round in 0..load.rounds {
        let w = if round == 0 { load.warmup } else { 0 };
        let mode = Mode::Open { rate };
        for m in h.round(all, how, load.path, load.per_round, w, connections, mode)? {
            m.add_to(&mut series);
        }
    }
    Ok(series)
}

/// The capacity of `targets`: closed loop over `concurrency` connections, one target
/// after another in each round (A B A B), half the warm-up first; each target's summary.
pub fn capacity(
    h: &Harness,
    targets: &[&Target],
    load: &Load<'_>,
    concurrency: usize,
) -> Result<Vec<Summary>, String> {
    let samples = in_rounds(
        h,
        targets,
        load.path,
        load.per_round,
        load.warmup / 2,
        concurrency,
        load.rounds,
    )?;
    Ok(summaries(targets, samples))
}

/// A run's footprint and capacity together, as `bench cache` and `bench mcp` measure
/// them: the footprint of `all` (the first direct) in open loop at `rate` over
/// `connections`, request by request (`percentiles.csv` written to `out`), then the
/// capacity of the others in closed loop over `concurrency`, rounds A B A B.
pub struct Mix {
    pub series: Vec<stats::Series>,
    pub rows: Vec<stats::Row>,
    pub measured: Vec<Summary>,
}

pub fn footprint_and_capacity(
    h: &Harness,
    all: &[&Target],
    load: &Load<'_>,
    (connections, rate): (usize, f64),
    concurrency: usize,
    out: &std::path::Path,
) -> Result<Mix, String> {
    let how = crate::harness::Interleave::Requests;
    let series = footprint(h, all, how, load, (connections, rate))?;
    let (base, others) = series.split_first().ok_or("no direct series")?;
    let rows = stats::rows(base, &others.iter().collect::<Vec<_>>());
    crate::report::write(
        out,
        "percentiles.csv",
        &crate::report::percentiles_csv(&rows),
    )?;
    let measured = capacity(h, &all[1..], load, concurrency)?;
    Ok(Mix {
        series,
        rows,
        measured,
    })
}
