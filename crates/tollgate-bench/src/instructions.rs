//! `tollgate bench instructions`: instructions per request, counted by valgrind's callgrind,
//! for tollgate's scenarios beside the hyper floor, nginx and HAProxy run under the same
//! tool. A wall-clock figure on a shared machine moves with whatever else the machine
//! does; an instruction count does not, so a change to the hot path shows as a number
//! that moved, on any machine.
//!
//! Each proxy runs alone under `valgrind --tool=callgrind` (one worker, or `--threads`;
//! the provider and the load generator run natively). After a warm-up its counters are zeroed
//! (`callgrind_control -z`), a fixed number of keep-alive requests is sent over a fixed
//! set of connections (closed loop), and the counters are dumped (`callgrind_control
//! -d`): the dump holds exactly the measured requests, every thread of the process
//! included (the observer and HAR threads too). What it cannot see is the kernel: the
//! syscalls themselves (natively each of these proxies makes about two reads and two
//! writes per request; under valgrind the counts differ, so none is reported).
//!
//! `--cache-sim` adds callgrind's cache simulation on one fixed geometry
//! (`CACHE_GEOMETRY`): the misses per request, and the functions whose data missed the
//! last level most, so that what a request touches (and at many connections, finds
//! cold) is counted the same on any machine.

use crate::harness::{Harness, Layout, Placement, Target};
use crate::loadgen::Mode;
use crate::peers::Peer;
use crate::procs::on_path;
use crate::{CommonArgs, aggregate, lura, machine, report};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct InstructionsArgs {
    /// `--rounds` and `--placement` do not apply: unpinned, one count per target (counts
    /// repeat within a fraction of a percent). `--threads N` counts tollgate and the peers
    /// with N workers (valgrind runs their threads one at a time, so what it shows is the
    /// work N workers do per request, not what waiting on each other costs them); nginx,
    /// one process under the tool, is then skipped.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Measured requests per target (default 20000; --quick 4000); `--warmup` before them
    /// (default 2000; --quick 1000).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Keep-alive connections, closed loop.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Functions listed per target, by instructions of their own.
    #[arg(long, default_value_t = 12)]
    pub top: usize,
    /// tollgate scenarios to count (default: all): passthrough, matched (a policy that
    /// only frames the request: the matched path's own cost), with-remedy,
    /// with-credentials (a key set on each attempt), cache-hit, with-diagnosis,
    /// aggregate, dashboard-open (passthrough with the dashboard's live view open and
    /// reading every call), and LLM calls (a chat completion POSTed to the provider's
    /// stand-in, answered whole): llm-passthrough (no policy), llm-usage (its usage read),
    /// llm-limits (read, and counted against a token limit and a budget); LLM streams
    /// (the same call streamed unpaced, 16 content events and the usage chunk):
    /// llm-stream (no policy), llm-stream-usage (its usage read), llm-stream-limits (read
    /// and counted against the limits); and MCP tool
    /// calls (`bench mcp`'s `tools/call`): mcp-passthrough (no policy), mcp-read (each
    /// call read and judged by `mcp:`), mcp-per-tool (a policy chosen by the tool) (comma
    /// separated).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Also simulate the caches and count their misses per request: callgrind's
    /// `--cache-sim=yes` on a fixed geometry, the same on every machine (32 KiB 8-way
    /// first-level instruction and data caches, a 1 MiB 16-way last level standing for a
    /// core's private L2, 64-byte lines). What a request touches that another request's
    /// work pushed out: at many connections, each connection's state. Slower (about 2×).
    #[arg(long)]
    pub cache_sim: bool,
}

/// The cache geometry `--cache-sim` simulates (valgrind's `--I1`, `--D1`, `--LL`: size,
/// associativity, line size), fixed so that counts compare across machines.
const CACHE_GEOMETRY: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64"];

const SCENARIOS: [&str; 17] = [
    "passthrough",
    "matched",
    "with-remedy",
    "with-credentials",
    "cache-hit",
    "with-diagnosis",
    "aggregate",
    "dashboard-open",
    "llm-passthrough",
    "llm-usage",
    "llm-limits",
    "llm-stream",
    "llm-stream-usage",
    "llm-stream-limits",
    "mcp-passthrough",
    "mcp-read",
    "mcp-per-tool",
];

