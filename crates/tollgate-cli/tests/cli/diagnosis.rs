//! `tollgate discover` and `tollgate har` as an operator reads a running gateway: the
//! endpoint table with the host's port, the policy, 5xx, cache hits and consumers; HAR
//! entries filtered by host, status and policy, as a table or JSON; and `har tail`
//! following the files as calls arrive.

use super::{
    discovered, emulator_config, get, provider, run_on_ephemeral_ports, signal, spawn, tollgate,
};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn discover_and_har_tell_port_policy_cache_5xx_and_consumers_and_tail_follows() {
    let (mut provider, p) = provider();
    let dir = tempfile::tempdir().unwrap();
    let har = dir.path().join("har");
    let cfg = emulator_config(
        dir.path(),
        &p[0],
        "cache: { ttl: 60s }",
        &format!(
            "  discovery: {{ enabled: true, consumer_header: x-consumer }}\n  har:\n    enabled: true\n    file: {{ dir: {} }}\n",
            har.display()
        ),
    );
    let (mut gw, a) = spawn(
        run_on_ephemeral_ports(&cfg).args(["--threads", "1"]),
        "tollgate listening:",
    );
    let (proxy, admin) = (a[0].clone(), a[1].clone());

    // `har tail --json`, started before the first call (no file yet: it waits).
    let mut tail = tollgate()
        .args(["har", "tail", "--json"])
        .arg(&har)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            if tx.send(l.unwrap()).is_err() {
                return;
            }
        }
    });
    let tailed = |n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .map(|_| {
                let line = rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("`har tail` printed the new entry");
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    };

    for consumer in ["ci", "ci", "web"] {
        let (status, _) = get(&proxy, "/api/get", &[("x-consumer", consumer)]);
        assert!(status.contains(" 200 "), "{status}");
    }
    let (status, _) = get(&proxy, "/api/status/503", &[("x-consumer", "ci")]);
    assert!(status.contains(" 503 "), "{status}");
    let statuses: Vec<u64> = tailed(4)
        .iter()
        .map(|e| e["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [200, 200, 200, 503]);

    // The table: host with its port, the policy, cache hits, 5xx, consumers, once the
    // observer has counted all four calls.
    let table = discovered(&admin, |t| {
        t.lines()
            .any(|l| l.contains("/get") && l.trim_start().starts_with("3 "))
            && t.contains("/status/")
    });
    let row = |endpoint: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.contains(endpoint))
            .unwrap_or_else(|| panic!("{endpoint} in\n{table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let head: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        [
            "COUNT",
            "METHOD",
            "HOST",
            "ENDPOINT",
            "POLICY",
            "2xx%",
            "429",
            "5xx",
            "CACHED",
            "p50",
            "ms",
            "p99",
            "ms",
            "CONSUMERS"
        ]
    );
    let get_row = row("/get");
    assert_eq!(get_row[0], "3");
    assert_eq!(get_row[2], p[0], "the host keeps its port");
    assert_eq!(get_row[4], "emulator");
    assert_eq!(get_row[8], "2", "two of three from the cache: {table}");
    assert_eq!(&get_row[11..], ["ci:2", "web:1"]);
    let failed = row("/status/");
    assert_eq!(failed[7], "1", "one 5xx: {table}");

    // `har list` filtered, as a table and as JSON.
    let list = |args: &[&str]| -> String {
        let o = tollgate()
            .args(["har", "list"])
            .arg(&har)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let five = list(&["--status", "5xx", "--json"]);
    let five: Vec<serde_json::Value> = five
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(five.len(), 1);
    assert_eq!(five[0]["status"], 503);
    assert_eq!(
        five[0]["n"], 4,
        "numbered as in the whole file, as `show` takes"
    );
    assert_eq!(five[0]["policy"], "emulator");
    assert_eq!(list(&["--host", &p[0]]).lines().count(), 1 + 4);
    assert_eq!(list(&["--host", "127.0.0.1"]).lines().count(), 1 + 4);
    assert_eq!(list(&["--host", "other.example"]).lines().count(), 1);
    assert_eq!(
        list(&["--policy", "emulator", "--status", "200"])
            .lines()
            .count(),
        1 + 3
    );
    let bad = tollgate()
        .args(["har", "list"])
        .arg(&har)
        .args(["--status", "2x"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("a class (`5xx`)"));

    // The tail follows: one more call, one more line.
    let (status, _) = get(&proxy, "/api/status/404", &[]);
    assert!(status.contains(" 404 "), "{status}");
    assert_eq!(tailed(1)[0]["status"], 404);

    let _ = tail.kill();
    let _ = tail.wait();
    signal(&gw, "-TERM");
    let _ = gw.wait();
    signal(&provider, "-TERM");
    let _ = provider.wait();
}
