//! `tollgate bench cache`: the cache on Redis (`cache: {store: shared}`) against the cache
//! in memory and the passthrough, in one run: the footprint per percentile (open loop,
//! interleaved request by request) and requests per second on one core (closed loop,
//! rounds A B A B); then the provider calls N replicas make for the same keys, with
//! each replica's own cache and with the shared one.
//!
//! A replica keeps an entry it read from Redis in its memory, so its later hits of that
//! entry are memory hits: a shared hit (a read from Redis) is the first hit of an entry
//! on each replica. To measure that path on every request, the `shared-hit` target's
//! memory is smaller than one entry (`max_size: 1KiB` against an answer of 2 KiB): it
//! keeps nothing, and every request reads Redis. The share of requests that were shared
//! hits is read from its metrics and reported.

use crate::harness::{Harness, Interleave, Layout, Target};
use crate::stats;
use crate::{CommonArgs, machine, report};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub mix: crate::MixArgs,
    /// The `redis-server` to start (default: the one on PATH).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Replicas of the provider-calls measurement.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Distinct keys each replica is asked for, all replicas at once per key.
    #[arg(long, default_value_t = 100)]
    pub keys: usize,
}

/// An answer of 2 KiB, the same for every request (its seed is fixed): larger than the
/// `shared-hit` target's memory.
const PATH: &str = "/bytes/2048?seed=1";

/// How the cached targets' policy reads in the report and their metrics.
const POLICY: &str = "cached";

pub fn run(args: CacheArgs) -> Result<(), String> {
    let c = &args.common;
    let requests = args.mix.requests(c.quick);
    let load_before = machine::loadavg();
    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, c.placement(Layout::Shared)?)?;
    let (_redis, port, where_) = crate::redis::start_server(&mut h, &args.redis_server, c.threads)?;
    let store = format!("store:\n  backend: redis\n  url: redis://127.0.0.1:{port}\n");
    let passthrough_cfg = config(&h.out, "passthrough.yaml", "", "")?;
    let memory_cfg = config(&h.out, "memory-hit.yaml", "", "{ttl: 1h}")?;
    let shared_cfg = config(
        &h.out,
        "shared-hit.yaml",
        &store,
        "{ttl: 1h, store: shared, max_size: 1KiB}",
    )?;
    let direct = h.direct();
    let passthrough = h.tollgate("passthrough", &passthrough_cfg, c.threads)?;
    let memory = h.tollgate("memory-hit", &memory_cfg, c.threads)?;
    let shared = h.tollgate("shared-hit", &shared_cfg, c.threads)?;
    // Redis's own round trip at the footprint's pace: what a read of it costs at least.
    let paced = crate::redis::paced_ping(&mut h, port, args.mix.rate);
    for l in &h.lines {
        eprintln!("{l}");
    }
    eprintln!("load average before: {load_before}");
    let load = crate::rounds::Load::of_run(PATH, requests, c);
    let rounds = load.rounds;

    // The footprint (open loop, request by request), then capacity (rounds A B A B).
    let all: Vec<&Target> = vec![&direct, &passthrough, &memory, &shared];
    let connections = 32;
    let crate::rounds::Mix {
        series,
        rows,
        measured,
    } = crate::rounds::footprint_and_capacity(
        &h,
        &all,
        &load,
        (connections, args.mix.rate),
        args.mix.concurrency,
        &c.out,
    )?;
    let p50 = |name: &str| stats::p50_of(&series, name);
    let shared_over_memory = p50("shared-hit") - p50("memory-hit");
    let capacity: Vec<&Target> = all[1..].to_vec();
    let ratio = |i: usize| measured[i].rps / measured[0].rps.max(1e-9);
    // What the shared-hit target's hits were: read from Redis (shared) or from memory.
    let actions = |t: &Target, action: &str| {
        t.metrics().and_then(|m| {
            crate::harness::counter(
                &m,
                &format!(
                    "tollgate_remedy_actions_total{{policy=\"{POLICY}\",remedy=\"cache\",action=\"{action}\"}}"
                ),
            )
        })
    };
    let shared_hits = actions(&shared, "shared_hit").unwrap_or(0);
    let memory_hits = actions(&shared, "hit").unwrap_or(0);
    let share = shared_hits as f64 / (shared_hits + memory_hits).max(1) as f64;

    // 3. Provider calls for the same keys over N replicas.
    let calls = replicas_calls(&mut h, &store, args.replicas, args.keys)?;
    let load_after = machine::loadavg();
    eprintln!("load average after: {load_after}");

    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let mut md = format!(
        "# tollgate bench cache\n\n{}, {} cores, one proxy thread each; redis-server on {where_} (not the proxy's core). `GET {PATH}` (2 KiB): passthrough (no policy); memory-hit (`cache: {{ttl: 1h}}`, every request after the first from memory); shared-hit (`cache: {{store: shared}}` on Redis with `max_size: 1KiB`, smaller than the entry: nothing is kept in memory, every request reads the entry from Redis, as a replica's first hit of an entry another stored does). Footprint: open loop at {} requests/s per target over {connections} connections, {}, median of {rounds} rounds. Capacity: closed loop, {} keep-alive connections, rounds A B A B.\n\n",
        machine::cpu_model(),
        machine::cores(),
        args.mix.rate,
        Interleave::Requests.describe(),
        args.mix.concurrency
    );
    md += &report::summary_table(&rows, &names);
    md += &format!(
        "\nshared-hit − memory-hit at p50: **{shared_over_memory:+.0} µs** (target ≤ +100 µs on loopback Redis). Redis's PING at the footprint's pace ({} requests/s, one connection, alone): {}.\n",
        args.mix.rate,
        crate::redis::shown(&paced)
    );
    md += &crate::rounds::capacity_table(&capacity, &measured, "passthrough");
    md += &format!(
        "\nshared-hit ÷ passthrough: **{:.2}×** (target ≥ 1.5×); memory-hit ÷ passthrough: {:.2}×. The shared-hit target's hits: {shared_hits} read from Redis, {memory_hits} from memory ({:.1} % from Redis).\n",
        ratio(2),
        ratio(1),
        share * 100.0
    );
    md += &format!(
        "\nProvider calls for {} distinct keys, each asked of {} replicas at once: **{}** with each replica's own cache, **{}** with the shared cache ({} saved).\n",
        args.keys,
        args.replicas,
        calls.0,
        calls.1,
        calls.0.saturating_sub(calls.1)
    );
    report::write(&c.out, "summary.md", &md)?;
    eprintln!("\n{md}");
    let mut meta = machine::metadata("bench cache", &std::env::args().collect::<Vec<_>>());
    meta["footprint_p50_shared_over_memory_us"] = json!(shared_over_memory);
    meta["paced_round_trip_us"] = match &paced {
        Ok((p50, p99)) => json!({"p50": p50, "p99": p99, "rate": args.mix.rate}),
        Err(why) => json!(why),
    };
    meta["shared_hit_over_passthrough"] = json!(ratio(2));
    meta["memory_hit_over_passthrough"] = json!(ratio(1));
    meta["shared_hit_reads"] = json!({"redis": shared_hits, "memory": memory_hits});
    meta["provider_calls"] = json!({
        "keys": args.keys,
        "replicas": args.replicas,
        "local": calls.0,
        "shared": calls.1,
    });
    meta["capacity"] = crate::rounds::capacity_json(&capacity, &measured);
    report::write_metadata(
        &c.out,
        meta,
        &h.lines,
        (&load_before, &load_after),
        &report::footprint_files(),
    )
}