/// What the LLM scenarios POST: `bench llm`'s complete (non-streamed) call.
const LLM_CALL: &[u8] = crate::llm::WHOLE_CALL;

/// What the LLM stream scenarios POST: the same call streamed, its usage asked for (as
/// `bench llm`'s streams ask), unpaced.
const LLM_STREAM: &[u8] = br#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":16,"messages":[{"role":"user","content":"Say hello to the benchmark."}]}"#;

/// One target's count over the measured requests.
#[derive(Debug)]
pub struct Count {
    pub target: String,
    pub requests: u64,
    pub instructions: u64,
    /// Instructions of their own per function, most first.
    pub functions: Vec<(String, u64)>,
    pub failed: u64,
    /// HAR entries written and dropped (queue full) while counted, when capture is on.
    pub har: Option<(u64, u64)>,
    /// Client connections each worker accepted (tollgate with several workers).
    pub per_worker: Vec<u64>,
    /// The simulated caches' misses (`--cache-sim`).
    pub misses: Option<Misses>,
}

/// Simulated cache misses over the measured requests (callgrind's events `I1mr`, `D1mr`
/// + `D1mw`, `DLmr` + `DLmw`).
#[derive(Debug, PartialEq)]
pub struct Misses {
    pub l1_instructions: u64,
    pub l1_data: u64,
    pub last_level_data: u64,
    /// Last-level data misses of each function's own, most first.
    pub functions: Vec<(String, u64)>,
}

impl Misses {
    /// Read from a callgrind file made with `--cache-sim=yes`; `None` without those events.
    pub fn read(text: &str) -> Option<Misses> {
        let events = events(text);
        let total =
            |names: &[&str]| -> Option<u64> { names.iter().map(|n| events.get(*n).copied()).sum() };
        Some(Misses {
            l1_instructions: total(&["I1mr"])?,
            l1_data: total(&["D1mr", "D1mw"])?,
            last_level_data: total(&["DLmr", "DLmw"])?,
            functions: functions_by(text, &["DLmr", "DLmw"]),
        })
    }
}

impl Count {
    pub fn per_request(&self) -> f64 {
        self.instructions as f64 / self.requests.max(1) as f64
    }

    /// Instructions per origin (tollgate, hyper, tokio, the allocator, …), most first.
    pub fn by_origin(&self) -> Vec<(&'static str, u64)> {
        let mut m: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (f, ir) in &self.functions {
            *m.entry(origin(f)).or_default() += ir;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|b| std::cmp::Reverse(b.1));
        v
    }
}

/// Where a function's code comes from: the crate of a Rust path, the allocator, libc's
/// string and memory routines, or nginx.
pub fn origin(function: &str) -> &'static str {
    const ALLOC: &[&str] = &[
        "malloc",
        "free",
        "realloc",
        "calloc",
        "cfree",
        "_int_malloc",
        "_int_free",
        "_int_realloc",
        "malloc_consolidate",
        "unlink_chunk",
        "tcache_get",
        "tcache_put",
        "__rust_alloc",
        "__rust_dealloc",
        "__rust_realloc",
        "__libc_malloc",
        "__libc_free",
        "__libc_calloc",
        "__libc_realloc",
        "__posix_memalign",
        "posix_memalign",
        "_mid_memalign",
        "_int_memalign",
        "aligned_alloc",
    ];
    let name = function.trim_start_matches('<');
    let head = name.split("::").next().unwrap_or(name);
    let head = head.split(['<', ' ', '(']).next().unwrap_or(head);
    // glibc's functions by name, mimalloc's (the tollgate binary's) by prefix.
    if ALLOC.contains(&head) || head.starts_with("mi_") || head.starts_with("_mi_") {
        return "allocator";
    }
    if !name.contains("::") {
        return if head.starts_with("ngx_") {
            "nginx"
        } else if head.starts_with("mem") || head.starts_with("str") || head.starts_with("__mem") {
            "libc (mem/str)"
        } else {
            "other C"
        };
    }
    match head {
        "tollgate" => "tollgate",
        "hyper" => "hyper",
        "hyper_util" => "hyper-util",
        "tokio" => "tokio",
        "mio" => "mio",
        "http" => "http",
        "bytes" => "bytes",
        "httparse" => "httparse",
        "core" | "alloc" | "std" => "std",
        "tracing" | "tracing_core" => "tracing",
        "moka" => "moka",
        "prometheus_client" => "prometheus-client",
        "tollgate_bench" => "tollgate (bench floor)",
        _ => "other Rust",
    }
}

