//! The `tollgate` binary: the command line over the gateway library (`tollgate`), the
//! provider emulator (`tollgate-provider`) and, with the default `bench` feature, the
//! benchmarks (`tollgate-bench`).
#![forbid(unsafe_code)]

mod ca;
mod cli;
mod client;
mod generate;
mod har;

/// mimalloc rather than glibc's allocator (measured in docs/benchmarks.md, #24): a
/// request's short-lived allocations cost fewer instructions, and the worker threads'
/// heaps are not trimmed and faulted back in under load. Its v2 (the crate's `v2`
/// feature), not v3: Rust passes every allocation's alignment, and v3's aligned path
/// over-allocates any block above 1 KiB whose size is not a power of two
/// (`mi_malloc_is_naturally_aligned` in its `alloc-aligned.c`), such as a matched
/// request's boxed futures and hyper's read buffers; v2 serves alignments up to 16 from
/// its plain size classes (−370 to −760 instructions per request, #40).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// The commit the binary was built from (build.rs), also in `--version`.
#[cfg(feature = "bench")]
const COMMIT: &str = env!("TOLLGATE_GIT_COMMIT");
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TOLLGATE_GIT_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version = VERSION,
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
    /// Print the shell completion script (`tollgate completions bash >
    /// /etc/bash_completion.d/tollgate`; zsh, fish, elvish, powershell too).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page, or write a page per command into DIR (`--dir
    /// /usr/local/share/man/man1`).
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    match Cli::parse().command {
        Top::Core(c) => cli::dispatch(c),
        #[cfg(feature = "bench")]
        Top::Bench(b) => tollgate_bench::main(b, COMMIT),
        Top::Completions { shell } => generate::completions::<Cli>(shell),
        Top::Man { dir } => generate::man::<Cli>(dir.as_deref()),
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
