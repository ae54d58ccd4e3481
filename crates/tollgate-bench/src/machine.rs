//! Facts about the machine and the run, for `metadata.json` and the honesty lines.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A warning when the 1-minute load average is at least half the cores before a run:
/// other work competes for the CPUs, so the numbers come out low and noisy.
pub fn busy(load: &str) -> Option<String> {
    let one: f64 = load.split_whitespace().next()?.parse().ok()?;
    let n = cores() as f64;
    (one >= n / 2.0).then(|| {
        format!("the load average was {one:.2} on {n} cores before the run: other work competes for the CPUs, so the numbers may be low and noisy")
    })
}

/// The commit the binary was built from, as its build script recorded it (the
/// binary's crate sets it through [`crate::main`]).
pub fn git_commit() -> String {
    COMMIT.get().copied().unwrap_or("unknown").to_owned()
}

pub(crate) static COMMIT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

pub fn file_hash(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => format!("sha256:{:x}", Sha256::digest(&bytes)),
        Err(_) => "unreadable".into(),
    }
}

pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The common part of `metadata.json`.
pub fn metadata(command: &str, args: &[String]) -> Value {
    json!({
        "command": command,
        "date": now(),
        "tollgate_version": env!("CARGO_PKG_VERSION"),
        "git_commit": git_commit(),
        "cpu_model": cpu_model(),
        "cpu_count": cores(),
        "kernel": kernel(),
        "args": args,
    })
}
