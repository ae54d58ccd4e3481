//! Gateway processes sharing a real Redis, as replicas do: a concurrency slot held by a
//! gateway that is killed (`kill -9`, no chance to give it back) returns when its lease
//! ends, and never before, on one Redis and on a 3-node Redis Cluster. `.ci/run`
//! installs `redis-server`.

#[path = "../../tollgate/tests/support/redis_procs.rs"]
#[allow(dead_code)]
mod redis_procs;

use redis_procs::{RedisCluster, RedisServer, free_port};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `done` every 20 ms for up to `secs`: whether it came true.
fn eventually(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A gateway process on `proxy` with `config` (its log read and dropped).
fn gateway(config: &std::path::Path, proxy: u16) -> Proc {
    logging_gateway(config, proxy).0
}

/// GET `url` through the forward proxy on `proxy`: the status code.
fn get(proxy: u16, url: &str) -> u16 {
    get_cached(proxy, url).0
}

#[test]
fn a_killed_gateways_concurrency_slot_returns_when_its_lease_ends() {
    let redis = RedisServer::start();
    slot_returns_when_its_lease_ends(&format!("  url: {}\n", redis.url()));
}

#[test]
fn on_a_cluster_a_killed_gateways_concurrency_slot_returns_when_its_lease_ends() {
    let cluster = RedisCluster::start();
    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .map(|p| format!("'redis://127.0.0.1:{p}'"))
        .collect();
    // A Cluster's first answer waits for its slot map: more than the default 20 ms.
    slot_returns_when_its_lease_ends(&format!(
        "  cluster: [{}]\n  timeout: 500ms\n",
        seeds.join(", ")
    ));
}

/// Two gateways on the Redis `store` names (its lines under `store:`), a concurrency of
/// one: the slot a takes holds b off while a renews it, and after a's `kill -9`, until
/// its lease ends.
fn slot_returns_when_its_lease_ends(store: &str) {
    // An upstream that answers at once, except /hold, which it never answers (and says
    // when it has it: the request then holds the slot).
    let (up_port, held_now, _) = holding_upstream(|head, _| head.starts_with("GET /hold"));
    let (_dir, config) = config_file(&format!(
        "store:\n  backend: redis\n{store}  lease_ttl: 2s\npolicies:\n  - name: p\n    concurrency: {{max: 1}}\n"
    ));
    let (a_port, b_port) = (free_port(), free_port());
    let a = gateway(&config, a_port);
    let b = gateway(&config, b_port);
    let held = format!("http://127.0.0.1:{up_port}/hold");
    std::thread::spawn(move || get(a_port, &held));
    held_now
        .recv_timeout(Duration::from_secs(10))
        .expect("gateway a never forwarded the held request");
    let other = format!("http://127.0.0.1:{up_port}/other");
    assert_eq!(get(b_port, &other), 429, "the slot is a's");
    // Held past twice its lease's ttl: a renews it, so it stays a's.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        get(b_port, &other),
        429,
        "a renews its lease while the request runs"
    );
    // a dies holding it: no release is sent.
    drop(a);
    // Renewed no more, the lease ends within its ttl (2 s; renewed at most 2/3 s ago,
    // so it is still a's at first).
    assert_eq!(
        get(b_port, &other),
        429,
        "the lease outlives its holder for a while"
    );
    assert!(
        eventually(10, || get(b_port, &other) == 200),
        "the killed gateway's slot never came back"
    );
    drop(b);
}

/// An upstream on a free port that answers `200 ok` at once, except the requests `hold`
/// picks (by their head and their number, from 0), which it never answers: its port, a
/// channel told of each held request, and the count of connections it took.
fn holding_upstream(
    hold: impl Fn(&str, usize) -> bool + Send + Sync + 'static,
) -> (
    u16,
    std::sync::mpsc::Receiver<()>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = up.local_addr().unwrap().port();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (holding, held_now) = std::sync::mpsc::channel();
    let counted = calls.clone();
    let hold = std::sync::Arc::new(hold);
    std::thread::spawn(move || {
        for conn in up.incoming().flatten() {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (holding, hold) = (holding.clone(), hold.clone());
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                let got = conn.read(&mut buf).unwrap_or(0);
                if hold(&String::from_utf8_lossy(&buf[..got]), n) {
                    let _ = holding.send(());
                    std::thread::sleep(Duration::from_secs(3600));
                }
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
            });
        }
    });
    (port, held_now, calls)
}

