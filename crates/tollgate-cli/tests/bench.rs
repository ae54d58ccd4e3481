//! `tollgate bench` machinery on tiny runs (a few hundred requests): file shapes, charts,
//! peers skipped when absent, errors counted. No timing assertions: speed is what the
//! bench reports, not what tests judge.

use std::path::Path;
use std::process::Command;

/// `tollgate bench <args> --out <out>`, whatever its exit status.
fn try_bench(args: &[&str], out: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn bench(args: &[&str], out: &Path) -> std::process::Output {
    let out = try_bench(args, out);
    assert!(
        out.status.success(),
        "bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A text file the run wrote.
fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The run's summary.md holds every one of `texts`.
fn summary_says(dir: &Path, texts: &[&str]) {
    let summary = read(dir, "summary.md");
    for t in texts {
        assert!(summary.contains(t), "summary.md lacks {t:?}:\n{summary}");
    }
}

fn non_empty(path: &Path) -> u64 {
    let len = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len();
    assert!(len > 1000, "{} is only {len} bytes", path.display());
    len
}

#[test]
fn latency_writes_csv_json_summary_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "latency",
            "--requests",
            "300",
            "--warmup",
            "20",
            "--concurrency",
            "10",
            "--delay",
            "10ms",
            "--rounds",
            "2",
        ],
        dir.path(),
    );
    let csv = read(dir.path(), "percentiles.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "percentile,label,scenario,latency_us,delta_us,noise_us,within_noise"
    );
    assert_eq!(
        lines.len(),
        1 + 102 * 2,
        "102 percentiles × (direct, passthrough)"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("99.9,p99.9,passthrough,"))
    );
    assert!(lines.iter().any(|l| l.starts_with("100,max,direct,")));
    for l in &lines[1..] {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 7, "{l}");
        let latency: f64 = f[3].parse().unwrap();
        assert!(
            latency >= 10_000.0,
            "a 10 ms provider cannot answer in {latency} µs: {l}"
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("metadata.json")).unwrap()).unwrap();
    for key in [
        "date",
        "tollgate_version",
        "git_commit",
        "cpu_model",
        "cpu_count",
        "kernel",
        "args",
        "scenarios",
        "runs",
        "load_average",
    ] {
        assert!(!meta[key].is_null(), "metadata.json lacks {key}: {meta}");
    }
    let scenarios = meta["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2);
    assert!(
        scenarios[1]["config_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let runs = meta["runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        6,
        "2 rounds × (direct, its twin, passthrough), interleaved request by request: {runs:?}"
    );
    assert_eq!(
        runs.iter()
            .filter(|r| r["scenario"] == "direct (2)")
            .count(),
        2,
        "direct's twin is measured in every round: {runs:?}"
    );
    for r in runs {
        assert_eq!(r["ok"], 150);
        assert_eq!(r["errors"], 0);
    }
    assert_eq!(meta["settings"]["interleave"], "requests");
    summary_says(dir.path(), &["| passthrough |", "noise"]);
    for chart in ["latency.svg", "latency.png", "delta.svg", "delta.png"] {
        non_empty(&dir.path().join(chart));
    }
}

#[test]
fn missing_peers_are_skipped_with_a_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "bench",
            "latency",
            "--requests",
            "100",
            "--warmup",
            "0",
            "--concurrency",
            "5",
            "--delay",
            "5ms",
        ])
        .args([
            "--peer",
            "nginx",
            "--peer",
            "haproxy",
            "--peer",
            "haproxy-tcp",
        ])
        .args(["--no-pin", "--out"])
        .arg(dir.path())
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("peer nginx: nginx is not on PATH; skipped"),
        "{err}"
    );
    assert!(
        err.contains("peer haproxy: haproxy is not on PATH; skipped"),
        "{err}"
    );
    assert!(
        err.contains("peer haproxy-tcp: haproxy is not on PATH; skipped"),
        "{err}"
    );
}

