//! `tollgate bench`: the latency-footprint and capacity benchmarks, built in, with charts
//! and peers (nginx, HAProxy) measured in the same run. Kept in its own crate so the
//! proxy builds and tests without plotting and load-generation dependencies.
#![forbid(unsafe_code)]

pub mod aggregate;
pub mod cache;
pub mod capacity;
pub mod charts;
pub mod correlation;
pub mod counters;
pub mod floor;
pub mod harness;
pub mod https;
pub mod instructions;
pub mod latency;
pub mod live_view;
pub mod llm;
pub mod loadgen;
pub mod lura;
pub mod machine;
pub mod mcp;
pub mod peers;
pub mod procs;
pub mod profile;
pub mod redis;
pub mod report;
pub mod rounds;
pub mod stats;

use harness::{Layout, Placement};
use peers::Peer;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Latency footprint per percentile: direct vs tollgate scenarios (and peers), with charts.
    Latency(latency::LatencyArgs),
    /// Does the footprint depend on the provider's response time? One delta line per delay.
    Correlation(correlation::CorrelationArgs),
    /// Requests per second on a tiny body at several concurrencies and thread counts.
    Capacity(capacity::CapacityArgs),
    /// KrakenD's benchmark: a proxy and an aggregate endpoint, tollgate against a gateway
    /// built on KrakenD's framework (Lura), capacity and latency.
    Aggregate(aggregate::AggregateArgs),
    /// HTTPS as `HTTPS_PROXY` clients use it: keep-alive requests through a decrypted
    /// tunnel (interception) against a plain tunnel, the provider straight and mitmproxy;
    /// the CPU of a new connection and of a leaf certificate.
    Https(https::HttpsArgs),
    /// LLM calls: time to first and last event of a stream through tollgate (usage read,
    /// a token limit and a budget on) against direct and against LLM gateways (LiteLLM,
    /// Bifrost) where they install; capacity with usage read against the passthrough.
    Llm(llm::LlmArgs),
    /// A rate limit counted on Redis (`store.backend: redis`, exact and in blocks) against
    /// the same limit in memory: the footprint beside Redis's own round trip, and
    /// requests per second on one core.
    Redis(redis::RedisArgs),
    /// The cache shared on Redis (`cache: {store: shared}`) against the cache in memory
    /// and the passthrough: the footprint, requests per second on one core, and the
    /// provider calls N replicas make for the same keys.
    Cache(cache::CacheArgs),
    /// MCP tool calls: `tools/call` through tollgate's passthrough, reading each call, and
    /// with a per-tool policy, against direct: the footprint and requests per second.
    Mcp(mcp::McpArgs),
    /// Instructions per request under valgrind's callgrind: tollgate's scenarios beside the
    /// hyper floor, nginx and HAProxy, with the functions they go to (machine-independent).
    Instructions(instructions::InstructionsArgs),
    /// The `hyper` peer's process: the thinnest proxy hyper can build (started by the bench).
    #[command(hide = true)]
    HyperFloor(floor::FloorArgs),
}

/// A footprint beside a capacity run, as `bench https` and `bench redis` measure them.
#[derive(Debug, clap::Args)]
pub struct MixArgs {
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
}

impl MixArgs {
    /// The requests per target asked for, or the default for a full or a quick run.
    pub fn requests(&self, quick: bool) -> u64 {
        self.requests.unwrap_or(if quick { 6_000 } else { 30_000 })
    }
}

/// Options every bench command takes.
#[derive(Debug, clap::Args)]
pub struct CommonArgs {
    /// Output folder (created).
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Shorter run: fewer requests (see each command).
    #[arg(long)]
    pub quick: bool,
    /// Warm-up requests per target before measuring (discarded).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Rounds (at least 2); each percentile is the median over rounds. How targets share
    /// a round: see `--interleave` (latency, correlation); capacity measures them one
    /// after another (A B A B …).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Peers to measure in the same run: `nginx` and `haproxy` (when on PATH),
    /// `haproxy-tcp` (a layer-4 relay: the floor of one more hop) and `hyper` (the
    /// thinnest proxy tollgate's HTTP library can build: the floor of its stack)
    /// (repeatable).
    #[arg(long = "peer")]
    pub peers: Vec<String>,
    /// tollgate worker threads (and peer workers).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Where processes run: `shared` (provider and proxy on core 0, load generator on
    /// the last core), `sidecar` (provider alone on core 0, proxy on the load generator's
    /// core), `dedicated` (capacity only: proxy, provider and load generator each on
    /// cores of their own, the last two multi-threaded) or `none` (unpinned). Default:
    /// `shared`.
    #[arg(long, value_enum)]
    pub placement: Option<Layout>,
    /// Do not pin processes to cores (same as `--placement none`).
    #[arg(long)]
    pub no_pin: bool,
    /// The tollgate binary to run (default: this one).
    #[arg(long)]
    pub tollgate_bin: Option<PathBuf>,
}

impl CommonArgs {
    /// The layout asked for, or `default`.
    pub fn layout(&self, default: Layout) -> Layout {
        if self.no_pin {
            Layout::None
        } else {
            self.placement.unwrap_or(default)
        }
    }

    /// The placement asked for, or `default`; `dedicated` is refused (only `bench
    /// capacity` plans it, for its core counts).
    pub fn placement(&self, default: Layout) -> Result<Placement, String> {
        match self.layout(default) {
            Layout::Dedicated => Err(
                "--placement dedicated is for `tollgate bench capacity` (it needs the proxy's core counts); use shared, sidecar or none here".into(),
            ),
            layout => Ok(Placement::new(layout)),
        }
    }

    pub fn peers(&self) -> Result<Vec<Peer>, String> {
        self.peers.iter().map(|p| Peer::parse(p)).collect()
    }
}

/// Runs a benchmark; `commit` is the binary's (recorded in each run's metadata).
pub fn main(cmd: BenchCommand, commit: &'static str) -> ExitCode {
    let _ = machine::COMMIT.set(commit);
    procs::stop_on_signals();
    let result = match cmd {
        BenchCommand::Latency(a) => latency::run(a),
        BenchCommand::Correlation(a) => correlation::run(a),
        BenchCommand::Capacity(a) => capacity::run(a),
        BenchCommand::Aggregate(a) => aggregate::run(a),
        BenchCommand::Instructions(a) => instructions::run(a),
        BenchCommand::Https(a) => https::run(a),
        BenchCommand::Redis(a) => redis::run(a),
        BenchCommand::Cache(a) => cache::run(a),
        BenchCommand::Llm(a) => llm::run(a),
        BenchCommand::Mcp(a) => mcp::run(a),
        BenchCommand::HyperFloor(a) => floor::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
