//! The `tollgate` binary as users run it: `check`, `schema`, `run` with SIGHUP reload
//! and SIGTERM graceful exit, `provider`; `diagnosis`: `discover` and `har` against a
//! running gateway.

mod diagnosis;
mod traces;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

/// `tollgate run` on ephemeral ports, with `config`.
fn run_on_ephemeral_ports(config: &std::path::Path) -> Command {
    let mut c = run_on_ephemeral_ports_alone();
    c.arg("--config").arg(config);
    c
}

/// `tollgate run` on ports of the system's choosing, on built-in defaults.
fn run_on_ephemeral_ports_alone() -> Command {
    let mut c = tollgate();
    c.args(["run", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]);
    c
}

/// Minimal HTTP/1.0 GET over std sockets: (status line, body).
fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The provider emulator on an ephemeral port, and its address.
fn provider() -> (Child, Vec<String>) {
    spawn(
        tollgate().args(["provider", "--listen", "127.0.0.1:0"]),
        "provider listening",
    )
}

/// A gateway config: a route `/api` to `provider`, the policy `emulator` on it with
/// `remedy` (YAML flow), and `diagnosis`.
fn emulator_config(
    dir: &std::path::Path,
    provider: &str,
    remedy: &str,
    diagnosis: &str,
) -> std::path::PathBuf {
    let cfg = dir.join("tollgate.yaml");
    std::fs::write(
        &cfg,
        format!(
            "routes:\n  - prefix: /api\n    upstream: http://{provider}\npolicies:\n  - name: emulator\n    match: {{ host: 127.0.0.1 }}\n    {remedy}\ndiagnosis:\n{diagnosis}"
        ),
    )
    .unwrap();
    cfg
}

/// Starts `cmd` (its stdout as the caller set it, else discarded), and the lines of its
/// stderr.
fn started(cmd: &mut Command) -> (Child, std::io::Lines<BufReader<std::process::ChildStderr>>) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    (child, lines)
}

/// Starts a long-running subcommand and reads the addresses it prints on stderr.
fn spawn(cmd: &mut Command, marker: &str) -> (Child, Vec<String>) {
    let (child, mut lines) = started(cmd.stdout(Stdio::null()));
    let line = loop {
        let l = lines
            .next()
            .expect("process printed its listening line")
            .unwrap();
        if l.contains(marker) {
            break l;
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let addrs = line
        .split("://")
        .skip(1)
        .map(|s| s.split_whitespace().next().unwrap().to_owned())
        .collect();
    (child, addrs)
}

/// `tollgate discover`'s table once `shown` holds for it. The observer thread counts
/// calls off the request path, after the HAR thread may already have written them, so
/// a test polls; it fails with the last table when `shown` never holds.
fn discovered(admin: &str, shown: impl Fn(&str) -> bool) -> String {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let o = tollgate()
            .args(["discover", "--admin", &format!("http://{admin}")])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let table = String::from_utf8(o.stdout).unwrap();
        if shown(&table) {
            return table;
        }
        assert!(
            std::time::Instant::now() < end,
            "discover never showed the calls:\n{table}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn check_reports_errors_with_paths_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "routes:\n  - prefix: /a\n    upstream: https://api.example.com\n",
    )
    .unwrap();
    let out = tollgate().arg("check").arg(&good).output().unwrap();
    assert_eq!(out.status.code(), Some(0));

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "upstream:\n  connect_timeout: soon\n  pool:\n    max_idle_per_host: 2\ndomains:\n  deny: ['a b']\n").unwrap();
    let out = tollgate().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("upstream.connect_timeout: `soon` is not a duration"),
        "{err}"
    );
    assert!(err.contains("domains.deny[0]:"), "{err}");

    std::fs::write(&bad, "listen:\n  adress: x\n").unwrap();
    let out = tollgate().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("listen.adress: unknown field `adress`") && err.contains("line 2, column 3"),
        "{err}"
    );

    let out = tollgate()
        .arg("check")
        .arg(dir.path().join("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read file"));
}