#[test]
fn errors_and_non_2xx_are_counted_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let deny = dir.path().join("deny.yaml");
    std::fs::write(&deny, "routes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\ndomains:\n  deny: ['127.0.0.1']\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "bench",
            "latency",
            "--requests",
            "100",
            "--warmup",
            "0",
            "--concurrency",
            "5",
            "--delay",
            "5ms",
            "--no-passthrough",
            "--rounds",
            "2",
        ])
        .arg("--scenario")
        .arg(format!("denied={}", deny.display()))
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("metadata.json")).unwrap()).unwrap();
    let denied: Vec<&serde_json::Value> = meta["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["scenario"] == "denied")
        .collect();
    assert_eq!(denied.len(), 2);
    for r in denied {
        assert_eq!(r["non_2xx"], 50, "every 403 counted: {r}");
        assert_eq!(r["ok"], 0);
    }
    summary_says(dir.path(), &["non-2xx"]);
}

#[test]
fn correlation_and_capacity_tiny_runs() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "correlation",
            "--delays",
            "5ms,10ms",
            "--requests",
            "100",
            "--concurrency",
            "5",
            "--warmup",
            "10",
        ],
        dir.path(),
    );
    let csv = read(dir.path(), "correlation.csv");
    assert_eq!(
        csv.lines().next().unwrap(),
        "delay_ms,percentile,label,direct_us,tollgate_us,delta_us,noise_us,within_noise"
    );
    assert_eq!(csv.lines().count(), 1 + 2 * 102);
    non_empty(&dir.path().join("correlation.svg"));

    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "capacity",
            "--concurrency",
            "4,8",
            "--cores",
            "1",
            "--requests",
            "300",
            "--warmup",
            "20",
            "--rounds",
            "1",
            // Run by this binary, so never skipped: the floor of tollgate's HTTP stack.
            "--peer",
            "hyper",
            "--dashboard",
            "--twin",
        ],
        dir.path(),
    );
    let csv = read(dir.path(), "capacity.csv");
    let lines: Vec<&str> = csv.lines().collect();
    // The dashboard's live view got calls measured through its gateway (a sample past
    // 1 250 calls a second: some, not necessarily all).
    let summary = read(dir.path(), "summary.md");
    let received: u64 = summary
        .split("dashboard-open: its live view received ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no live view line:\n{summary}"));
    assert!(received > 0, "no call streamed: {summary}");
    assert_eq!(
        lines[0],
        "concurrency,cores,target,requests,requests_per_second,p50_ms,p99_ms,ratio_to_direct,errors,loadgen_cpu,user_us_per_request,kernel_us_per_request,observer_core_share,wakeups_per_request"
    );
    assert_eq!(
        lines.len(),
        1 + 2 * 5,
        "2 concurrencies × (direct, tollgate, tollgate-twin, dashboard-open, hyper)"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(",tollgate-twin,"))
            .count(),
        2
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(",dashboard-open,"))
            .count(),
        2
    );
    assert_eq!(lines.iter().filter(|l| l.contains(",hyper,")).count(), 2);
    for l in &lines[1..] {
        let f: Vec<&str> = l.split(',').collect();
        assert!(f[4].parse::<f64>().unwrap() > 0.0, "{l}");
        assert_eq!(f[8], "0", "no errors: {l}");
        if f[2] == "direct" {
            assert_eq!(&f[10..], ["", "", "", ""], "no process of its own: {l}");
        } else {
            // Clock ticks are 10 ms: a tiny run may show 0, never a negative or a blank.
            for v in &f[10..12] {
                assert!(v.parse::<f64>().unwrap() >= 0.0, "{l}");
            }
            // The observer thread's share of a core: tollgate's targets only.
            if f[2] == "hyper" {
                assert_eq!(f[12], "", "{l}");
            } else {
                assert!((0.0..=1.1).contains(&f[12].parse::<f64>().unwrap()), "{l}");
            }
            // Every process the bench started is given a CPU at least once in a run
            // (its threads sleep between events); far fewer times than it serves requests
            // at these concurrencies is not promised, so only the bounds that always hold.
            let wakeups: f64 = f[13].parse().unwrap_or_else(|_| panic!("{l}"));
            assert!(wakeups > 0.0, "{l}");
        }
    }
    let md = read(dir.path(), "capacity.md");
    assert!(md.starts_with(
        "| Concurrency | Cores | Target | Requests | Requests/s | p50 ms | p99 ms | × direct | load-gen CPU | CPU µs/request (user + kernel) |"
    ));
    non_empty(&dir.path().join("capacity-1core.svg"));
    // The build measured is named by its own version line (with `--tollgate-bin`, another
    // than the bench's).
    let measured = format!(
        "- gateway measured: tollgate {} (",
        env!("CARGO_PKG_VERSION")
    );
    summary_says(dir.path(), &["× hyper", &measured]);
}

