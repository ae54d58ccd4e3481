//! `tollgate bench redis`: a rate limit counted on Redis (`store.backend: redis`) against
//! the same limit in memory, in one run: the footprint per percentile (open loop,
//! interleaved request by request), set beside `redis-benchmark`'s own round trip to the
//! same Redis, and requests per second on one core at 64 connections (closed loop,
//! rounds A B A B), `sync: exact` and `sync: lease`. The Redis is a `redis-server` the
//! bench starts on a free port, on a core of its own when the machine has one to spare,
//! else on a core the proxy does not use (`redis_cores`), as a Redis on another
//! host would not be. Its round trip is measured from the proxy's core, and each
//! gateway's wake-ups and CPU during the footprint from the scheduler's counters.

use crate::harness::{Harness, Interleave, Layout, Target};
use crate::stats;
use crate::{CommonArgs, machine, procs, report};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Stdio;

#[derive(Debug, clap::Args)]
pub struct RedisArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub mix: crate::MixArgs,
    /// How the footprint's targets share the run: `requests` (all at once, request by
    /// request, the default) or `rounds` (one after another in each round: Redis, on the
    /// load generator's core where no core is spare, then waits on one target's load).
    #[arg(long, value_enum, default_value_t = Interleave::Requests)]
    pub interleave: Interleave,
    /// The `redis-server` to start (default: the one on PATH).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// The `redis-benchmark` that measures Redis's own round trip (default: on PATH;
    /// absent: the round trip is not measured, said in the report).
    #[arg(long, default_value = "redis-benchmark")]
    pub redis_benchmark: PathBuf,
}

