//! The `tollgate` binary: the core commands live in the library (`tollgate::cli`), the
//! benchmarks in `tollgate-bench`; this file only joins them.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "API egress gateway: forwards your outgoing API calls with remedies and diagnosis"
)]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Debug, Subcommand)]
enum Top {
    #[command(flatten)]
    Core(tollgate::cli::Command),
    /// Benchmarks: latency footprint per percentile, correlation with provider delay, capacity.
    #[command(subcommand)]
    Bench(tollgate_bench::BenchCommand),
}

fn main() -> std::process::ExitCode {
    match Cli::parse().command {
        Top::Core(c) => tollgate::cli::dispatch(c),
        Top::Bench(b) => tollgate_bench::main(b),
    }
}
