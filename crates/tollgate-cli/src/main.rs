//! The `tollgate` binary: the command line over the gateway library (`tollgate`), the
//! provider emulator (`tollgate-provider`) and, with the default `bench` feature, the
//! benchmarks (`tollgate-bench`).
#![forbid(unsafe_code)]

mod ca;
mod cli;
mod client;

/// mimalloc rather than glibc's allocator (measured in docs/benchmarks.md, #24): a
/// request's short-lived allocations cost fewer instructions, and the worker threads'
/// heaps are not trimmed and faulted back in under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Core(cli::Command),
    /// Benchmarks: latency footprint per percentile, correlation with provider delay, capacity.
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(tollgate_bench::BenchCommand),
}

fn main() -> std::process::ExitCode {
    match Cli::parse().command {
        Top::Core(c) => cli::dispatch(c),
        #[cfg(feature = "bench")]
        Top::Bench(b) => tollgate_bench::main(b),
    }
}

/// Writes a command's output to standard output. A reader that closed the pipe
/// (`tollgate schema | head`) has what it wanted: no panic, no message (`print!` panics
/// on `EPIPE`, and with `panic = "abort"` that was exit 134).
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|()| o.flush());
}