#[test]
fn rounds_mode_measures_targets_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "latency",
            "--requests",
            "200",
            "--warmup",
            "10",
            "--concurrency",
            "10",
            "--delay",
            "10ms",
            "--rounds",
            "2",
            "--interleave",
            "rounds",
            "--placement",
            "sidecar",
        ],
        dir.path(),
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("metadata.json")).unwrap()).unwrap();
    let runs = meta["runs"].as_array().unwrap();
    let names: Vec<&str> = runs
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["direct", "passthrough", "direct", "passthrough"],
        "no twin in rounds mode"
    );
    assert_eq!(meta["settings"]["interleave"], "rounds");
    summary_says(dir.path(), &["spread between the direct rounds"]);
}

#[test]
fn with_diagnosis_reports_har_entries_written_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "latency",
            "--requests",
            "200",
            "--warmup",
            "20",
            "--concurrency",
            "4",
            "--delay",
            "1ms",
            "--rounds",
            "2",
            "--no-passthrough",
            "--with-diagnosis",
        ],
        dir.path(),
    );
    let summary = read(dir.path(), "summary.md");
    let line = summary
        .lines()
        .find(|l| l.starts_with("- with-diagnosis:") && l.contains("HAR entries written"))
        .unwrap_or_else(|| panic!("no HAR line in\n{summary}"));
    // 200 measured requests, 20 warm-up ones and the harness's readiness probes: every
    // one captured, none dropped.
    let written: usize = line["- with-diagnosis: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(written >= 220, "{line}");
    assert!(line.contains(", 0 dropped"), "{line}");
    let har = tollgate::diagnosis::har::read::load(&dir.path().join("har")).unwrap();
    assert_eq!(har.len(), written);
}