pub fn run(args: InstructionsArgs) -> Result<(), String> {
    let c = &args.common;
    let missing: Vec<&str> = ["valgrind", "callgrind_control"]
        .into_iter()
        .filter(|b| on_path(b).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} not on PATH: install valgrind (Debian: apt-get install valgrind)",
            missing.join(", ")
        ));
    }
    let scenarios: Vec<String> = if args.scenarios.is_empty() {
        SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        args.scenarios.clone()
    };
    if let Some(bad) = scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        return Err(format!(
            "unknown scenario `{bad}`: use {}",
            SCENARIOS.join(", ")
        ));
    }
    let peers: Vec<Peer> = if c.peers.is_empty() {
        vec![Peer::Hyper, Peer::Nginx, Peer::Haproxy]
    } else {
        c.peers()?
    };
    let requests = args
        .requests
        .unwrap_or(if c.quick { 4_000 } else { 20_000 });
    let warmup = c.warmup.unwrap_or(if c.quick { 1_000 } else { 2_000 });
    let conns = args.connections.max(1);
    let workers = c.threads.max(1);
    let load_before = machine::loadavg();

    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, Placement::new(Layout::None))?;
    h.tool = vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        "-q".into(),
        OsString::from(format!(
            "--callgrind-out-file={}",
            h.out.join("callgrind.%p.out").display()
        )),
    ];
    if args.cache_sim {
        h.tool.push("--cache-sim=yes".into());
        h.tool.extend(CACHE_GEOMETRY.map(OsString::from));
    }
    let spec = Spec {
        requests,
        warmup,
        conns,
        workers,
    };
    let mut counts = Vec::new();
    for name in &scenarios {
        let (target, request) = scenario(&mut h, name, workers)?;
        // The dashboard's live view, open while the requests are counted.
        let view = match name.as_str() {
            "dashboard-open" => Some(crate::live_view::LiveView::open(
                target.admin.ok_or("dashboard-open: no admin address")?,
            )?),
            _ => None,
        };
        let mut count = spec.count(&h, &target, &request)?;
        if workers > 1 {
            count.per_worker = connections_per_worker(&target, workers);
        }
        counts.push(count);
        if let Some(v) = view {
            h.lines.push(format!(
                "dashboard-open: its live view received {} calls",
                v.calls()
            ));
        }
    }
    for peer in peers {
        // Under valgrind nginx runs without its master, as one process: one worker.
        if peer == Peer::Nginx && workers > 1 {
            h.lines.push(format!(
                "nginx: skipped: under callgrind it runs as one process, and {workers} workers were asked for"
            ));
            continue;
        }
        if let Ok(target) = h.peer(peer, workers) {
            counts.push(spec.count(&h, &target, &Shape::get("/static"))?);
        }
    }
    for l in &h.lines {
        eprintln!("{l}");
    }

    let summary = summary(&counts, &spec, &h.measured, args.top);
    print!("{summary}");
    report::write(&h.out, "summary.md", &summary)?;
    let meta = machine::metadata("instructions", &std::env::args().collect::<Vec<_>>());
    let files: Vec<String> = std::iter::once("summary.md".to_owned())
        .chain(counts.iter().map(|c| dump_name(&c.target)))
        .collect();
    report::write_metadata(
        &h.out,
        meta,
        &h.lines,
        (&load_before, &machine::loadavg()),
        &files,
    )?;
    Ok(())
}

