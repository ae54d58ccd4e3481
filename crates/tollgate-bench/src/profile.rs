//! Where a target's CPU goes while it serves load (`perf record` on the CPU clock, which
//! needs no hardware counters, so it works on the virtual machines that expose none): each
//! function's share of the samples. Across core counts the work per request is the same,
//! so a function whose share grows with the cores is where they wait on each other.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;

/// Whether `perf record` can sample the CPU clock here: why not, when not.
pub fn available() -> Result<(), String> {
    static CHECKED: LazyLock<Result<(), String>> = LazyLock::new(|| {
        let data = std::env::temp_dir().join(format!(
            "tollgate-bench-profile-check-{}.data",
            std::process::id()
        ));
        let out = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-o"])
            .arg(&data)
            .args(["--", "true"])
            .stdout(Stdio::null())
            .output()
            .map_err(|_| "perf is not installed (linux-perf)".to_string());
        let _ = std::fs::remove_file(&data);
        let out = out?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "perf record cannot sample here: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("no output")
                    .trim()
            )),
        }
    });
    CHECKED.clone()
}

/// `perf record` attached to a process until [`Recording::finish`].
pub struct Recording {
    child: Child,
    data: std::path::PathBuf,
}

/// Starts sampling `pid` (all its threads) into `data`, when the machine can.
pub fn start(pid: u32, data: &Path) -> Option<Recording> {
    available().ok()?;
    let args = ["record", "-q", "-e", "cpu-clock", "-F", "999"];
    let child = crate::counters::attach(&args, data, pid)?;
    Some(Recording {
        child,
        data: data.to_owned(),
    })
}

impl Recording {
    /// Stops sampling: each function's share of the samples (percent), largest first, and
    /// the report as perf wrote it.
    pub fn finish(mut self) -> Option<(Vec<(f64, String)>, String)> {
        crate::counters::detach(&mut self.child);
        let out = Command::new("perf")
            .args(["report", "--stdio", "--no-children", "--sort", "sym"])
            .args(["--percent-limit", "0.2", "-i"])
            .arg(&self.data)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let _ = std::fs::remove_file(&self.data);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let shares = parse(&text);
        (!shares.is_empty()).then_some((shares, text))
    }
}

/// The `share%  [k|.] symbol` lines of `perf report --stdio --sort sym`.
pub fn parse(report: &str) -> Vec<(f64, String)> {
    report
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (share, rest) = l.trim_start().split_once('%')?;
            Some((share.parse().ok()?, rest.trim().to_owned()))
        })
        .collect()
}

/// The functions whose share grew most from `base` to `top` (at least 0.5 points), with
/// both shares: what to look at first when the CPU per request grows with the cores.
pub fn grown(base: &[(f64, String)], top: &[(f64, String)], most: usize) -> Vec<String> {
    let share = |of: &[(f64, String)], sym: &str| {
        of.iter().find(|(_, s)| s == sym).map_or(0.0, |(p, _)| *p)
    };
    let mut growth: Vec<(f64, &str, f64, f64)> = top
        .iter()
        .map(|(p, sym)| {
            let b = share(base, sym);
            (p - b, sym.as_str(), b, *p)
        })
        .filter(|(d, ..)| *d >= 0.5)
        .collect();
    growth.sort_by(|a, b| b.0.total_cmp(&a.0));
    growth
        .into_iter()
        .take(most)
        .map(|(_, sym, b, t)| format!("`{sym}` {b:.1} % → {t:.1} %"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "# Samples: 4K of event 'cpu-clock'\n#\n# Overhead  Symbol\n# ........  ......\n#\n    12.50%  [k] _raw_spin_unlock_irqrestore\n     3.30%  [.] tollgate::request::handle\n     0.40%  [.] mi_free\n\n";

    #[test]
    fn shares_are_read_off_the_report() {
        assert_eq!(
            parse(REPORT),
            vec![
                (12.5, "[k] _raw_spin_unlock_irqrestore".to_owned()),
                (3.3, "[.] tollgate::request::handle".to_owned()),
                (0.4, "[.] mi_free".to_owned()),
            ]
        );
    }

    #[test]
    fn the_functions_that_grew_most_come_first() {
        let base = parse(REPORT);
        let top = vec![
            (12.0, "[k] _raw_spin_unlock_irqrestore".to_owned()),
            (6.0, "[.] tollgate::request::handle".to_owned()),
            (1.4, "[.] mi_free".to_owned()),
            (2.0, "[.] moka::get".to_owned()),
        ];
        assert_eq!(
            grown(&base, &top, 2),
            vec![
                "`[.] tollgate::request::handle` 3.3 % → 6.0 %".to_owned(),
                "`[.] moka::get` 0.0 % → 2.0 %".to_owned(),
            ]
        );
    }
}