#[test]
fn capacity_across_core_counts_compares_peers_and_shows_scaling() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "capacity",
            "--concurrency",
            "4",
            "--cores",
            "1,2",
            "--requests",
            "300",
            "--warmup",
            "20",
            "--rounds",
            "1",
            "--placement",
            "none",
            "--peer",
            "hyper",
            "--remedies",
            "--profile",
        ],
        dir.path(),
    );
    summary_says(
        dir.path(),
        &[
            "| Cores | Concurrency | tollgate | cache-hit | with-remedy | hyper | tollgate ÷ hyper |",
            "- scaling, tollgate at concurrency 4: 2 cores ",
            "- scaling, hyper at concurrency 4: 2 cores ",
            "- scaling, with-remedy at concurrency 4: 2 cores ",
            "- CPU µs/request, tollgate at concurrency 4: ",
            "- CPU µs/request, cache-hit at concurrency 4: ",
            "- with-remedy ÷ passthrough (tollgate) at concurrency 4: ",
            "- cache-hit ÷ passthrough (tollgate) at concurrency 4: ",
            "- contention",
            "placement none",
        ],
    );
    // Counted where the machine has hardware counters; where not, the run says why, once.
    let summary = read(dir.path(), "summary.md");
    let counted = summary.contains("- contention, with-remedy at concurrency 4: cycles/request ");
    let why = summary.matches("- contention: not measured: ").count();
    assert!(counted != (why == 1), "{summary}");
    // The observer thread's share of a core, for tollgate's targets only (a peer has none),
    // at each core count: a thread's share, between 0 and 1.
    for n in ["tollgate", "cache-hit", "with-remedy"] {
        let head = format!("- observer thread, {n} at concurrency 4: ");
        let line = summary
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no {head:?} in\n{summary}"));
        let shares: Vec<f64> = line[head.len()..]
            .split(", ")
            .map(|s| s.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(shares.len(), 2, "{line}");
        assert!(shares.iter().all(|s| (0.0..=1.1).contains(s)), "{line}");
        assert!(line.ends_with("at 2 core(s) of one core"), "{line}");
    }
    assert!(!summary.contains("- observer thread, hyper"), "{summary}");
    // Wake-ups per request at each core count, for every proxy (the peer too).
    for n in ["tollgate", "cache-hit", "with-remedy", "hyper"] {
        let head = format!("- wake-ups per request, {n} at concurrency 4: ");
        let line = summary
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no {head:?} in\n{summary}"));
        let steps: Vec<&str> = line[head.len()..].split(", ").collect();
        assert_eq!(steps.len(), 2, "{line}");
        assert!(
            steps[0].ends_with(" at 1 core(s)") && steps[1].ends_with(" at 2"),
            "{line}"
        );
        for s in steps {
            assert!(
                s.split(' ').next().unwrap().parse::<f64>().unwrap() > 0.0,
                "{line}"
            );
        }
    }
    // Profiled where perf can sample the CPU clock: each tollgate target at each point,
    // the report beside the results; where it cannot, the run says why, once.
    let profiled: Vec<&str> = summary
        .lines()
        .filter(|l| l.starts_with("- profile, "))
        .collect();
    let not_taken = summary.matches("- profile: not taken: ").count();
    if not_taken == 1 {
        assert!(profiled.is_empty(), "{summary}");
    } else {
        assert_eq!(not_taken, 0, "{summary}");
        for n in ["tollgate", "cache-hit", "with-remedy"] {
            let head = format!("- profile, {n} at concurrency 4, 1 → 2 core(s): ");
            assert!(
                profiled.iter().any(|l| l.starts_with(&head)),
                "{head:?} in\n{summary}"
            );
            for k in [1, 2] {
                let report = read(dir.path(), &format!("profile-{n}-{k}cores-c4.txt"));
                assert!(report.contains('%'), "{report}");
            }
        }
        assert!(!summary.contains("- profile, hyper"), "{summary}");
        assert!(
            !std::fs::read_dir(dir.path()).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".data")),
            "perf's data files are removed"
        );
    }
    non_empty(&dir.path().join("capacity-scaling.svg"));
    non_empty(&dir.path().join("capacity-scaling.png"));
    // Unpinned, 2 proxy cores plus the provider and the load generator need 4: on a
    // smaller machine the summary says what that does to the numbers.
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let caveat = "- caveat: at 2 core(s) the proxy shares cores with the provider and the load generator (unpinned)";
    assert_eq!(
        read(dir.path(), "summary.md").contains(caveat),
        n < 4,
        "{n} cores"
    );
    // The scaling chart: thousands grouped, a tick per core count, the ideal line.
    let svg = read(dir.path(), "capacity-scaling.svg");
    assert!(
        svg.contains("ideal, tollgate c=4"),
        "the ideal scaling line"
    );
    assert!(
        !svg.contains(".0<") && !svg.contains("000.0"),
        "no `70000.0` labels"
    );
}

#[test]
fn dedicated_placement_refuses_a_machine_too_small_and_measures_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = try_bench(
        &["capacity", "--placement", "dedicated", "--cores", "1,4096"],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("4096 core(s) for the proxy"), "{err}");
    assert!(err.contains("nothing was measured"), "{err}");
    assert!(
        !dir.path().join("capacity.csv").exists(),
        "refused before measuring"
    );
    let out = try_bench(&["latency", "--placement", "dedicated"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is for `tollgate bench capacity`"));
}

#[test]
fn aggregate_measures_krakends_endpoints_and_says_why_lura_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-lura-here");
    bench(
        &[
            "aggregate",
            "--requests",
            "300",
            "--latency-requests",
            "200",
            "--warmup",
            "20",
            "--concurrency",
            "4,8",
            "--rate",
            "200",
            "--rounds",
            "2",
            "--lura-bin",
            missing.to_str().unwrap(),
        ],
        dir.path(),
    );
    summary_says(
        dir.path(),
        &[
            "| 4 | tollgate /social |",
            "| 8 | tollgate /foo |",
            "| 8 | direct /static |",
            "| tollgate /social |",
            "| slowest backend |",
            "lura: skipped: --lura-bin",
            "µs over the slowest backend (target ≤ +200 µs",
        ],
    );
    // The configuration tollgate ran, and Lura's, written beside the results.
    let yaml = read(dir.path(), "aggregate.yaml");
    assert!(yaml.contains("path: /social-slow") && yaml.contains("target: data"));
    let csv = read(dir.path(), "aggregate-capacity.csv");
    assert_eq!(
        csv.lines().count(),
        1 + 2 * 3,
        "2 concurrencies × 3 targets"
    );
    assert!(
        csv.lines().skip(1).all(|l| l.ends_with(",0")),
        "no errors: the endpoints answered 2xx\n{csv}"
    );
    non_empty(&dir.path().join("aggregate-capacity.svg"));
    assert!(
        try_bench(&["aggregate", "--delays", "1ms,2ms"], dir.path())
            .stderr
            .starts_with(b"error: --delays takes three")
    );
}