#[test]
fn check_refuses_what_run_could_not_write() {
    // A regular file where a directory is needed: unwritable even for root.
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let cases = [
        (
            format!(
                "diagnosis:\n  har:\n    enabled: true\n    file: {{ dir: {}/har }}\n",
                blocker.display()
            ),
            "diagnosis.har.file.dir: cannot write HAR files in",
        ),
        (
            format!(
                "log:\n  access_log: true\n  access_log_file: {}/access.log\n",
                blocker.display()
            ),
            "log.access_log_file: cannot append to",
        ),
    ];
    for (yaml, message) in cases {
        let f = dir.path().join("unwritable.yaml");
        std::fs::write(&f, &yaml).unwrap();
        let out = tollgate().arg("check").arg(&f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{yaml}: {err}");
        assert!(err.contains(message), "{err}");
        // `run` refuses the same config (it would exit at start).
        let out = run_on_ephemeral_ports(&f).output().unwrap();
        assert_ne!(out.status.code(), Some(0), "{yaml}");
    }
    // A writable directory passes (and is created, as `run` would).
    let f = dir.path().join("writable.yaml");
    std::fs::write(
        &f,
        format!(
            "diagnosis:\n  har:\n    enabled: true\n    file: {{ dir: {}/har }}\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = tollgate().arg("check").arg(&f).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_warns_about_a_policy_that_never_applies() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("shadowed.yaml");
    std::fs::write(
        &f,
        "policies:\n  - name: everything\n    match: {host: '*.github.com'}\n    cache: {}\n  - name: repos\n    match: {host: api.github.com, path: '/repos/*'}\n    rate_limit: {limit: 10, window: minute}\n",
    )
    .unwrap();
    let out = tollgate().arg("check").arg(&f).output().unwrap();
    // Valid (exit 0), with the warning on stderr.
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "warning: policies[1] `repos` never applies: policies[0] `everything` comes first"
        ),
        "{err}"
    );
}

#[test]
fn schema_matches_the_committed_file() {
    let out = tollgate().arg("schema").output().unwrap();
    assert!(out.status.success());
    let committed = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tollgate.schema.json"
    ))
    .unwrap();
    assert!(
        out.stdout == committed,
        "tollgate.schema.json is stale: run `cargo run -- schema > tollgate.schema.json`"
    );
}

#[test]
fn run_reloads_on_sighup_and_exits_zero_on_sigterm() {
    let (mut provider, p) = provider();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tollgate.yaml");
    std::fs::write(
        &cfg,
        format!("routes:\n  - prefix: /one\n    upstream: http://{}\n", p[0]),
    )
    .unwrap();
    let (mut gw, a) = spawn(
        run_on_ephemeral_ports(&cfg).args(["--threads", "1"]),
        "tollgate listening:",
    );
    let (proxy, admin) = (&a[0], &a[1]);
    let (status, body) = get(proxy, "/one/static", &[]);
    assert!(status.contains("200"), "{status}");
    assert_eq!(body.len(), 110);

    // Same size on purpose: the stamp may differ only by mtime; SIGHUP reloads anyway.
    std::fs::write(
        &cfg,
        format!("routes:\n  - prefix: /two\n    upstream: http://{}\n", p[0]),
    )
    .unwrap();
    signal(&gw, "-HUP");
    let mut reloaded = false;
    for _ in 0..100 {
        if get(proxy, "/two/static", &[]).0.contains("200") {
            reloaded = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(reloaded, "SIGHUP (or the watcher) applied the new config");
    let (status, _) = get(admin, "/healthz", &[]);
    assert!(status.contains("200"));

    signal(&gw, "-TERM");
    let code = gw.wait().unwrap();
    assert_eq!(code.code(), Some(0), "graceful exit");
    signal(&provider, "-TERM");
    assert_eq!(provider.wait().unwrap().code(), Some(0));
}

#[test]
fn run_on_defaults_refuses_a_bad_config_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.yaml");
    std::fs::write(&cfg, "routes: 3\n").unwrap();
    let out = tollgate()
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("routes: invalid type"), "{err}");
}

