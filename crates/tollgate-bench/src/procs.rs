//! Child processes the bench starts and stops: the provider, tollgate, nginx, HAProxy.
//! Pinned to cores with `taskset` when it is available. Each starts in a process group
//! of its own, and the whole group is killed: on drop (a run that returns or fails, after
//! a SIGTERM and up to [`GRACE`] to exit), on Ctrl-C, SIGTERM or SIGHUP
//! ([`stop_on_signals`]) and before a panic aborts, so no worker a peer forked (nginx's,
//! re-parented to init when only its master was killed) outlives the bench.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The process groups of the children alive now (each child leads its own).
static LIVE: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a child stopped at the end of its measurement has to exit on SIGTERM before
/// its group is killed. An exit of its own runs what a process does last: a build
/// instrumented for profile-guided optimisation (`scripts/pgo`) writes its profile then,
/// and a killed one writes none.
const GRACE: Duration = Duration::from_secs(5);

/// `signal` to every process of the group `pgid` leads.
fn signal_group(pgid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// SIGKILL to every process of the group `pgid` leads.
fn kill_group(pgid: u32) {
    signal_group(pgid, rustix::process::Signal::KILL);
}

/// Kills every child's group: what an interrupted or panicking bench does last.
pub fn kill_all() {
    for pgid in live().drain(..) {
        kill_group(pgid);
    }
}

/// Once per process: on SIGINT, SIGTERM or SIGHUP every child's group is killed and the
/// bench exits 128 + the signal; a panic kills them before it aborts (release builds
/// abort, so no drop runs).
pub fn stop_on_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            std::thread::spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    kill_all();
                    eprintln!(
                        "bench interrupted (signal {sig}): every process it started is stopped"
                    );
                    std::process::exit(128 + sig);
                }
            });
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            kill_all();
            previous(info);
        }));
    });
}

/// A child process, stopped (SIGTERM, then its group killed) when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
    /// Where it runs, for the report (`core 0`, `unpinned`).
    pub placement: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pgid = self.child.id();
        signal_group(pgid, rustix::process::Signal::TERM);
        self.exited_by(Instant::now() + GRACE);
        live().retain(|&p| p != pgid);
        kill_group(pgid);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// `child` was started by a command from [`command`] or [`under`]: it leads a
    /// process group of its own.
    pub fn new(name: &str, child: Child, placement: String) -> Self {
        live().push(child.id());
        Self {
            name: name.to_owned(),
            child,
            placement,
        }
    }

    /// Its exit status once it has exited, waiting for that until `until` (None: still
    /// running then, or not to be waited for).
    fn exited_by(&mut self, until: Instant) -> Option<std::process::ExitStatus> {
        loop {
            match self.child.try_wait() {
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
                Ok(status) => return status,
                Err(_) => return None,
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in KiB (Linux).
    pub fn rss_kib(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }
}

/// CPU time a process and its direct children (nginx's workers) have used so far, user
/// and kernel separately, from `/proc/PID/stat` (Linux; `None` elsewhere). The kernel
/// counts in clock ticks of 1/100 s (`USER_HZ`, fixed by its ABI for these files).
pub fn tree_cpu(pid: u32) -> Option<(Duration, Duration)> {
    fn fields(stat: &str) -> Option<(u32, u64, u64)> {
        // The command name (field 2) may hold spaces: fields are counted after its `)`.
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some((
            f.get(1)?.parse().ok()?,
            f.get(11)?.parse().ok()?,
            f.get(12)?.parse().ok()?,
        ))
    }
    let tick = |t: u64| Duration::from_millis(t * 10);
    let (_, mut user, mut sys) =
        fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(entry.path().join("stat"))
            && let Some((ppid, u, k)) = fields(&s)
            && ppid == pid
        {
            user += u;
            sys += k;
        }
    }
    Some((tick(user), tick(sys)))
}

/// What the scheduler says of a process's threads and its direct children's, from
/// `/proc/PID/task/TID/schedstat` (Linux; `None` elsewhere): finer than [`tree_cpu`]'s
/// clock ticks, for short spans (a few handshakes). Threads that have exited are no
/// longer counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sched {
    /// Time on a CPU.
    pub run: Duration,
    /// Time runnable but waiting for a CPU: from each wake-up to running, and preempted.
    pub wait: Duration,
    /// Times it was given a CPU (about one per wake-up for a thread that sleeps in
    /// `epoll_wait` between events).
    pub slices: u64,
}

impl Sched {
    /// What happened between `earlier` and this reading.
    pub fn since(&self, earlier: &Sched) -> Sched {
        Sched {
            run: self.run.saturating_sub(earlier.run),
            wait: self.wait.saturating_sub(earlier.wait),
            slices: self.slices.saturating_sub(earlier.slices),
        }
    }
}

pub fn tree_sched(pid: u32) -> Option<Sched> {
    let threads = |p: u32, into: &mut [u64; 3]| {
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
                continue;
            };
            for (sum, v) in into.iter_mut().zip(s.split_whitespace()) {
                *sum += v.parse::<u64>().unwrap_or(0);
            }
        }
    };
    std::fs::metadata(format!("/proc/{pid}/task")).ok()?;
    let mut sums = [0u64; 3];
    threads(pid, &mut sums);
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let ppid = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.get(s.rfind(')')? + 2..)?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            });
        if ppid == Some(pid) {
            threads(child, &mut sums);
        }
    }
    Some(Sched {
        run: Duration::from_nanos(sums[0]),
        wait: Duration::from_nanos(sums[1]),
        slices: sums[2],
    })
}