#[test]
fn instructions_counts_each_target_under_callgrind() {
    // Needs valgrind (`.ci/run` installs it): the command says so and fails without it.
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "instructions",
            "--requests",
            "300",
            "--warmup",
            "50",
            "--connections",
            "4",
            "--scenarios",
            "passthrough,matched,with-remedy,llm-passthrough,llm-usage",
            "--peer",
            "hyper",
            "--top",
            "3",
        ],
        dir.path(),
    );
    let summary = read(dir.path(), "summary.md");
    // The LLM calls are POSTed whole and answered (no failed request), and set against
    // their own passthrough.
    assert!(
        summary.contains("÷ llm-passthrough: llm-usage "),
        "{summary}"
    );
    for target in [
        "passthrough",
        "matched",
        "with-remedy",
        "hyper",
        "llm-passthrough",
        "llm-usage",
    ] {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {target} |")))
            .unwrap_or_else(|| panic!("no row for {target}:\n{summary}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let per_request: f64 = cells[2].parse().unwrap_or_else(|_| panic!("{row}"));
        // A request through any HTTP proxy takes thousands of instructions; a count of
        // zero or a handful would mean the counters were read at the wrong moment.
        assert!(per_request > 2_000.0, "{row}");
        assert_eq!(cells[5], "0", "no failed requests: {row}");
        non_empty(&dir.path().join(format!("callgrind.{target}.out")));
    }
    let measured = format!("), tollgate {} (", env!("CARGO_PKG_VERSION"));
    summary_says(
        dir.path(),
        &[
            &measured,
            "| hyper | ",
            " | 1.00 | ",
            "### with-remedy",
            "By origin: ",
            "| function | instructions/request | share |",
        ],
    );
    non_empty(&dir.path().join("metadata.json"));
}

#[test]
fn instructions_count_several_workers_and_say_how_connections_spread() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "instructions",
            "--threads",
            "2",
            "--requests",
            "200",
            "--warmup",
            "40",
            "--connections",
            "6",
            "--scenarios",
            "passthrough",
            "--peer",
            "hyper",
            "--peer",
            "nginx",
            "--top",
            "2",
        ],
        dir.path(),
    );
    summary_says(
        dir.path(),
        &["2 workers each (threads run one at a time under valgrind)"],
    );
    let summary = read(dir.path(), "summary.md");
    let line = summary
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "passthrough: client connections accepted per worker (warm-up and counted): ",
            )
        })
        .unwrap_or_else(|| panic!("no per-worker line:\n{summary}"));
    let each: Vec<u64> = line.split(" / ").map(|n| n.parse().unwrap()).collect();
    assert_eq!(each.len(), 2, "{line}");
    // The warm-up's 6 connections and the counted 6, at least (readiness probes add some).
    assert!(each.iter().sum::<u64>() >= 12, "{line}");
    assert!(
        summary.lines().any(|l| l.starts_with("| hyper | ")),
        "the floor counted with two workers too:\n{summary}"
    );
    assert!(
        !summary.lines().any(|l| l.starts_with("| nginx | ")),
        "nginx is one process under the tool: not counted as two workers\n{summary}"
    );
    let meta = read(dir.path(), "metadata.json");
    assert!(
        meta.contains("nginx: skipped: under callgrind it runs as one process"),
        "{meta}"
    );
}

