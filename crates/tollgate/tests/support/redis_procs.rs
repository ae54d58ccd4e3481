//! Redis processes of a test's own on free ports (a server, a 3-node Cluster, a primary
//! with its replica and a Sentinel), stopped when dropped. Only std and tempfile, so that
//! the gateway-process tests of `tollgate-cli` share it (`#[path]`).

/// A `redis-server` of the test's own on a free port (no persistence), stopped when
/// dropped. `.ci/run` installs it (Debian's `redis-server`).
pub struct RedisServer {
    pub port: u16,
    child: std::process::Child,
    /// Its working folder: a replica writes the snapshot of its full sync there, which
    /// would otherwise land in the test's working directory (the crate's folder).
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        // A free port can be taken by another test between our look and redis-server's
        // bind: a server that exits at once is started again on another.
        for _ in 0..5 {
            if let Some(s) = Self::try_on(free_port()) {
                return s;
            }
        }
        panic!("redis-server never started on a free port (five tries)");
    }

    /// A server on `port` (a restarted one keeps its predecessor's port, not its data).
    pub fn on(port: u16) -> Self {
        Self::try_on(port).unwrap_or_else(|| panic!("redis-server could not listen on {port}"))
    }

    /// A server on `port` once it answers PING; `None` when it exited first (the port
    /// was taken).
    fn try_on(port: u16) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new("redis-server")
            .current_dir(dir.path())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        let mut s = Self {
            port,
            child,
            _dir: dir,
        };
        answers(port, &mut s.child).then_some(s)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis-cli` against this server: its trimmed output.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args)
    }

    /// Kills the server at once (`kill -9`) and waits for it to be gone.
    pub fn kill(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A 3-node Redis Cluster of the test's own (`redis-cli --cluster create`, no replicas),
/// stopped when dropped.
pub struct RedisCluster {
    pub nodes: Vec<u16>,
    _dir: tempfile::TempDir,
    children: Vec<std::process::Child>,
}

impl RedisCluster {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        let mut children = Vec::new();
        for _ in 0..15 {
            if nodes.len() == 3 {
                break;
            }
            // Started again on another port when the one found free was taken.
            let port = free_port();
            let mut child = Self::node(dir.path(), port);
            if answers(port, &mut child) {
                children.push(child);
                nodes.push(port);
            }
        }
        assert_eq!(nodes.len(), 3, "three cluster nodes on free ports");
        let c = Self {
            nodes,
            _dir: dir,
            children,
        };
        let addrs: Vec<String> = c.nodes.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        for &p in &c.nodes {
            c.wait_for(p, &["CLUSTER", "INFO"], |o| o.contains("cluster_state:ok"));
        }
        c
    }

    /// A node on `port`, its cluster configuration in `dir` (so a restarted node is again
    /// the node it was, holding the same slots; its data is gone).
    fn node(dir: &std::path::Path, port: u16) -> std::process::Child {
        std::process::Command::new("redis-server")
            .current_dir(dir)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH")
    }

    /// Kills every node at once (`kill -9`).
    pub fn kill_all(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts every node again on its port and waits for the cluster to be whole.
    pub fn restart(&mut self) {
        self.children = self
            .nodes
            .iter()
            .map(|&p| Self::node(self._dir.path(), p))
            .collect();
        for &p in &self.nodes {
            self.wait_for(p, &["CLUSTER", "INFO"], |o| o.contains("cluster_state:ok"));
        }
    }

    fn wait_for(&self, port: u16, args: &[&str], ok: impl Fn(&str) -> bool) {
        for _ in 0..1000 {
            if ok(&self.cli(port, args)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("redis node {port} never answered {args:?} as expected");
    }

    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        redis_cli(port, args)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A primary, its replica and one Sentinel watching them (quorum 1, down after 300 ms), of
/// the test's own, stopped when dropped.
pub struct RedisSentinel {
    pub primary: RedisServer,
    pub replica: Option<RedisServer>,
    pub sentinel: u16,
    _dir: tempfile::TempDir,
    child: std::process::Child,
    /// Ports of killed primaries, held so that no other server takes them.
    held: Vec<std::net::TcpListener>,
}

/// Whether the `redis-server` `child` answers on `port` (within 10 s): it, not another
/// test's server that took the port (its `process_id`); `false` as soon as it has exited
/// (it could not listen there).
fn answers(port: u16, child: &mut std::process::Child) -> bool {
    let own = format!("process_id:{}", child.id());
    for _ in 0..1000 {
        if redis_cli(port, &["INFO", "server"])
            .lines()
            .any(|l| l.trim() == own)
        {
            return true;
        }
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("redis-server on port {port} never answered");
}

/// `redis-cli -p PORT ARGS…`: its trimmed output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (5 s at most) for `ok`; fails the test when it never holds.
fn wait_until(what: &str, ok: impl Fn() -> bool) {
    for _ in 0..500 {
        if ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{what}: never happened");
}

impl RedisSentinel {
    pub const MASTER: &'static str = "tg";

    pub fn start() -> Self {
        let primary = RedisServer::start();
        let replica = RedisServer::start();
        assert_eq!(
            replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port.to_string()]),
            "OK"
        );
        wait_until("the replica in sync", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        let dir = tempfile::tempdir().unwrap();
        let sentinel = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {sentinel}\nbind 127.0.0.1\nsentinel monitor {m} 127.0.0.1 {p} 1\nsentinel down-after-milliseconds {m} 300\nsentinel failover-timeout {m} 2000\n",
                m = Self::MASTER,
                p = primary.port
            ),
        )
        .unwrap();
        let child = std::process::Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let port = replica.port.to_string();
        let s = Self {
            primary,
            replica: Some(replica),
            sentinel,
            _dir: dir,
            child,
            held: Vec::new(),
        };
        wait_until("the Sentinel to know the replica", || {
            s.sentinel_cli(&["SENTINEL", "REPLICAS", Self::MASTER])
                .contains(&port)
        });
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel)
    }

    pub fn sentinel_cli(&self, args: &[&str]) -> String {
        redis_cli(self.sentinel, args)
    }

    /// The port of the primary the Sentinel names now.
    pub fn named_primary(&self) -> Option<u16> {
        self.sentinel_cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::MASTER])
            .lines()
            .last()
            .and_then(|p| p.trim().parse().ok())
    }

    /// Kills the primary (`kill -9`) and waits for the Sentinel to promote the replica.
    /// The dead primary's port stays held by a listener that never answers: another
    /// test's Redis started meanwhile on that free port would otherwise answer a gateway
    /// still reconnecting to the old address, and count there.
    pub fn fail_over(&mut self) {
        let replica = self.replica.take().expect("a replica to promote");
        let port = std::mem::replace(&mut self.primary, replica).kill();
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            self.held.push(l);
        }
        wait_until("the Sentinel to promote the replica", || {
            self.named_primary() == Some(self.primary.port)
        });
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
