//! The `tollgate` binary: everything lives in the library (`tollgate::cli`).
#![forbid(unsafe_code)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tollgate::cli::main()
}