/// Where Redis runs: on a core neither the proxy nor the provider nor the load generator
/// uses when the machine has one, else beside the load generator (`shared`) or the
/// provider (`sidecar`, where the proxy has the load generator's core): never on the
/// proxy's, as a Redis on another host would not be. `None`: unpinned.
fn redis_cores(p: &crate::harness::Placement, threads: usize) -> Option<String> {
    let n = machine::cores();
    let threads = threads.max(1);
    match p.layout {
        Layout::Shared if threads + 1 < n => Some(threads.to_string()),
        Layout::Sidecar if threads + 1 < n => Some("1".into()),
        Layout::Sidecar => p.provider.clone(),
        _ if p.loadgen.is_empty() => None,
        _ => Some(
            p.loadgen
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

/// Starts `bin` (a `redis-server`) on a free port, placed by [`redis_cores`]: the
/// process, its port and where it runs.
pub fn start_server(
    h: &mut Harness,
    bin: &Path,
    threads: usize,
) -> Result<(procs::Proc, u16, String), String> {
    let server = procs::on_path(&bin.to_string_lossy()).ok_or_else(|| {
        format!(
            "{} not found: install redis-server (apt-get install redis-server) or pass --redis-server",
            bin.display()
        )
    })?;
    let port = procs::free_port();
    let cores = redis_cores(&h.placement, threads);
    let (mut cmd, where_) = procs::command(&server, cores.as_deref());
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", server.display()))?;
    let redis = procs::Proc::new("redis", child, where_.clone());
    procs::wait_port(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        std::time::Duration::from_secs(10),
    )?;
    h.lines
        .push(format!("redis: redis-server 127.0.0.1:{port} ({where_})"));
    Ok((redis, port, where_))
}

/// The provider's answer at once.
const PATH: &str = "/delay/0ms";

/// Every request matched by one policy whose rate limit never refuses.
const LIMIT: &str =
    "policies:\n  - name: all\n    rate_limit: {limit: 1000000000000, window: second}\n";

pub fn run(args: RedisArgs) -> Result<(), String> {
    let c = &args.common;
    let requests = args.mix.requests(c.quick);
    let load_before = machine::loadavg();
    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, c.placement(Layout::Shared)?)?;
    let (_redis, port, where_) = start_server(&mut h, &args.redis_server, c.threads)?;
    let store = |sync: &str| {
        format!(
            "store:\n  backend: redis\n  url: redis://127.0.0.1:{port}\n  sync: {sync}\n  lease_size: 100\n"
        )
    };
    let memory_cfg = config(&h.out, "memory.yaml", "")?;
    let redis_cfg = config(&h.out, "redis.yaml", &store("exact"))?;
    let lease_cfg = config(&h.out, "redis-lease.yaml", &store("lease"))?;
    let direct = h.direct();
    let memory = h.tollgate("memory", &memory_cfg, c.threads)?;
    let redis = h.tollgate("redis", &redis_cfg, c.threads)?;
    let lease = h.tollgate("redis-lease", &lease_cfg, c.threads)?;
    let rtt = round_trip(
        &args.redis_benchmark,
        port,
        h.placement.server_cores(c.threads).as_deref(),
    );
    match &rtt {
        Ok(rtt) => h.lines.push(format!(
            "redis-benchmark PING, one client: p50 {:.0} µs, p99 {:.0} µs",
            rtt.0, rtt.1
        )),
        Err(why) => h.lines.push(format!("redis-benchmark: skipped ({why})")),
    }
    // The same round trip at the footprint's pace: a Redis (and a host) that idles
    // between calls answers slower than in redis-benchmark's tight loop.
    let paced = paced_ping(&mut h, port, args.mix.rate);
    for l in &h.lines {
        eprintln!("{l}");
    }
    eprintln!("load average before: {load_before}");
    let load = crate::rounds::Load::of_run(PATH, requests, c);
    let (rounds, warmup, per_round) = (load.rounds, load.warmup, load.per_round);

    // 1. Footprint: open loop, all targets in the same run, request by request.
    let all: Vec<&Target> = vec![&direct, &memory, &redis, &lease];
    let connections = 32;
    // PINGs from the proxy's core while the footprint runs: Redis's round trip under the
    // same load as the proxy's calls (the run's other processes on the proxy's core, the
    // load generator beside Redis).
    let proxy_core = h
        .placement
        .server_cores(c.threads)
        .and_then(|c| c.split(['-', ',']).next()?.parse::<usize>().ok());
    // What the scheduler did for each gateway meanwhile: a call to Redis is one more
    // sleep and wake-up of the proxy's worker per request, each costing this machine's
    // wake-up latency on top of the round trip.
    let sched = |t: &Target| t.pid().and_then(procs::tree_sched);
    let sched_before: Vec<_> = all[1..].iter().map(|t| sched(t)).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (loaded, measured) = std::thread::scope(|s| {
        let pinger =
            s.spawn(|| paced_round_trip(port, args.mix.rate, usize::MAX, proxy_core, &stop));
        let run = crate::rounds::footprint(
            &h,
            &all,
            args.interleave,
            &load,
            (connections, args.mix.rate),
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let loaded = pinger
            .join()
            .unwrap_or_else(|_| Err("the PING thread panicked".into()));
        (loaded, run)
    });
    let series = measured?;
    let sent = (warmup + per_round * rounds as u64).max(1) as f64;
    let scheduling: Vec<(String, Option<procs::Sched>)> = all[1..]
        .iter()
        .zip(&sched_before)
        .map(|(t, before)| {
            let d = sched(t).zip(*before).map(|(a, b)| a.since(&b));
            (t.name.clone(), d)
        })
        .collect();
    if let Ok((p50, p99)) = &loaded {
        eprintln!(
            "PING during the footprint, from the proxy's core: p50 {p50:.0} µs, p99 {p99:.0} µs"
        );
    }
    let (base, others) = series.split_first().ok_or("no direct series")?;
    let rows = stats::rows(base, &others.iter().collect::<Vec<_>>());
    report::write(&c.out, "percentiles.csv", &report::percentiles_csv(&rows))?;
    let p50 = |name: &str| stats::p50_of(&series, name);
    let over_memory = p50("redis") - p50("memory");
    let lease_over_memory = p50("redis-lease") - p50("memory");

    // 2. Capacity: closed loop, one target at a time, rounds A B A B.
    let capacity: Vec<&Target> = all[1..].to_vec();
    let measured = crate::rounds::capacity(&h, &capacity, &load, args.mix.concurrency)?;
    let ratio = |i: usize| measured[i].rps / measured[0].rps.max(1e-9);
    let store_metrics = redis.metrics().unwrap_or_default();
    let errors = crate::harness::counter(&store_metrics, "tollgate_store_errors_total");
    let trips = crate::harness::counter(&store_metrics, "tollgate_store_duration_seconds_count");
    let load_after = machine::loadavg();
    eprintln!("load average after: {load_after}");

    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let mut md = format!(
        "# tollgate bench redis\n\n{}, {} cores, one proxy thread each; redis-server on {} (not the proxy's core). Every request matched by a policy whose rate limit never refuses: counted in memory, on Redis one round trip each (`sync: exact`), or on Redis in blocks of 100 (`sync: lease`). Footprint: open loop at {} requests/s per target over {connections} connections, {}, median of {rounds} rounds. Capacity: closed loop, {} keep-alive connections, rounds A B A B.\n\n",
        machine::cpu_model(),
        machine::cores(),
        where_,
        args.mix.rate,
        args.interleave.describe(),
        args.mix.concurrency
    );
    md += &report::summary_table(&rows, &names);
    md += &match &rtt {
        Ok((p50, p99)) => format!(
            "\nRedis's own round trip (`redis-benchmark -c 1 -t ping`, a tight loop, same Redis): p50 {p50:.0} µs, p99 {p99:.0} µs. The same PING at the footprint's pace ({} requests/s), alone: {}; from the proxy's core while the footprint ran: {}.\n\nredis − memory at p50: **{over_memory:+.0} µs** (target ≤ one round trip: {p50:.0} µs in a tight loop{}{}); redis-lease − memory: {lease_over_memory:+.0} µs.\n",
            args.mix.rate,
            shown(&paced),
            shown(&loaded),
            paced.as_ref().map_or(String::new(), |p| format!(
                ", {:.0} µs at the footprint's pace",
                p.0
            )),
            loaded.as_ref().map_or(String::new(), |p| format!(
                ", {:.0} µs under the run's load",
                p.0
            )),
        ),
        Err(why) => format!(
            "\nredis − memory at p50: **{over_memory:+.0} µs**; redis-lease − memory: {lease_over_memory:+.0} µs. Redis's own round trip not measured: {why}.\n"
        ),
    };
    md += "\nThe gateways' threads during the footprint (`/proc/PID/task/*/schedstat`; one proxy thread sleeps in `epoll_wait` between events, so slices are about its wake-ups):\n\n| target | CPU per request | slices per request | wait for a CPU per slice |\n|---|---:|---:|---:|\n";
    for (name, s) in &scheduling {
        md += &match s {
            Some(s) => format!(
                "| {name} | {:.1} µs | {:.2} | {:.1} µs |\n",
                s.run.as_secs_f64() * 1e6 / sent,
                s.slices as f64 / sent,
                s.wait.as_secs_f64() * 1e6 / s.slices.max(1) as f64
            ),
            None => format!("| {name} | — | — | — |\n"),
        };
    }
    md += &crate::rounds::capacity_table(&capacity, &measured, "memory");
    md += &format!(
        "\nredis ÷ memory at {} connections: **{:.2}×** (target ≥ 0.7×). Round trips to Redis from the redis target: {}; store errors: {}.\n",
        args.mix.concurrency,
        ratio(1),
        trips.unwrap_or(0),
        errors.unwrap_or(0)
    );
    report::write(&c.out, "summary.md", &md)?;
    eprintln!("\n{md}");
    let mut meta = machine::metadata("bench redis", &std::env::args().collect::<Vec<_>>());
    meta["footprint_p50_redis_over_memory_us"] = json!(over_memory);
    meta["footprint_p50_lease_over_memory_us"] = json!(lease_over_memory);
    meta["redis_round_trip_us"] = match &rtt {
        Ok((p50, p99)) => json!({"p50": p50, "p99": p99}),
        Err(why) => json!(why),
    };
    meta["paced_round_trip_us"] = match &paced {
        Ok((p50, p99)) => json!({"p50": p50, "p99": p99, "rate": args.mix.rate}),
        Err(why) => json!(why),
    };
    meta["loaded_round_trip_us"] = match &loaded {
        Ok((p50, p99)) => {
            json!({"p50": p50, "p99": p99, "rate": args.mix.rate, "core": proxy_core})
        }
        Err(why) => json!(why),
    };
    meta["scheduling_during_footprint"] = json!(
        scheduling
            .iter()
            .map(|(n, s)| {
                let v = s.map_or(json!(null), |s| {
                    json!({
                        "cpu_us": s.run.as_secs_f64() * 1e6,
                        "wait_us": s.wait.as_secs_f64() * 1e6,
                        "slices": s.slices,
                        "requests": sent,
                    })
                });
                (n.clone(), v)
            })
            .collect::<serde_json::Map<_, _>>()
    );
    meta["requests_per_second"] = json!(
        capacity
            .iter()
            .zip(&measured)
            .map(|(t, m)| (t.name.clone(), json!(m.rps)))
            .collect::<serde_json::Map<_, _>>()
    );
    meta["capacity"] = crate::rounds::capacity_json(&capacity, &measured);
    report::write_metadata(
        &c.out,
        meta,
        &h.lines,
        (&load_before, &load_after),
        &report::footprint_files(),
    )
}

/// Writes a tollgate config for this bench: one route to the provider, the limit, quiet
/// logs, and `extra`.
fn config(out: &Path, name: &str, extra: &str) -> Result<PathBuf, String> {
    report::route_config(out, name, &format!("{LIMIT}{extra}"))
}

/// Redis's own round trip, p50 and p99 in µs: `redis-benchmark` on the proxy's `cores`
/// with one client sending PING one after another (under `timeout`: redis-benchmark
/// retries a lost server forever).
fn round_trip(bin: &Path, port: u16, cores: Option<&str>) -> Result<(f64, f64), String> {
    let bin = procs::on_path(&bin.to_string_lossy())
        .ok_or_else(|| format!("{} not found", bin.display()))?;
    let (mut cmd, _) = procs::command(Path::new("timeout"), cores);
    let out = cmd
        .arg("60")
        .arg(&bin)
        .args(["-p", &port.to_string(), "-c", "1", "-n", "20000"])
        .args(["-t", "ping_mbulk", "--csv"])
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_csv(&text).ok_or_else(|| format!("unexpected output: {}", text.trim()))
}

/// PING's round trip at `rate`, alone (2 000 of them), noted in the run's lines.
pub fn paced_ping(h: &mut Harness, port: u16, rate: f64) -> Result<(f64, f64), String> {
    let never = std::sync::atomic::AtomicBool::new(false);
    let paced = paced_round_trip(port, rate, 2_000, None, &never);
    h.lines.push(format!(
        "PING at {rate} requests/s, one connection: {}",
        shown(&paced)
    ));
    paced
}

/// A round trip's p50 and p99 for the report.
pub fn shown(r: &Result<(f64, f64), String>) -> String {
    match r {
        Ok((p50, p99)) => format!("p50 {p50:.0} µs, p99 {p99:.0} µs"),
        Err(e) => format!("not measured ({e})"),
    }
}

/// PING's round trip to the Redis on `port`, p50 and p99 in µs: up to `n` sent one at a
/// time at `rate` a second from this thread (pinned to `core` if given), until `stop`
/// (as the proxy's calls come at the footprint's pace, not in a tight loop).
fn paced_round_trip(
    port: u16,
    rate: f64,
    n: usize,
    core: Option<usize>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(f64, f64), String> {
    use std::io::{Read, Write};
    if let Some(id) = core {
        core_affinity::set_for_current(core_affinity::CoreId { id });
    }
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let gap = std::time::Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut h = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 16];
    for _ in 0..n {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let started = std::time::Instant::now();
        s.write_all(b"*1\r\n$4\r\nPING\r\n")
            .map_err(|e| e.to_string())?;
        let mut got = 0;
        while got < 7 {
            got += match s.read(&mut buf[got..]) {
                Ok(0) => return Err("Redis closed the connection".into()),
                Ok(k) => k,
                Err(e) => return Err(e.to_string()),
            };
        }
        let _ = h.record(started.elapsed().as_micros() as u64);
        std::thread::sleep(gap.saturating_sub(started.elapsed()));
    }
    Ok((
        h.value_at_quantile(0.5) as f64,
        h.value_at_quantile(0.99) as f64,
    ))
}

/// p50 and p99 (ms in the CSV) of the first row, in µs.
fn parse_csv(text: &str) -> Option<(f64, f64)> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines
        .next()?
        .split(',')
        .map(|h| h.trim_matches('"'))
        .collect();
    let row: Vec<&str> = lines
        .next()?
        .split(',')
        .map(|v| v.trim_matches('"'))
        .collect();
    let at = |name: &str| -> Option<f64> {
        let i = head.iter().position(|h| *h == name)?;
        row.get(i)?.parse::<f64>().ok().map(|ms| ms * 1000.0)
    };
    Some((at("p50_latency_ms")?, at("p99_latency_ms")?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_redis_benchmarks_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"PING_MBULK\",\"24390.24\",\"0.033\",\"0.016\",\"0.031\",\"0.047\",\"0.071\",\"0.503\"\n";
        assert_eq!(super::parse_csv(csv), Some((31.0, 71.0)));
    }
}