/// Time on a CPU of the process's threads named `name` (ASCII; the kernel keeps its first
/// 15 bytes), from their `schedstat` (Linux; `None` elsewhere or when no thread has that
/// name): one thread's load, e.g. tollgate's observer.
pub fn thread_run(pid: u32, name: &str) -> Option<Duration> {
    let kept = &name[..name.len().min(15)];
    let mut found = None;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != kept {
            continue;
        }
        let ns: u64 = std::fs::read_to_string(t.path().join("schedstat"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        *found.get_or_insert(Duration::ZERO) += Duration::from_nanos(ns);
    }
    found
}

pub fn on_path(bin: &str) -> Option<PathBuf> {
    if bin.contains('/') {
        return Path::new(bin).is_file().then(|| bin.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// `taskset -c CORES cmd …` when taskset exists and cores are given; plain `cmd`
/// otherwise. In a process group of its own (see the module's note).
pub fn command(bin: &Path, cores: Option<&str>) -> (Command, String) {
    let (mut cmd, placement) = match (cores, on_path("taskset")) {
        (Some(c), Some(taskset)) => {
            let mut cmd = Command::new(taskset);
            cmd.arg("-c").arg(c).arg(bin);
            (cmd, format!("cores {c}"))
        }
        _ => (Command::new(bin), "unpinned".into()),
    };
    grouped(&mut cmd);
    (cmd, placement)
}

/// What `bin --version` prints, run the way every child is: in a group of its own,
/// stopped with all it forked once it has answered (a wrapper script's background job
/// included), its output read from a file in `scratch` rather than a pipe, which such a
/// job would hold open. Up to 10 s.
pub fn version_of(bin: &Path, scratch: &Path) -> Result<String, String> {
    let file = scratch.join(".tollgate-version");
    let out = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut cmd = Command::new(bin);
    grouped(&mut cmd);
    cmd.arg("--version")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {} --version: {e}", bin.display()))?;
    let mut p = Proc::new("version", child, "unpinned".into());
    let status = p.exited_by(Instant::now() + Duration::from_secs(10));
    drop(p);
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    match status {
        Some(s) if s.success() && !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Some(s) => Err(format!("{} --version: {s}", bin.display())),
        None => Err(format!("{} --version did not answer", bin.display())),
    }
}

/// The child will lead a process group of its own: its group is what [`Proc`] kills,
/// and a terminal's Ctrl-C reaches the bench alone, which stops it.
fn grouped(cmd: &mut Command) {
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(cmd, 0);
}

/// `cmd` run under a tool (`valgrind --tool=callgrind …`): the tool's words, then the
/// command's program, arguments and environment. No tool: `cmd` as it was.
pub fn under(tool: &[std::ffi::OsString], cmd: Command) -> Command {
    let Some((first, rest)) = tool.split_first() else {
        return cmd;
    };
    let mut wrapped = Command::new(first);
    grouped(&mut wrapped);
    wrapped
        .args(rest)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    wrapped
}

/// Starts a tollgate subcommand and waits for the line with its `http://ADDR` (or
/// `https://ADDR`) addresses.
pub fn spawn_tollgate(
    name: &str,
    mut cmd: Command,
    placement: String,
    marker: &str,
) -> Result<(Proc, Vec<SocketAddr>), String> {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let marker = marker.to_owned();
    std::thread::spawn(move || {
        let mut sent = false;
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains(&marker) {
                let _ = tx.send(Ok(line));
                sent = true;
            } else if !sent {
                seen.push(line);
            }
        }
        if !sent {
            let _ = tx.send(Err(seen.join("\n")));
        }
    });
    let mut proc = Proc::new(name, child, placement);
    // Under valgrind a start takes seconds. A process that exits first fails at once,
    // even when something it forked keeps its stderr open.
    let started = Instant::now();
    let got = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            got => break got.map_err(|_| ()),
        }
        if let Ok(Some(status)) = proc.child.try_wait() {
            // What it printed before exiting, if the reader has it by now.
            let said = match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Err(output)) => output,
                _ => String::new(),
            };
            return Err(format!("{name} exited ({status}) before listening\n{said}"));
        }
        if started.elapsed() > Duration::from_secs(60) {
            break Err(());
        }
    };
    match got {
        Ok(Ok(line)) => {
            let addrs = line
                .split("://")
                .skip(1)
                .filter_map(|s| s.split_whitespace().next()?.parse().ok())
                .collect();
            Ok((proc, addrs))
        }
        Ok(Err(output)) => Err(format!("{name} exited before listening:\n{output}")),
        Err(()) => Err(format!("{name} did not start within 60 s")),
    }
}

/// Waits until a TCP port accepts connections (for peers that print nothing).
pub fn wait_port(addr: SocketAddr, within: Duration) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < within {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("nothing listens on {addr} after {within:?}"))
}

/// A free loopback port (bound then released; fine for a benchmark on one machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_child_exits_on_sigterm_before_its_group_is_killed() {
        // What an instrumented build does at exit (write its profile) happens only when
        // it is let exit; the trap stands for it. A SIGKILL first leaves no file.
        let dir = tempfile::tempdir().expect("tempdir");
        let said = dir.path().join("exited");
        let (mut cmd, placement) = command(Path::new("sh"), None);
        cmd.arg("-c")
            .arg(format!(
                "trap 'echo bye > {}; exit 0' TERM; echo ready; while :; do sleep 0.05; done",
                said.display()
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("sh");
        let pid = child.id();
        let mut ready = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut ready)
            .expect("the trap is set");
        drop(Proc::new("sh", child, placement));
        assert_eq!(
            std::fs::read_to_string(&said).expect("the child ran its exit"),
            "bye\n"
        );
        assert!(!live().contains(&pid), "the group is no longer tracked");
    }
}