#[test]
fn thread_counts_out_of_range_are_refused_with_a_message() {
    for sub in ["run", "provider"] {
        let out = tollgate().args([sub, "--threads", "0"]).output().unwrap();
        assert!(!out.status.success(), "{sub} --threads 0");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("from 1 to 1024"), "{err}");
    }
}

#[test]
fn har_to_stdout_and_files_then_discover_and_har_commands() {
    const SECRET: &str = "sk-cli-SECRET-0123456789";
    let (mut provider, p) = provider();
    let dir = tempfile::tempdir().unwrap();
    let har = dir.path().join("har");
    let cfg = emulator_config(
        dir.path(),
        &p[0],
        &format!("credentials: {{ accounts: [{{ bearer: {SECRET} }}] }}"),
        &format!(
            "  discovery: {{ enabled: true }}\n  har:\n    enabled: true\n    stdout: true\n    file: {{ dir: {} }}\n",
            har.display()
        ),
    );
    let (mut child, mut err) = started(
        run_on_ephemeral_ports(&cfg)
            .args(["--threads", "1"])
            .stdout(Stdio::piped()),
    );
    let line = loop {
        let l = err.next().expect("listening line").unwrap();
        if l.contains("tollgate listening:") {
            break l;
        }
    };
    std::thread::spawn(move || for _ in err {});
    let a: Vec<String> = line
        .split("http://")
        .skip(1)
        .map(|s| s.split_whitespace().next().unwrap().to_owned())
        .collect();
    let (proxy, admin) = (&a[0], &a[1]);
    let (status, body) = get(proxy, "/api/anything/users/42", &[]);
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains(SECRET),
        "the provider got the injected credential"
    );

    // The stdout sink: one JSON line per entry, redacted.
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let _ = tx.send(l.unwrap());
        }
    });
    let entry = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("an entry on stdout");
    assert!(!entry.contains(SECRET), "{entry}");
    let v: serde_json::Value = serde_json::from_str(&entry).unwrap();
    assert!(
        v["request"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/anything/users/42")
    );
    assert!(entry.contains("REDACTED"));

    // `tollgate discover` against the running gateway.
    discovered(admin, |t| t.contains("/anything/users/{id}"));

    // `tollgate har` on the file sink's directory.
    let list = tollgate().args(["har", "list"]).arg(&har).output().unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    assert!(
        list.contains("/anything/users/42") && list.contains("200"),
        "{list}"
    );
    let mock = tollgate()
        .args(["har", "mock"])
        .arg(&har)
        .arg("1")
        .output()
        .unwrap();
    assert!(mock.status.success());
    let yaml = String::from_utf8(mock.stdout).unwrap();
    assert!(
        yaml.contains("mock:") && yaml.contains("/anything/users/42"),
        "{yaml}"
    );
    assert!(!yaml.contains(SECRET));
    let missing = tollgate()
        .args(["har", "show"])
        .arg(&har)
        .arg("99")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no entry `99`"));
    // Every byte of every sink: no secret.
    for f in std::fs::read_dir(&har).unwrap() {
        assert!(
            !std::fs::read_to_string(f.unwrap().path())
                .unwrap()
                .contains(SECRET)
        );
    }

    // The file `tollgate har list` read is the one being written: `….har.partial` until
    // shutdown, which closes it as a `.har` before the process exits.
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert!(
        names(&har).iter().all(|n| n.ends_with(".har.partial")),
        "{:?}",
        names(&har)
    );
    signal(&child, "-TERM");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let closed = names(&har);
    assert!(
        !closed.is_empty() && closed.iter().all(|n| n.ends_with(".har")),
        "{closed:?}"
    );
    signal(&provider, "-TERM");
    let _ = provider.wait();
}