/// `text` as a config file in a folder of its own (kept while the folder is).
fn config_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, text).unwrap();
    (dir, config)
}

/// A gateway process with `config` whose log (stderr) is read line by line.
fn logging_gateway(
    config: &std::path::Path,
    proxy: u16,
) -> (Proc, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["run", "--listen", &format!("127.0.0.1:{proxy}")])
        .args(["--admin", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr).lines() {
            let _ = tx.send(l.unwrap_or_default());
        }
    });
    assert!(
        eventually(10, || TcpStream::connect(("127.0.0.1", proxy)).is_ok()),
        "the gateway never listened"
    );
    (Proc(child), rx)
}

#[test]
fn a_wrong_redis_password_is_said_at_warn_once_with_the_fix() {
    let redis = RedisServer::start();
    redis.cli(&["CONFIG", "SET", "requirepass", "the-right-one"]);
    let up = TcpListener::bind("127.0.0.1:0").unwrap();
    let up_port = up.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in up.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(
        &config,
        format!(
            "store:\n  backend: redis\n  url: 'redis://:not-the-password@127.0.0.1:{}'\npolicies:\n  - name: p\n    rate_limit: {{limit: 100, window: hour}}\n",
            redis.port
        ),
    )
    .unwrap();
    let proxy = free_port();
    let (_gw, log) = logging_gateway(&config, proxy);
    // Requests still pass (on_error: local), across several backoffs.
    for _ in 0..5 {
        assert_eq!(get(proxy, &format!("http://127.0.0.1:{up_port}/x")), 200);
        std::thread::sleep(Duration::from_millis(150));
    }
    let mut lines = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        match log.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => lines.push(l),
            Err(_) if lines.iter().any(|l| l.contains("shared store")) => break,
            Err(_) => {}
        }
    }
    let said: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("shared store"))
        .collect();
    assert_eq!(said.len(), 1, "once per cause: {lines:#?}");
    assert!(
        said[0].contains("WARN")
            && said[0].contains("auth")
            && said[0].contains("password in `store.url`"),
        "{said:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("not-the-password")),
        "{lines:#?}"
    );
}

/// GET `url` through the forward proxy on `proxy`: the status and `x-tollgate-cache`.
fn get_cached(proxy: u16, url: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).unwrap();
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let cache = out
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("x-tollgate-cache")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (status, cache)
}

#[test]
fn a_replica_killed_mid_fetch_costs_the_others_at_most_one_call_each() {
    let redis = RedisServer::start();
    // The provider holds its first call for good (the replica making it is killed), and
    // answers the others at once, counting them.
    let (up_port, held_now, calls) = holding_upstream(|_, n| n == 0);
    let (_dir, config) = config_file(&format!(
        "store:\n  backend: redis\n  url: {}\n  timeout: 500ms\npolicies:\n  - name: c\n    cache: {{ttl: 60s, store: shared, max_wait: 2s}}\n",
        redis.url()
    ));
    let ports = [free_port(), free_port(), free_port()];
    let a = gateway(&config, ports[0]);
    let others = [gateway(&config, ports[1]), gateway(&config, ports[2])];
    let url = format!("http://127.0.0.1:{up_port}/item");
    let held = url.clone();
    let a_port = ports[0];
    std::thread::spawn(move || get_cached(a_port, &held));
    held_now
        .recv_timeout(Duration::from_secs(10))
        .expect("gateway a never fetched");
    // a dies holding the fetch's lease: nothing is given back.
    drop(a);
    // The others miss the same key at once: they wait for a's lease to end, then one
    // of them fetches (or each, past max_wait): never more than one call each.
    let answers: Vec<(u16, String)> = std::thread::scope(|s| {
        let asks: Vec<_> = ports[1..]
            .iter()
            .map(|&p| {
                let url = &url;
                s.spawn(move || get_cached(p, url))
            })
            .collect();
        asks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (status, _) in &answers {
        assert_eq!(*status, 200, "{answers:?}");
    }
    let made = calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (2..=3).contains(&made),
        "a's call and at most one per other replica: {made} ({answers:?})"
    );
    // From now on the entry serves every surviving replica: no more calls.
    for &p in &ports[1..] {
        let (status, cache) = get_cached(p, &url);
        assert_eq!(status, 200);
        assert!(cache == "hit" || cache == "shared-hit", "{cache}");
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), made);
    drop(others);
}