/// Writes a tollgate config for this bench: one route to the provider, quiet logs,
/// `store`, and a policy `cached` with `cache` when it is given.
fn config(out: &Path, name: &str, store: &str, cache: &str) -> Result<PathBuf, String> {
    let policy = if cache.is_empty() {
        String::new()
    } else {
        format!("policies:\n  - name: {POLICY}\n    cache: {cache}\n")
    };
    report::route_config(out, name, &format!("{policy}{store}"))
}

/// `replicas` gateways with each its own cache, then `replicas` sharing one on Redis;
/// each of `keys` distinct keys asked of all replicas of a set at once: the provider
/// calls each set made (its cache misses), local then shared.
fn replicas_calls(
    h: &mut Harness,
    store: &str,
    replicas: usize,
    keys: usize,
) -> Result<(u64, u64), String> {
    let mut calls = Vec::new();
    for (set, store, cache) in [
        ("local", "", "{ttl: 1h}"),
        ("shared", store, "{ttl: 1h, store: shared}"),
    ] {
        let cfg = config(&h.out, &format!("replicas-{set}.yaml"), store, cache)?;
        let gateways: Vec<Target> = (0..replicas)
            .map(|i| h.tollgate(&format!("{set}-{i}"), &cfg, 1))
            .collect::<Result<_, _>>()?;
        for k in 0..keys {
            // Seeds past the footprint's: keys no set has seen.
            let path = format!("/bytes/2048?seed={}", 1000 + k);
            std::thread::scope(|s| {
                for g in &gateways {
                    let path = &path;
                    s.spawn(move || get(&g.base, path));
                }
            });
        }
        let misses: u64 = gateways
            .iter()
            .filter_map(|g| {
                crate::harness::counter(
                    &g.metrics()?,
                    &format!(
                        "tollgate_remedy_actions_total{{policy=\"{POLICY}\",remedy=\"cache\",action=\"miss\"}}"
                    ),
                )
            })
            .sum();
        calls.push(misses);
    }
    Ok((calls[0], calls[1]))
}

/// One `GET` of `path` on `base` (`http://host:port`), its answer read to the end.
fn get(base: &str, path: &str) {
    use std::io::{Read, Write};
    let Some(addr) = base.strip_prefix("http://") else {
        return;
    };
    if let Ok(mut s) = std::net::TcpStream::connect(addr) {
        let _ = write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        );
        let _ = s.read_to_end(&mut Vec::new());
    }
}