#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    // `tollgate schema | head -c 10`: the reader leaves after 10 bytes.
    let mut child = tollgate()
        .arg("schema")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is dropped: further writes get EPIPE.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn logs_are_plain_text_when_not_on_a_terminal_and_a_second_signal_exits_at_once() {
    // (Also: a CONNECT past a policy is warned about in the log.)
    // An upstream that accepts and never answers: the drain waits for its request.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tollgate.yaml");
    std::fs::write(
        &cfg,
        "log: { level: debug }\nshutdown: { drain_timeout: 10m }\nupstream: { response_timeout: 10m }\negress: { connect_ports: [1] }\npolicies:\n  - name: local\n    match: { host: localhost }\n    provider_throttling: {}\n",
    )
    .unwrap();
    let (mut child, mut lines) = started(
        run_on_ephemeral_ports(&cfg)
            .args(["--threads", "1"])
            .stdout(Stdio::null()),
    );
    let proxy = loop {
        let l = lines.next().expect("the listening line").unwrap();
        if let Some(rest) = l.split("proxy http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines {
            let _ = tx.send(l.unwrap_or_default());
        }
    });
    // A tunnel to the policy's host (nothing listens on port 1: the warning comes first).
    let mut tunnel = std::net::TcpStream::connect(&proxy).unwrap();
    tunnel
        .write_all(b"CONNECT localhost:1 HTTP/1.1\r\nHost: localhost:1\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 12];
    tunnel.read_exact(&mut answer).unwrap();
    let _held = std::thread::spawn(move || {
        let _ = get(
            &proxy,
            "/hang",
            // Plain HTTP: in flight until its answer's head (`response_timeout`, 10
            // minutes); over TLS it would be bounded by the handshake's `connect_timeout`.
            &[
                ("x-tollgate-host", &silent_addr.to_string()),
                ("x-tollgate-scheme", "http"),
            ],
        );
    });
    // The gateway's connection carrying `/hang`, its head read: from here the request is
    // in flight (not a connection still in its handshake).
    let _conn = loop {
        let (mut c, _) = silent.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        if head.starts_with(b"GET /hang ") {
            break c;
        }
    };
    signal(&child, "-INT");
    // Wait for the drain to start, then the second signal.
    let mut logged = Vec::new();
    while !logged.iter().any(|l: &String| l.contains("draining")) {
        logged.push(
            rx.recv_timeout(std::time::Duration::from_secs(60))
                .expect("the drain is logged"),
        );
    }
    signal(&child, "-INT");
    let mut exited = None;
    for _ in 0..600 {
        if let Some(s) = child.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let Some(status) = exited else {
        let _ = child.kill();
        panic!("a second Ctrl-C did not end the drain (10 minutes long)");
    };
    assert!(!status.success(), "exited without draining: {status:?}");
    logged.extend(rx.try_iter());
    let text = logged.join("\n");
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes in a pipe: {text:?}"
    );
    assert!(
        text.contains(
            "CONNECT to `localhost` is an opaque TLS tunnel: policy `local` cannot apply"
        ),
        "{text}"
    );
}

