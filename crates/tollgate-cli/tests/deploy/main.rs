//! The deployment files in `deploy/` as a cluster and compose would use them: the Helm
//! chart lints, its ConfigMap holds a config `tollgate check` accepts, and the binary
//! started with the exact arguments and environment of the rendered Deployment answers
//! its probes and the chart's `helm test` script, with its store on a real Redis.
//! `chart` renders the chart's other choices (interception, Secrets, rollouts, the
//! values schema); `image` builds the image where the machine can. `scripts/test`
//! installs `helm` and `redis-server`; without them these tests fail saying so.

mod chart;
mod image;
mod metadata;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use yaml_serde::Value;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn helm(args: &[&str]) -> String {
    let out = Command::new("helm")
        .args(args)
        .output()
        .expect("helm on PATH (.ci/run installs it: go install helm.sh/helm/v3/cmd/helm@v3.16.4)");
    assert!(
        out.status.success(),
        "helm {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn chart() -> String {
    format!("{ROOT}/deploy/helm/tollgate")
}

/// The values every rendering here adds to the chart's defaults: the Redis URL in a
/// Secret of the operator's (the chart refuses to render without one while
/// `redis.enabled`).
const REDIS_SECRET: [&str; 2] = ["--set", "redis.existingSecret=tollgate-redis"];

/// One template of the chart, rendered with its default values and `set` (`--set`
/// pairs and other `helm template` flags).
fn rendered(template: &str, set: &[&str]) -> Value {
    let chart = chart();
    let mut args = vec!["template", "t", &chart, "--show-only", template];
    args.extend(set);
    let text = helm(&args);
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{template}: {e}\n{text}"))
}

/// A `helm` command that must fail: what it printed, both streams.
fn helm_refuses(args: &[&str]) -> String {
    let out = Command::new("helm")
        .args(args)
        .output()
        .expect("helm on PATH");
    assert!(
        !out.status.success(),
        "helm {args:?} rendered what it should refuse:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server of this test's own, stopped when dropped.
struct Redis(Child, u16);

impl Redis {
    fn start() -> Self {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        assert!(
            answers(port, "PING\r\n", "+PONG"),
            "redis-server never answered"
        );
        Self(child, port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `port` answers `request` with a reply starting `expect`, within 10 s.
fn answers(port: u16, request: &str, expect: &str) -> bool {
    for _ in 0..1000 {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut got = [0u8; 64];
            if s.write_all(request.as_bytes()).is_ok() {
                let n = s.read(&mut got).unwrap_or(0);
                if String::from_utf8_lossy(&got[..n]).starts_with(expect) {
                    return true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// GET `path` on `port`: the status line and the body.
fn get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // The listener's address as `Host`: without a token it answers no other name.
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

fn check(config: &Path, env: &[(String, String)]) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("check")
        .arg(config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tollgate check {}:\n{}",
        config.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_chart_lints_and_its_pod_starts_with_the_rendered_arguments_and_probes() {
    let mut lint = vec!["lint", "--strict"];
    let chart = chart();
    lint.push(&chart);
    lint.extend(REDIS_SECRET);
    helm(&lint);
    let redis = Redis::start();
    let dir = tempfile::tempdir().unwrap();

    // The ConfigMap's file, where the Deployment mounts it (here: a temporary folder).
    let cm = rendered("templates/configmap.yaml", &REDIS_SECRET);
    let config = cm["data"]["tollgate.yaml"]
        .as_str()
        .expect("data.tollgate.yaml");
    std::fs::write(dir.path().join("tollgate.yaml"), config).unwrap();

    let dep = rendered("templates/deployment.yaml", &REDIS_SECRET);
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .expect("the config volume is mounted");
    let mount_path = mount["mountPath"].as_str().unwrap();
    // The environment: plain values as written, the Secret's Redis URL as this Redis.
    let mut env = Vec::new();
    for e in c["env"].as_sequence().unwrap() {
        let name = e["name"].as_str().unwrap().to_owned();
        let value = match e["value"].as_str() {
            Some(v) if name == "TOLLGATE_DATA_DIR" => {
                assert!(v.starts_with('/'));
                dir.path().join("data").display().to_string()
            }
            Some(v) => v.to_owned(),
            None => {
                assert_eq!(e["valueFrom"]["secretKeyRef"]["name"], "tollgate-redis");
                format!("redis://127.0.0.1:{}/0", redis.1)
            }
        };
        env.push((name, value));
    }
    assert!(env.iter().any(|(k, _)| k == "REDIS_URL"), "{env:?}");
    check(&dir.path().join("tollgate.yaml"), &env);

    // The container's arguments, the mount and the two ports mapped as a pod maps them.
    let (proxy, admin) = (free_port(), free_port());
    let args: Vec<String> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace(mount_path, &dir.path().display().to_string())
                .replace(":8000", &format!(":{proxy}"))
                .replace(":8081", &format!(":{admin}"))
        })
        .collect();
    assert_eq!(args[0], "run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(&args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = answers(admin, "GET /healthz HTTP/1.0\r\n\r\n", "HTTP/1.0 200");
    let probes: Vec<(String, String)> = ["livenessProbe", "readinessProbe"]
        .iter()
        .map(|p| {
            assert_eq!(
                c[*p]["httpGet"]["port"], "admin",
                "{p} probes the admin port"
            );
            get(admin, c[*p]["httpGet"]["path"].as_str().unwrap())
        })
        .collect();
    let (_, shown) = get(admin, "/config");
    let (_, policies) = get(admin, "/policies");
    let helm_test = chart::helm_test_script(&REDIS_SECRET, admin);
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "the pod's tollgate never answered /healthz");
    for (status, _) in &probes {
        assert!(status.contains(" 200 "), "{probes:?}");
    }
    assert!(
        helm_test.0,
        "`helm test`'s pod failed against it: {}",
        helm_test.1
    );
    // Its store is the Redis, shown as written: the variable, never the URL it holds.
    let config: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(config["store"]["backend"], "redis", "{shown}");
    assert_eq!(config["store"]["url"], "${REDIS_URL}", "{shown}");
    assert!(!shown.contains(&format!(":{}/0", redis.1)), "{shown}");
    let policies: serde_json::Value = serde_json::from_str(&policies).unwrap();
    assert_eq!(policies["store"]["backend"], "redis", "{policies}");
}

#[test]
fn the_compose_replicas_config_is_one_tollgate_accepts() {
    let env = [
        ("REDIS_URL".to_owned(), "redis://redis:6379/0".to_owned()),
        ("TOLLGATE_ADMIN_TOKEN".to_owned(), "change-me".to_owned()),
    ];
    check(&Path::new(ROOT).join("deploy/tollgate.yaml"), &env);
    let compose = std::fs::read_to_string(Path::new(ROOT).join("deploy/compose.yaml")).unwrap();
    let doc: Value = yaml_serde::from_str(&compose).unwrap();
    let services = doc["services"].as_mapping().unwrap();
    let replicas = services
        .keys()
        .filter(|k| k.as_str().is_some_and(|k| k.starts_with("tollgate-")))
        .count();
    assert_eq!(replicas, 3, "three replicas");
    assert!(services.contains_key("redis"));
    // A stop waits for the drain (30 s), and the admin token is the operator's own.
    let t = &doc["x-tollgate"];
    let grace: u64 = t["stop_grace_period"]
        .as_str()
        .and_then(|g| g.strip_suffix('s'))
        .and_then(|g| g.parse().ok())
        .unwrap();
    assert!(
        grace > 30,
        "stop_grace_period {grace}s is shorter than the drain"
    );
    let token = t["environment"]["TOLLGATE_ADMIN_TOKEN"].as_str().unwrap();
    assert!(token.contains(":?"), "no default token: {token}");
}