#[test]
fn https_measures_interception_beside_a_tunnel_and_says_why_mitmproxy_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-mitmdump-here");
    bench(
        &[
            "https",
            "--requests",
            "300",
            "--warmup",
            "20",
            "--rounds",
            "2",
            "--rate",
            "200",
            "--concurrency",
            "4",
            "--handshakes",
            "20",
            "--storm-hosts",
            "20",
            "--mitmdump",
            missing.to_str().unwrap(),
        ],
        dir.path(),
    );
    summary_says(
        dir.path(),
        &[
            "| direct-tls |",
            "| tunnel |",
            "| intercepted |",
            "intercepted − tunnel at p50",
            "mitmproxy: skipped (--mitmdump",
            "a burst of 20 (16 clients at once, 20 handshakes completed)",
            "(20 completed)",
        ],
    );
    // Every keep-alive request answered 2xx through both proxies, with the proxy's CPU.
    let summary = read(dir.path(), "summary.md");
    for name in ["tunnel", "intercepted"] {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")) && l.matches('|').count() == 5)
            .unwrap_or_else(|| panic!("no capacity row for {name}:\n{summary}"));
        assert!(row.ends_with("| 0 |"), "{row}");
        assert!(row.contains(" µs |"), "no CPU per request: {row}");
    }
    let meta: serde_json::Value = serde_json::from_str(&read(dir.path(), "metadata.json")).unwrap();
    // One leaf per new host and one for the provider's name: the rest came from the cache.
    assert_eq!(meta["storm"]["leaves_made"], 41, "{meta}");
    assert!(
        meta["new_connection_cpu_us"]["intercepted"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let csv = read(dir.path(), "percentiles.csv");
    assert!(csv.lines().any(|l| l.contains(",intercepted,")), "{csv}");
}

#[test]
fn redis_measures_a_limit_on_redis_beside_the_same_limit_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    bench(
        &[
            "redis",
            "--requests",
            "300",
            "--warmup",
            "20",
            "--rounds",
            "2",
            "--rate",
            "200",
            "--concurrency",
            "4",
        ],
        dir.path(),
    );
    summary_says(
        dir.path(),
        &[
            "| memory |",
            "| redis |",
            "| redis-lease |",
            "redis − memory at p50",
            "Redis's own round trip (`redis-benchmark",
            "The same PING at the footprint's pace",
            "from the proxy's core while the footprint ran: p50",
            "redis ÷ memory at 4 connections",
            "| target | CPU per request | slices per request | wait for a CPU per slice |",
        ],
    );
    // Redis answered: a store error is a round trip past `store.timeout` (20 ms), which a
    // machine busy with the other tests in parallel may cause now and then, never often.
    let summary = read(dir.path(), "summary.md");
    let figure = |label: &str| -> u64 {
        summary
            .split(label)
            .nth(1)
            .and_then(|r| r.split(['.', ';']).next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} in:\n{summary}"))
    };
    let (trips, errors) = (
        figure("Round trips to Redis from the redis target: "),
        figure("store errors: "),
    );
    assert!(
        trips > 0 && errors * 100 <= trips,
        "{errors} store errors in {trips} round trips"
    );
    // A call to Redis is one more sleep and wake-up of the proxy's worker per request.
    let meta: serde_json::Value = serde_json::from_str(&read(dir.path(), "metadata.json")).unwrap();
    let slices = |name: &str| {
        meta["scheduling_during_footprint"][name]["slices"]
            .as_u64()
            .unwrap_or_else(|| panic!("no scheduling reading for {name}: {meta}"))
    };
    assert!(slices("redis") > slices("memory"), "{meta}");
    let summary = read(dir.path(), "summary.md");
    assert!(
        !summary.contains("Round trips to Redis from the redis target: 0;"),
        "{summary}"
    );
    // Every request answered 2xx through each gateway, and each gateway's CPU measured.
    let capacity = summary
        .split("| target | requests/s (median)")
        .nth(1)
        .unwrap_or_else(|| panic!("no capacity table:\n{summary}"));
    for name in ["memory", "redis", "redis-lease"] {
        let row = capacity
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")) && l.matches('|').count() == 6)
            .unwrap_or_else(|| panic!("no capacity row for {name}:\n{summary}"));
        assert!(row.ends_with("| 0 |"), "{row}");
        assert!(row.contains(" µs |"), "no CPU per request: {row}");
        assert!(
            meta["capacity"][name]["cpu_us_per_request"]["kernel"].is_number(),
            "{meta}"
        );
    }
}