#[test]
fn check_env_optional_reports_unset_variables_as_warnings() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/openai.yaml");
    let strict = tollgate()
        .args(["check", example])
        .env_remove("OPENAI_KEY_A")
        .env_remove("OPENAI_KEY_B")
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert!(
        stderr.contains("OPENAI_KEY_A") && stderr.contains("--env-optional"),
        "{stderr}"
    );
    let lenient = tollgate()
        .args(["check", "--env-optional", example])
        .env_remove("OPENAI_KEY_A")
        .env_remove("OPENAI_KEY_B")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&lenient.stderr);
    assert_eq!(lenient.status.code(), Some(0), "{stderr}");
    for name in ["OPENAI_KEY_A", "OPENAI_KEY_B"] {
        assert!(
            stderr.contains("warning: policies[0].credentials.accounts") && stderr.contains(name),
            "{stderr}"
        );
    }
    assert!(String::from_utf8_lossy(&lenient.stdout).contains("valid"));
    // Other errors still fail.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "policies:\n  - name: p\n    credentials: {bearer: '${NOPE_UNSET}'}\n    rate_limit: {limit: 0, window: hour}\n").unwrap();
    let out = tollgate()
        .args(["check", "--env-optional"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rate_limit.limit"), "{stderr}");
    assert!(
        !stderr.contains("NOPE_UNSET"),
        "unset is not an error: {stderr}"
    );
}

#[test]
fn ca_init_show_and_export_a_local_ca() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ca");
    let ca = |args: &[&str]| {
        tollgate()
            .arg("ca")
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .unwrap()
    };
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();

    let missing = ca(&["show"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("tollgate ca init"),
        "says what to run: {missing:?}"
    );

    let made = ca(&["init"]);
    assert!(made.status.success(), "{made:?}");
    let fingerprint = |out: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix("SHA-256:"))
            .map(|f| f.trim().to_owned())
            .unwrap_or_else(|| panic!("no fingerprint in {out}"))
    };
    let first = fingerprint(&text(&made));
    assert_eq!(first.len(), 95, "32 bytes as AB:CD:…: {first}");
    assert_eq!(fingerprint(&text(&ca(&["show"]))), first);
    assert!(!text(&made).contains("PRIVATE"), "the key is never printed");

    // The PEM export is the certificate alone; the DER export is the same certificate.
    let pem = text(&ca(&["export"]));
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert!(!pem.contains("PRIVATE"), "the key is never exported");
    let der_file = dir.path().join("ca.der");
    let der = ca(&[
        "export",
        "--format",
        "der",
        "--out",
        der_file.to_str().unwrap(),
    ]);
    assert!(der.status.success(), "{der:?}");
    let der = std::fs::read(&der_file).unwrap();
    let kept = tollgate::intercept::ca::Ca::load_dir(&data).unwrap();
    assert_eq!(der, kept.der());
    assert_eq!(pem, kept.pem());

    // A second init keeps the CA clients trust, unless forced.
    let again = ca(&["init"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(fingerprint(&text(&ca(&["show"]))), first);
    let forced = ca(&["init", "--force"]);
    assert!(forced.status.success(), "{forced:?}");
    assert_ne!(fingerprint(&text(&forced)), first);
}

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[cfg(unix)]
#[test]
fn ca_init_under_umask_000_makes_private_folders_and_never_follows_a_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("deep/ca");
    let init = |force: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask 000 && exec \"$0\" ca init {force} --data-dir \"$1\""
            ))
            .arg(env!("CARGO_BIN_EXE_tollgate"))
            .arg(&data)
            .output()
            .unwrap()
    };
    let made = init("");
    assert!(made.status.success(), "{made:?}");
    assert_eq!(mode(&data), 0o700, "the CA's folder");
    assert_eq!(mode(&dir.path().join("deep")), 0o700, "a folder it made");
    assert_eq!(
        mode(&data.join("tollgate-ca.pem")),
        0o644,
        "the certificate"
    );
    assert_eq!(mode(&data.join("tollgate-ca-key.pem")), 0o600, "the key");
    // A link planted where the certificate goes: --force replaces the link, and the file
    // it pointed to is untouched.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::remove_file(data.join("tollgate-ca.pem")).unwrap();
    std::os::unix::fs::symlink(&victim, data.join("tollgate-ca.pem")).unwrap();
    let forced = init("--force");
    assert!(forced.status.success(), "{forced:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(
        std::fs::symlink_metadata(data.join("tollgate-ca.pem"))
            .unwrap()
            .file_type()
            .is_file()
    );
}