/// The requests a target is counted on: a GET of `path`, or a POST of `body` as JSON.
struct Shape {
    path: String,
    body: Option<bytes::Bytes>,
    /// Every call is captured as a HAR entry: the count waits for the writer.
    captured: bool,
}

impl Shape {
    fn get(path: &str) -> Self {
        Shape {
            path: path.into(),
            body: None,
            captured: false,
        }
    }
}

/// A built-in scenario's tollgate process and the requests it is counted on.
fn scenario(h: &mut Harness, name: &str, workers: usize) -> Result<(Target, Shape), String> {
    let config = match name {
        "passthrough" | "dashboard-open" => h.passthrough_config()?,
        "with-remedy" => h.with_remedy_config()?,
        "matched" => h.matched_config()?,
        "with-credentials" => h.with_credentials_config()?,
        "cache-hit" => h.cache_hit_config()?,
        "with-diagnosis" => h.with_diagnosis_config()?,
        "llm-passthrough" | "llm-usage" | "llm-limits" | "llm-stream" | "llm-stream-usage"
        | "llm-stream-limits" => {
            let file = format!("{name}.yaml");
            let config = match name {
                "llm-passthrough" | "llm-stream" => crate::llm::PASSTHROUGH,
                "llm-usage" | "llm-stream-usage" => crate::llm::USAGE,
                _ => crate::llm::LIMITS,
            };
            report::write(&h.out, &file, config)?;
            let target = h.tollgate(name, &h.out.join(&file), workers)?;
            let body = match name.starts_with("llm-stream") {
                true => LLM_STREAM,
                false => LLM_CALL,
            };
            let call = Shape {
                path: "/v1/chat/completions".into(),
                body: Some(bytes::Bytes::from_static(body)),
                captured: false,
            };
            return Ok((target, call));
        }
        "mcp-passthrough" | "mcp-read" | "mcp-per-tool" => {
            let file = format!("{name}.yaml");
            let policies = match name {
                "mcp-passthrough" => "",
                "mcp-read" => crate::mcp::READ,
                _ => crate::mcp::PER_TOOL,
            };
            let config = format!(
                "routes:\n  - prefix: /\n    upstream: ${{TOLLGATE_BENCH_PROVIDER}}\nlog:\n  level: warn\n{policies}"
            );
            report::write(&h.out, &file, &config)?;
            let mut target = h.tollgate(name, &h.out.join(&file), workers)?;
            target.headers = crate::mcp::headers();
            let call = Shape {
                path: crate::mcp::PATH.into(),
                body: Some(bytes::Bytes::from_static(crate::mcp::CALL.as_bytes())),
                captured: false,
            };
            return Ok((target, call));
        }
        _ => {
            let eps = aggregate::endpoints(&[Duration::ZERO; 3]);
            report::write(&h.out, "aggregate.yaml", &lura::tollgate_config(&eps))?;
            let target = h.tollgate(name, &h.out.join("aggregate.yaml"), workers)?;
            return Ok((target, Shape::get("/social")));
        }
    };
    let shape = Shape {
        captured: name == "with-diagnosis",
        ..Shape::get("/static")
    };
    Ok((h.tollgate(name, &config, workers)?, shape))
}

struct Spec {
    requests: u64,
    warmup: u64,
    conns: usize,
    /// Workers of tollgate and of each peer.
    workers: usize,
}