/// The processes alive whose environment holds `marker` (the bench's children inherit
/// it, and so do the processes they fork).
fn alive_with(marker: &str) -> Vec<String> {
    let needle = format!("TOLLGATE_BENCH_MARK={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| {
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let has = env.split(|&b| b == 0).any(|v| v == needle.as_bytes());
            // A zombie (exited, not yet reaped) holds nothing: it is gone.
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'));
            (has && !zombie).then(|| {
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            })
        })
        .collect()
}

/// Waits until no process holds `marker` (a SIGKILL takes effect a moment after it is
/// sent); what is still alive after 10 s.
fn all_gone(marker: &str) -> Vec<String> {
    for _ in 0..1000 {
        let alive = alive_with(marker);
        if alive.is_empty() {
            return alive;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    alive_with(marker)
}

/// An executable shell script at `path`.
fn script(path: &Path, text: &str) -> std::path::PathBuf {
    std::fs::write(path, text).unwrap();
    let mut perm = std::fs::metadata(path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(path, perm).unwrap();
    path.to_owned()
}

/// A tollgate that forks a process of its own first, as nginx's master forks workers: a
/// bench that killed only the process it started would leave that one running.
fn forking_tollgate(dir: &Path) -> std::path::PathBuf {
    script(
        &dir.join("tollgate-forking"),
        &format!(
            "#!/bin/sh\nsleep 600 &\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_tollgate")
        ),
    )
}

fn capacity(out: &Path, bin: &Path, marker: &str, requests: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args([
        "bench",
        "capacity",
        "--concurrency",
        "4",
        "--requests",
        requests,
    ])
    .args(["--warmup", "10", "--rounds", "2", "--placement", "none"])
    .arg("--tollgate-bin")
    .arg(bin)
    .arg("--out")
    .arg(out)
    .env("TOLLGATE_BENCH_MARK", marker);
    cmd
}

#[test]
fn every_process_a_bench_starts_is_gone_when_it_returns_fails_or_is_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let bin = forking_tollgate(dir.path());
    let marker = format!("{}-{}", std::process::id(), dir.path().display());

    // A run that completes.
    let done = capacity(
        &dir.path().join("done"),
        &bin,
        &format!("{marker}-done"),
        "200",
    )
    .output()
    .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(all_gone(&format!("{marker}-done")), Vec::<String>::new());

    // A run that fails after starting processes: the tollgate it starts never says it
    // listens (its forked process keeps running until the bench kills its group).
    let failing = script(
        &dir.path().join("tollgate-failing"),
        "#!/bin/sh\nsleep 600 &\nsleep 1\nexit 3\n",
    );
    let failed = capacity(
        &dir.path().join("failed"),
        &failing,
        &format!("{marker}-failed"),
        "200",
    )
    .output()
    .unwrap();
    assert!(!failed.status.success());
    assert_eq!(all_gone(&format!("{marker}-failed")), Vec::<String>::new());

    // Runs interrupted by Ctrl-C (SIGINT) and by a supervisor (SIGTERM) while measuring.
    for (signal, code) in [("-INT", 130), ("-TERM", 143)] {
        let mark = format!("{marker}{signal}");
        let mut run = capacity(&dir.path().join(signal), &bin, &mark, "100000000")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Measuring: the provider and tollgate are up, each with its forked process.
        let mut up = false;
        for _ in 0..3000 {
            if alive_with(&mark)
                .iter()
                .filter(|c| c.starts_with("sleep"))
                .count()
                >= 2
            {
                up = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            up,
            "the bench never started its processes: {:?}",
            alive_with(&mark)
        );
        let sent = Command::new("kill")
            .args([signal, &run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        assert_eq!(run.wait().unwrap().code(), Some(code));
        assert_eq!(all_gone(&mark), Vec::<String>::new(), "after {signal}");
    }
}

#[test]
fn ab_compare_takes_medians_over_each_builds_runs() {
    // scripts/ab-compare reads what `scripts/ab-capacity run` brings back from the
    // many-core machine: runs of two builds, unpacked here into `N-A`/`N-B` folders.
    let dir = tempfile::tempdir().unwrap();
    let head = "concurrency,cores,target,requests,requests_per_second,p50_ms,p99_ms,ratio_to_direct,errors,loadgen_cpu,user_us_per_request,kernel_us_per_request,observer_core_share,wakeups_per_request\n";
    for (run, passthrough, remedy, wake) in [
        ("1-A", 100.0, 80.0, 0.1),
        ("2-B", 120.0, 114.0, 0.2),
        ("3-B", 110.0, 99.0, 0.4),
        ("4-A", 90.0, 81.0, 0.3),
        ("5-A", 95.0, 76.0, 0.2),
    ] {
        let folder = dir.path().join(run);
        std::fs::create_dir(&folder).unwrap();
        let rows = format!(
            "{head}64,1,direct,1000,300,0.1,0.2,1.0,0,0.5,,,,\n\
             64,1,tollgate,1000,{passthrough},0.1,0.2,0.3,0,0.5,8.0,12.0,0.01,{wake}\n\
             64,1,with-remedy,1000,{remedy},0.1,0.2,0.3,0,0.5,10.0,13.0,0.01,{wake}\n"
        );
        std::fs::write(folder.join("capacity.csv"), rows).unwrap();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ab-compare");
    let out = Command::new("python3")
        .arg(script)
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("Runs: A [1, 4, 5], B [2, 3]"), "{text}");
    // Medians: A 95 (90–100), B 115 (110–120), B ÷ A 1.21; CPU user + kernel 20.0.
    assert!(
        text.contains(
            "| 1 | 64 | tollgate | 95 (90–100) | 115 (110–120) | 1.21 | 20.0 (20.0–20.0) | 20.0 (20.0–20.0) | 0.200 (0.100–0.300) | 0.300 (0.200–0.400) |"
        ),
        "{text}"
    );
    // Per run against its own passthrough: A 0.80, 0.90, 0.80; B 0.95, 0.90.
    assert!(
        text.contains("| 1 | 64 | with-remedy | 0.80 (0.80–0.90) | 0.93 (0.90–0.95) |"),
        "{text}"
    );
}

/// Portkey's gateway 1.15.2 from npm, installed once under target/portkey-peer with
/// `@hono/node-server` pinned to its lockfile's 1.13.5 (the version npm resolves
/// answers every streamed call 500: Portkey-AI/gateway#1389): its start script.
fn portkey() -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/portkey-peer");
    let script = dir.join("node_modules/@portkey-ai/gateway/build/start-server.js");
    if !script.is_file() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("package.json"),
            r#"{"name": "portkey-peer", "version": "1.0.0", "private": true,
 "dependencies": {"@portkey-ai/gateway": "1.15.2"},
 "overrides": {"@hono/node-server": "1.13.5"}}"#,
        )
        .unwrap();
        let ok = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok && script.is_file(),
            "this test needs npm and its registry (Portkey's gateway)"
        );
    }
    script
}