/// A config intercepting one host with the CA in `cert`/`key`.
fn intercepting(
    dir: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> std::path::PathBuf {
    let config = dir.join("intercept.yaml");
    std::fs::write(
        &config,
        format!(
            "intercept:\n  hosts: [api.openai.com]\n  ca: {{cert_file: {}, key_file: {}}}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    config
}

#[cfg(unix)]
#[test]
fn check_refuses_a_ca_that_is_not_one_and_a_key_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A server certificate (basicConstraints CA:FALSE) and its key, as `openssl req
    // -x509 -addext basicConstraints=CA:FALSE` makes.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    let cert = params.self_signed(&key).unwrap();
    let (cert_file, key_file) = (
        dir.path().join("server.pem"),
        dir.path().join("server-key.pem"),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = tollgate()
        .arg("check")
        .arg(intercepting(dir.path(), &cert_file, &key_file))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("intercept.ca") && stderr.contains("CA:TRUE"),
        "{stderr}"
    );
    // A CA made by `ca init` whose key others can read.
    let data = dir.path().join("ca");
    let made = tollgate()
        .args(["ca", "init", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let key_file = data.join("tollgate-ca-key.pem");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = intercepting(dir.path(), &data.join("tollgate-ca.pem"), &key_file);
    let out = tollgate().arg("check").arg(&config).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("chmod 600"), "{stderr}");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = tollgate().arg("check").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn check_env_optional_checks_a_file_whose_urls_and_ca_exist_only_in_production() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prod.yaml");
    std::fs::write(
        &config,
        "store:\n  backend: redis\n  url: ${PROD_REDIS_URL}\nroutes:\n  - prefix: /gh\n    upstream: ${PROD_GITHUB_BASE}\ndiagnosis:\n  har:\n    enabled: true\n    collector: {url: '${PROD_HAR_URL}'}\nintercept:\n  hosts: [api.openai.com]\n",
    )
    .unwrap();
    let empty = dir.path().join("no-ca-here");
    let check = |optional: bool| {
        let mut c = tollgate();
        c.arg("check");
        if optional {
            c.arg("--env-optional");
        }
        c.arg(&config)
            .env("TOLLGATE_DATA_DIR", &empty)
            .env_remove("PROD_REDIS_URL")
            .env_remove("PROD_GITHUB_BASE")
            .env_remove("PROD_HAR_URL")
            .output()
            .unwrap()
    };
    let lenient = check(true);
    let stderr = String::from_utf8_lossy(&lenient.stderr);
    assert_eq!(lenient.status.code(), Some(0), "{stderr}");
    for said in [
        "PROD_REDIS_URL",
        "PROD_GITHUB_BASE",
        "PROD_HAR_URL",
        "warning: intercept.ca",
    ] {
        assert!(stderr.contains(said), "{said}: {stderr}");
    }
    assert!(!stderr.contains("needs a sink"), "{stderr}");
    // Strict: the same file fails, and the missing CA says what chose its folder.
    let strict = check(false);
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("$TOLLGATE_DATA_DIR"), "{stderr}");
    assert!(!stderr.contains("(the default data directory)"), "{stderr}");
}

#[test]
fn a_mistyped_redis_url_never_shows_its_password() {
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "REDIS://:pw-upper-1@redis.internal:6379",
        "redis://:pw#hash-2@redis.internal:6379",
        "redis://:pw/slash-3@redis.internal:6379",
        "redis+unix:///run/redis.sock?pass=pw-query-4",
    ] {
        let config = dir.path().join("store.yaml");
        std::fs::write(
            &config,
            format!("store:\n  backend: redis\n  url: '{url}'\n"),
        )
        .unwrap();
        let out = tollgate().arg("check").arg(&config).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains("store.url"), "{stderr}");
        let password = url
            .rsplit(['=', ':'])
            .find(|p| p.contains("pw"))
            .unwrap_or(url);
        let password = password.split('@').next().unwrap();
        assert!(!stderr.contains(password), "{password} shown: {stderr}");
        assert!(stderr.contains("MASKED"), "{stderr}");
    }
}

