//! Hardware counters of a target while it is measured (`perf stat -p`), where the machine
//! exposes them: cycles and instructions per request. Across core counts they tell
//! contention apart from work: when the instructions per request stay flat and the cycles
//! grow, the cores wait on something they share (a cache line two cores write, a lock).
//! Many virtual machines expose no counters; then the run says so, and CPU time per
//! request by core count is the measure left.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Whether `perf stat` can count cycles and instructions here: why not, when not.
pub fn available() -> Result<(), String> {
    static CHECKED: LazyLock<Result<(), String>> = LazyLock::new(|| {
        let out = Command::new("perf")
            .args(["stat", "-x,", "-e", "cycles,instructions", "true"])
            .stdout(Stdio::null())
            .output()
            .map_err(|_| "perf is not installed (linux-perf)".to_string())?;
        let text = String::from_utf8_lossy(&out.stderr);
        match parse(&text) {
            Some(_) => Ok(()),
            None if text.contains("<not supported>") => Err(
                "this machine exposes no hardware counters (perf stat: cycles <not supported>)"
                    .into(),
            ),
            None => Err(format!(
                "perf stat cannot count here: {}",
                text.lines().next().unwrap_or("no output").trim()
            )),
        }
    });
    CHECKED.clone()
}

/// `perf stat` attached to a process, counting until [`Counting::finish`].
pub struct Counting {
    child: Child,
    out: PathBuf,
}

/// Starts counting `pid` (all its threads), when the machine can.
pub fn start(pid: u32) -> Option<Counting> {
    available().ok()?;
    static N: AtomicUsize = AtomicUsize::new(0);
    let out = std::env::temp_dir().join(format!(
        "tollgate-bench-perf-{}-{}.csv",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let child = attach(&["stat", "-x,", "-e", "cycles,instructions"], &out, pid)?;
    Some(Counting { child, out })
}

/// `perf ARGS -o OUT -p PID`, attached to `pid` (all its threads) until [`detach`].
pub(crate) fn attach(args: &[&str], out: &std::path::Path, pid: u32) -> Option<Child> {
    let child = Command::new("perf")
        .args(args)
        .arg("-o")
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // perf attaches after it starts: a moment, or the first requests go unseen.
    std::thread::sleep(std::time::Duration::from_millis(100));
    Some(child)
}

/// Stops an attached perf the way its user would (SIGINT): it writes what it has.
pub(crate) fn detach(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
    }
    let _ = child.wait();
}

impl Counting {
    /// Stops counting: the cycles and instructions counted.
    pub fn finish(mut self) -> Option<(u64, u64)> {
        detach(&mut self.child);
        let text = std::fs::read_to_string(&self.out).ok();
        let _ = std::fs::remove_file(&self.out);
        parse(&text?)
    }
}

/// Cycles and instructions from `perf stat -x,` output (`value,unit,event,…` lines; the
/// event may carry a modifier, `cycles:u`).
fn parse(text: &str) -> Option<(u64, u64)> {
    let count = |event: &str| {
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let name = f.get(2)?.split(':').next()?;
            (name == event).then(|| f[0].trim().parse::<u64>().ok())?
        })
    };
    Some((count("cycles")?, count("instructions")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_perf_stat_csv_and_unsupported_ones_are_none() {
        let out = "# started on Fri Nov 27\n\n123456789,,cycles:u,1000,100.00,,\n98765432,,instructions:u,1000,100.00,0.80,insn per cycle\n";
        assert_eq!(parse(out), Some((123_456_789, 98_765_432)));
        let vm = "<not supported>,,cycles,0,100.00,,\n<not supported>,,instructions,0,100.00,,\n";
        assert_eq!(parse(vm), None);
        assert_eq!(parse(""), None);
    }
}