#[test]
fn llm_measures_tollgate_beside_portkey_and_says_why_litellm_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let portkey = portkey();
    let missing = dir.path().join("no-litellm-here");
    bench(
        &[
            "llm",
            "--calls",
            "10",
            "--requests",
            "400",
            "--concurrency",
            "4",
            "--rounds",
            "2",
            "--portkey",
            portkey.to_str().unwrap(),
            "--litellm",
            missing.to_str().unwrap(),
        ],
        dir.path(),
    );
    let md = read(dir.path(), "llm.md");
    // Every target streamed and answered whole; Portkey among them, through its headers.
    for target in [
        "direct",
        "passthrough",
        "matched",
        "usage",
        "usage+limits",
        "portkey",
    ] {
        assert!(
            md.contains(&format!("\n| {target} | ")),
            "no row for {target}:\n{md}"
        );
    }
    let capacity_rows = md
        .lines()
        .filter(|l| l.starts_with("| portkey | ") && l.matches('|').count() == 5)
        .count();
    assert_eq!(capacity_rows, 1, "Portkey's requests/s:\n{md}");
    for text in [
        "(target ≤ +30 µs)",
        "Not measured: LiteLLM: `litellm` not found",
        "Not measured: Bifrost:",
    ] {
        assert!(md.contains(text), "llm.md lacks {text:?}:\n{md}");
    }
    let csv = read(dir.path(), "llm.csv");
    assert_eq!(csv.lines().count(), 1 + 6, "{csv}");
}