#[test]
fn check_leaves_no_har_directory_behind() {
    let dir = tempfile::tempdir().unwrap();
    let har = dir.path().join("not/yet/har");
    let config = dir.path().join("har.yaml");
    std::fs::write(
        &config,
        format!(
            "diagnosis:\n  har:\n    enabled: true\n    file: {{dir: {}}}\n",
            har.display()
        ),
    )
    .unwrap();
    let out = tollgate().arg("check").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        !dir.path().join("not").exists(),
        "check made the HAR directory"
    );
    // A folder that cannot be made is still refused.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    std::fs::write(
        &config,
        format!(
            "diagnosis:\n  har:\n    enabled: true\n    file: {{dir: {}}}\n",
            file.join("har").display()
        ),
    )
    .unwrap();
    let out = tollgate().arg("check").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn check_joins_several_files_and_a_directory_as_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let conf_d = dir.path().join("conf.d");
    std::fs::create_dir(&conf_d).unwrap();
    std::fs::write(
        conf_d.join("10-limits.yaml"),
        "rate_limits:\n  gh: {limit: 10, window: minute}\n",
    )
    .unwrap();
    std::fs::write(
        conf_d.join("20-policy.yaml"),
        "policies:\n  - name: gh\n    match: {host: api.github.com}\n    rate_limit: gh\n",
    )
    .unwrap();
    let out = tollgate().arg("check").arg(&conf_d).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let clash = dir.path().join("clash.yaml");
    std::fs::write(
        &clash,
        "policies:\n  - name: gh\n    match: {host: other.example}\n",
    )
    .unwrap();
    let out = tollgate()
        .arg("check")
        .arg(&conf_d)
        .arg(&clash)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a policy named `gh` is already defined in"),
        "{err}"
    );
    assert!(err.contains("20-policy.yaml"), "{err}");
    // One file alone lacks the limit the policy names: refused, in that file.
    let out = tollgate()
        .arg("check")
        .arg(conf_d.join("20-policy.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// `upstream.tls.roots: system` trusts the host's store (here the file `SSL_CERT_FILE`
/// names, as on a host whose corporate CA is installed); the built-in roots do not know
/// that CA, and an empty store is refused at `check` with the fix.
#[test]
fn upstream_roots_from_the_system_store_trust_a_ca_installed_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (mut provider, addrs) = spawn(
        tollgate()
            .args(["provider", "--listen", "127.0.0.1:0", "--tls-dir"])
            .arg(dir.path()),
        "listening on",
    );
    let provider_addr = addrs[0].clone();
    let bundle = dir.path().join("provider-ca.pem");
    let through = |roots: &str| {
        let config = dir.path().join(format!("{roots}.yaml"));
        std::fs::write(&config, format!("upstream:\n  tls: {{roots: {roots}}}\n")).unwrap();
        let (mut gw, addrs) = spawn(
            run_on_ephemeral_ports(&config)
                .env("SSL_CERT_FILE", &bundle)
                .env_remove("SSL_CERT_DIR"),
            "tollgate listening:",
        );
        let got = get(
            &addrs[0],
            "/get",
            &[("x-tollgate-host", provider_addr.as_str())],
        );
        let _ = gw.kill();
        let _ = gw.wait();
        got.0
    };
    let system = through("system");
    let both = through("both");
    let webpki = through("webpki");
    let _ = provider.kill();
    let _ = provider.wait();
    assert!(system.contains(" 200 "), "{system}");
    assert!(both.contains(" 200 "), "{both}");
    assert!(
        webpki.contains(" 502 "),
        "the built-in roots do not know the CA: {webpki}"
    );

    // A store with no certificate: `check` says so, at the field, with the fix.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let config = dir.path().join("system.yaml");
    let out = tollgate()
        .arg("check")
        .arg(&config)
        .env("SSL_CERT_FILE", &empty)
        .env("SSL_CERT_DIR", dir.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("upstream.tls.roots"), "{err}");
    assert!(err.contains("roots: webpki"), "{err}");
}

/// A first run says what it runs on, where the dashboard is and one call to try.
#[test]
fn a_first_run_says_what_it_is_doing() {
    let (mut child, mut lines) = started(
        run_on_ephemeral_ports_alone()
            .args(["--threads", "1"])
            .stdout(Stdio::null()),
    );
    // Should the words never come, the process is stopped and the reading ends.
    let pid = child.id().to_string();
    let read = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = read.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(30));
        if !done.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
    });
    let mut said = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let done = l.contains("stop: Ctrl-C");
        said.push(l);
        if done {
            break;
        }
    }
    read.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = child.kill();
    let _ = child.wait();
    let text = said.join("\n");
    assert!(text.contains("config: built-in defaults"), "{text}");
    assert!(text.contains("/ui"), "{text}");
    assert!(text.contains("try: curl -x http://127.0.0.1:"), "{text}");
}