impl Spec {
    /// Warms `t` up, zeroes its counters, sends the measured requests and dumps them.
    fn count(&self, h: &Harness, t: &Target, shape: &Shape) -> Result<Count, String> {
        let pid = t.pid().ok_or("the target has no process")?;
        eprintln!(
            "{}: warm-up ({} requests), then {} counted, under callgrind",
            t.name, self.warmup, self.requests
        );
        let send = |n| match &shape.body {
            None => h.measure(t, &shape.path, n, 0, self.conns, Mode::Closed),
            Some(b) => h.measure_post(t, (&shape.path, b), n, self.conns),
        };
        let earlier = t.har_counts().filter(|_| shape.captured);
        let warmup = send(self.warmup.max(1))?;
        // The warm-up's entries are written before the count starts, so that the count
        // holds the measured requests' entries and no others.
        if let Some((e, d)) = earlier {
            settle(t, e + d + warmup.ok + warmup.non_2xx);
        }
        let har_before = t.har_counts().filter(|_| shape.captured);
        control(pid, "-z")?;
        let r = send(self.requests)?;
        if let Some((e, d)) = har_before {
            settle(t, e + d + r.ok + r.non_2xx);
        }
        control(pid, "-d")?;
        // An entry dropped is an entry not built: its instructions are not in the count.
        let har = har_before
            .zip(t.har_counts())
            .map(|((e0, d0), (e1, d1))| (e1.saturating_sub(e0), d1.saturating_sub(d0)))
            .filter(|(e, d)| e + d > 0);
        let dumped = h.out.join(format!("callgrind.{pid}.out.1"));
        wait_for(&dumped, Duration::from_secs(60))?;
        let kept = h.out.join(dump_name(&t.name));
        std::fs::rename(&dumped, &kept).map_err(|e| format!("{}: {e}", dumped.display()))?;
        let text = std::fs::read_to_string(&kept)
            .map_err(|e| format!("cannot read {}: {e}", kept.display()))?;
        let instructions =
            totals(&text).ok_or_else(|| format!("{}: no totals line", kept.display()))?;
        Ok(Count {
            target: t.name.clone(),
            requests: r.ok + r.non_2xx,
            instructions,
            functions: functions(&text),
            failed: r.errors + r.non_2xx,
            har,
            per_worker: Vec::new(),
            misses: Misses::read(&text),
        })
    }
}

/// How the kernel spread a tollgate target's client connections over its workers (its
/// `tollgate_worker_connections_accepted`): a count made by one worker of two says little.
fn connections_per_worker(t: &Target, workers: usize) -> Vec<u64> {
    let Some(text) = t.metrics() else {
        return Vec::new();
    };
    (0..workers)
        .map(|i| {
            let name = format!("tollgate_worker_connections_accepted_total{{worker=\"{i}\"}}");
            crate::harness::counter(&text, &name).unwrap_or(0)
        })
        .collect()
}

fn dump_name(target: &str) -> String {
    format!("callgrind.{target}.out")
}

/// Waits until the HAR writer has written or dropped `calls` entries in all, so that
/// building the last requests' entries falls inside the count; at most 60 s (the summary
/// says how many were written while counted).
fn settle(t: &Target, calls: u64) {
    for _ in 0..600 {
        match t.har_counts() {
            Some((e, d)) if e + d < calls => std::thread::sleep(Duration::from_millis(100)),
            _ => return,
        }
    }
}

/// `callgrind_control -z` (zero) or `-d` (dump) to the process `pid`.
fn control(pid: u32, what: &str) -> Result<(), String> {
    let out = Command::new("callgrind_control")
        .arg(what)
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && text.contains("OK") {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {what} {pid} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn wait_for(file: &Path, within: Duration) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < within {
        if std::fs::metadata(file).is_ok_and(|m| m.len() > 0) {
            // callgrind writes the file in one go once the dump starts; give it a moment.
            std::thread::sleep(Duration::from_millis(300));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "no callgrind dump at {} after {within:?}",
        file.display()
    ))
}

/// The instructions on the `totals:` line of a callgrind file (its first event).
pub fn totals(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("totals:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Each event's total, by the names on the `events:` line, from the `totals:` line.
fn events(text: &str) -> BTreeMap<String, u64> {
    let line = |prefix: &str| text.lines().find_map(|l| l.strip_prefix(prefix));
    let (Some(names), Some(values)) = (line("events:"), line("totals:")) else {
        return BTreeMap::new();
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .filter_map(|(n, v)| Some((n.to_owned(), v.parse().ok()?)))
        .collect()
}

/// Each function's own instructions (its cost lines, not the inclusive cost of the calls
/// it makes), most first, read from a callgrind file (its format: valgrind's manual,
/// "Callgrind Format Specification"). Names are compressed: `fn=(7) name` defines `(7)`,
/// a later `fn=(7)` or `cfn=(7)` refers to it.
pub fn functions(text: &str) -> Vec<(String, u64)> {
    functions_by(text, &["Ir"])
}

/// [`functions`] for the sum of the named events (columns of the `events:` line; an
/// event the file does not have counts nothing; without that line, its first column).
fn functions_by(text: &str, wanted: &[&str]) -> Vec<(String, u64)> {
    let columns: Vec<usize> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .map(|names| {
            let names: Vec<&str> = names.split_whitespace().collect();
            wanted
                .iter()
                .filter_map(|w| names.iter().position(|n| n == w))
                .collect()
        })
        .unwrap_or_else(|| vec![0]);
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut own: BTreeMap<String, u64> = BTreeMap::new();
    let mut positions = 1;
    let mut current = String::new();
    let mut after_calls = false;
    let mut name_of = |spec: &str| -> String {
        let spec = spec.trim();
        match spec.strip_prefix('(').and_then(|r| r.split_once(')')) {
            Some((id, rest)) => {
                let rest = rest.trim();
                if !rest.is_empty() {
                    names.insert(id.to_owned(), rest.to_owned());
                }
                names.get(id).cloned().unwrap_or_else(|| format!("({id})"))
            }
            None => spec.to_owned(),
        }
    };
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("positions:") {
            positions = p.split_whitespace().count().max(1);
        } else if let Some(f) = line.strip_prefix("fn=") {
            current = name_of(f);
        } else if let Some(f) = line.strip_prefix("cfn=") {
            name_of(f);
        } else if line.starts_with("calls=") {
            after_calls = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut after_calls) {
                continue; // the inclusive cost of the call just named
            }
            // A cost line may leave out trailing zero events.
            let cost: u64 = line
                .split_whitespace()
                .skip(positions)
                .enumerate()
                .filter(|(i, _)| columns.contains(i))
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum();
            *own.entry(current.clone()).or_default() += cost;
        }
    }
    let mut v: Vec<_> = own.into_iter().filter(|(_, ir)| *ir > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn summary(counts: &[Count], spec: &Spec, measured: &str, top: usize) -> String {
    let per = |name: &str| {
        counts
            .iter()
            .find(|c| c.target == name)
            .map(Count::per_request)
    };
    let floor = per("hyper");
    let nginx = per("nginx");
    let ratio =
        |v: f64, base: Option<f64>| base.map(|b| format!("{:.2}", v / b)).unwrap_or_default();
    let mut s = String::from("# Instructions per request (callgrind)\n\n");
    let _ = writeln!(
        s,
        "{} ({} cores), {measured} (the bench: commit {}); {} requests counted per target after {} of warm-up, {} keep-alive connections, closed loop, {}; the provider's 110-byte `/static` (the aggregate: `/social`, three backend calls; the LLM scenarios: a chat completion POSTed to the stand-in).\n",
        machine::cpu_model(),
        machine::cores(),
        machine::git_commit(),
        spec.requests,
        spec.warmup,
        spec.conns,
        match spec.workers {
            1 => "one worker".to_owned(),
            n => format!("{n} workers each (threads run one at a time under valgrind)"),
        }
    );
    s.push_str("| target | instructions/request | × hyper floor | × nginx | failed |\n|---|---:|---:|---:|---:|\n");
    for c in counts {
        let v = c.per_request();
        let _ = writeln!(
            s,
            "| {} | {:.0} | {} | {} | {} |",
            c.target,
            v,
            ratio(v, floor),
            ratio(v, nginx),
            c.failed
        );
    }
    // LLM calls, LLM streams and MCP tool calls, each against its own passthrough: the
    // same POST.
    let families: [(&str, &[&str], &str); 3] = [
        (
            "llm-passthrough",
            &["llm-usage", "llm-limits"],
            "LLM calls (`bench llm`'s complete chat completion",
        ),
        (
            "llm-stream",
            &["llm-stream-usage", "llm-stream-limits"],
            "LLM streams (the call streamed, 16 content events and the usage chunk",
        ),
        (
            "mcp-passthrough",
            &["mcp-read", "mcp-per-tool"],
            "MCP tool calls (`bench mcp`'s `tools/call`",
        ),
    ];
    for (base_name, others, what) in families {
        let Some(base) = per(base_name) else { continue };
        let each: Vec<String> = others
            .iter()
            .filter_map(|n| per(n).map(|v| format!("{n} {:.2}× (+{:.0})", v / base, v - base)))
            .collect();
        if !each.is_empty() {
            let _ = writeln!(
                s,
                "\n{what}, {base:.0} instructions through the passthrough) ÷ {base_name}: {}.",
                each.join(", ")
            );
        }
    }
    for c in counts.iter().filter(|c| !c.per_worker.is_empty()) {
        let each: Vec<String> = c.per_worker.iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "\n{}: client connections accepted per worker (warm-up and counted): {}",
            c.target,
            each.join(" / ")
        );
    }
    for c in counts {
        if let Some((written, dropped)) = c.har {
            let _ = writeln!(
                s,
                "\n{}: {written} HAR entries written while counted, {dropped} dropped (writer queue full; a dropped entry is not built, so its cost is not in the count){}",
                c.target,
                if dropped > 0 {
                    " **: compare with a run without drops (fewer `--requests`)**"
                } else {
                    ""
                }
            );
        }
    }
    if counts.iter().any(|c| c.misses.is_some()) {
        cache_misses(&mut s, counts);
    }
    s.push_str("\n## Where they go\n");
    for c in counts {
        let total = c.instructions.max(1) as f64;
        let n = c.requests.max(1) as f64;
        let origins: Vec<String> = c
            .by_origin()
            .into_iter()
            .take(8)
            .map(|(o, ir)| format!("{o} {:.0}%", ir as f64 * 100.0 / total))
            .collect();
        let _ = writeln!(
            s,
            "\n### {}\n\nBy origin: {}.\n",
            c.target,
            origins.join(", ")
        );
        s.push_str("| function | instructions/request | share |\n|---|---:|---:|\n");
        for (f, ir) in c.functions.iter().take(top) {
            let _ = writeln!(
                s,
                "| `{}` | {:.0} | {:.1}% |",
                short(f),
                *ir as f64 / n,
                *ir as f64 * 100.0 / total
            );
        }
    }
    s
}

/// The simulated caches' misses per request, and the functions whose data accesses
/// missed the last level most.
fn cache_misses(s: &mut String, counts: &[Count]) {
    let _ = writeln!(
        s,
        "\n## Cache misses per request (simulated: {})\n",
        CACHE_GEOMETRY.join(" ")
    );
    s.push_str("| target | L1 instruction | L1 data | last level, data |\n|---|---:|---:|---:|\n");
    for c in counts {
        if let Some(m) = &c.misses {
            let n = c.requests.max(1) as f64;
            let _ = writeln!(
                s,
                "| {} | {:.1} | {:.1} | {:.1} |",
                c.target,
                m.l1_instructions as f64 / n,
                m.l1_data as f64 / n,
                m.last_level_data as f64 / n
            );
        }
    }
    for c in counts {
        let Some(m) = &c.misses else { continue };
        let n = c.requests.max(1) as f64;
        let top: Vec<String> = m
            .functions
            .iter()
            .take(6)
            .map(|(f, v)| format!("`{}` {:.1}", short(f), *v as f64 / n))
            .collect();
        let _ = writeln!(
            s,
            "\n{}: last-level data misses per request by function: {}.",
            c.target,
            top.join(", ")
        );
    }
}

/// A function's name cut to 110 characters, for a table.
fn short(f: &str) -> String {
    let shown: String = if f.chars().count() > 110 {
        f.chars().take(107).chain("...".chars()).collect()
    } else {
        f.to_owned()
    };
    shown.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_own_costs_are_read_from_callgrind_files() {
        assert_eq!(
            totals("events: Ir sysCount sysTime\nsummary: 9 2 1\ntotals: 567000 175 105\n"),
            Some(567000)
        );
        assert_eq!(totals("events: Ir\ntotals: 12\n"), Some(12));
        let dump = "\
events: Ir sysCount sysTime
positions: line
ob=(3) /usr/lib/libc.so.6
fl=(194) ./malloc/malloc.c
fn=(1000) _int_malloc
264 1000
+6 500 1 3

fl=(588) ./nptl/pthread_create.c
fn=(5172) start_thread
cfn=(5176) <std::sys::thread::unix::Thread>::new::thread_start
calls=0 108
442 117622527 46523 3170

fl=(12) src/role.rs
fn=(7) hyper::proto::h1::role::parse
1 33184
fi=(13) src/iter.rs
2 2000
fn=(1000)
7 100
fn=(5176)
3 10
";
        let f = functions(dump);
        assert_eq!(
            f[0],
            ("hyper::proto::h1::role::parse".to_owned(), 35_184),
            "inlined files count as the function"
        );
        assert_eq!(
            f[1],
            ("_int_malloc".to_owned(), 1_600),
            "a name used again by its number"
        );
        assert_eq!(
            f[2],
            (
                "<std::sys::thread::unix::Thread>::new::thread_start".to_owned(),
                10
            ),
            "a name defined by cfn; the inclusive cost after calls= is not its caller's own"
        );
        assert_eq!(f.len(), 3, "{f:?}");
        let c = Count {
            target: "t".into(),
            requests: 10,
            instructions: 36_794,
            functions: f,
            failed: 0,
            har: None,
            per_worker: Vec::new(),
            misses: Misses::read(dump),
        };
        assert_eq!(c.misses, None, "no cache events, no misses");
        assert_eq!(c.by_origin()[0], ("hyper", 35_184));
        assert_eq!(c.by_origin()[1], ("allocator", 1_600));
        assert_eq!(c.by_origin()[2], ("std", 10));
    }

    #[test]
    fn simulated_cache_misses_are_read_by_event_name() {
        let dump = "\
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
positions: line
fl=(1) src/a.rs
fn=(1) a::hot
10 100 40 20 5 3 2 1 7 6
+1 50 10 10 1 1 1
fn=(2) b::cold
cfn=(1)
calls=1 10
10 150 50 30 6 4 3 1 7 6
20 30 5 5 0 2 2 0 9 1
totals: 180 55 35 6 6 5 1 16 7
";
        let m = Misses::read(dump).expect("cache events");
        assert_eq!(m.l1_instructions, 6);
        assert_eq!(m.l1_data, 11, "reads and writes");
        assert_eq!(m.last_level_data, 23);
        assert_eq!(
            m.functions,
            vec![("a::hot".to_owned(), 13), ("b::cold".to_owned(), 10)],
            "a short cost line counts its events present; a call's inclusive cost is not the caller's own"
        );
        assert_eq!(functions(dump)[0], ("a::hot".to_owned(), 150));
        assert_eq!(
            functions("fn=(1) a\n1 5 2\n")[0],
            ("a".to_owned(), 5),
            "without an events line, the first column"
        );
        let c = Count {
            target: "with-remedy".into(),
            requests: 2,
            instructions: 180,
            functions: functions(dump),
            failed: 0,
            har: None,
            per_worker: Vec::new(),
            misses: Some(m),
        };
        let mut s = String::new();
        cache_misses(&mut s, &[c]);
        assert!(s.contains("| with-remedy | 3.0 | 5.5 | 11.5 |"), "{s}");
        assert!(s.contains("`a::hot` 6.5, `b::cold` 5.0"), "{s}");
    }

    #[test]
    fn origins_name_crates_the_allocator_and_c() {
        assert_eq!(
            origin("<tokio::runtime::task::raw::RawTask>::poll"),
            "tokio"
        );
        assert_eq!(origin("tollgate::request::handle"), "tollgate");
        assert_eq!(
            origin("core::ptr::drop_in_place<http::header::map::HeaderMap>"),
            "std"
        );
        assert_eq!(origin("__memcpy_avx_unaligned_erms"), "libc (mem/str)");
        assert_eq!(origin("free"), "allocator");
        assert_eq!(origin("mi_free"), "allocator");
        assert_eq!(origin("_mi_malloc_generic"), "allocator");
        assert_eq!(origin("ngx_http_parse_request_line"), "nginx");
    }
}
