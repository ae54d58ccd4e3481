//! Generated configs, valid and hostile, fed to validation (`check`) and to a running
//! gateway's reload: every one is accepted or refused with messages, never a panic.

use crate::support::*;
use serde_json::{Value, json};

/// Where a value can go: (section path, key, whether the key takes a list).
const KEYS: &[(&str, &str, bool)] = &[
    ("listen", "address", false),
    ("listen", "max_header_bytes", false),
    ("listen", "header_read_timeout", false),
    ("listen", "max_concurrent_streams", false),
    ("listen", "send_timeout", false),
    ("admin", "address", false),
    ("admin", "token", false),
    ("upstream", "connect_timeout", false),
    ("upstream", "response_timeout", false),
    ("upstream", "dns_ttl", false),
    ("upstream", "expect_continue_timeout", false),
    ("upstream.pool", "idle_timeout", false),
    ("upstream.pool", "max_idle_per_host", false),
    ("upstream.tls", "extra_ca_file", false),
    ("upstream.tls", "insecure_skip_verify", true),
    ("domains", "allow", true),
    ("domains", "deny", true),
    ("egress", "deny_private", false),
    ("egress", "deny_metadata", false),
    ("egress", "deny", true),
    ("egress", "allow", true),
    ("egress", "connect_ports", true),
    ("log", "level", false),
    ("log", "format", false),
    ("log", "queue_capacity", false),
    ("metrics", "max_hosts", false),
    ("shutdown", "drain_timeout", false),
];

/// Edge values of every type: limits, overflows, negatives, wrong types, odd text.
fn pool() -> Vec<Value> {
    vec![
        json!(0),
        json!(1),
        json!(-1),
        json!(443),
        json!(65535),
        json!(65536),
        json!(4294967295u64),
        json!(4294967296u64),
        json!(u64::MAX),
        json!(1e30),
        json!(0.5),
        json!(true),
        json!(null),
        json!(""),
        json!("0"),
        json!("1ms"),
        json!("30s"),
        json!("25h"),
        json!("2000y"),
        json!("18446744073709551615s"),
        json!("-1s"),
        json!("soon"),
        json!("64KiB"),
        json!("16EiB"),
        json!("99999999999999999999GiB"),
        json!("127.0.0.1:0"),
        json!("[::1]:0"),
        json!("0.0.0.0:0"),
        json!("*"),
        json!("1-65535"),
        json!("9-1"),
        json!("10.0.0.0/8"),
        json!("::/0"),
        json!("127.1"),
        json!("${TOLLGATE_SURELY_UNSET}"),
        json!("$${literal}"),
        json!("a b\tc"),
        json!("x".repeat(5000)),
        json!("/nonexistent/ca.pem"),
        json!("tollgate=debug,hyper=off"),
        json!({"nested": [1, 2]}),
        json!([1, "two"]),
    ]
}

fn put(root: &mut Value, section: &str, key: &str, value: Value) {
    let mut at = root;
    for part in section.split('.') {
        if !at.get(part).is_some_and(Value::is_object) {
            at[part] = json!({});
        }
        at = &mut at[part];
    }
    at[key] = value;
}

/// A config of 1–6 random keys with random values (JSON is YAML). Some get routes and
/// policies too.
fn generate(rng: &mut fastrand::Rng, pool: &[Value]) -> String {
    let mut root = json!({});
    for _ in 0..rng.usize(1..=6) {
        let (section, key, list) = KEYS[rng.usize(..KEYS.len())];
        let v = pool[rng.usize(..pool.len())].clone();
        let v = if list && rng.bool() { json!([v]) } else { v };
        put(&mut root, section, key, v);
    }
    if rng.u8(..4) == 0 {
        let prefix = pool[rng.usize(..pool.len())].clone();
        let upstream = pool[rng.usize(..pool.len())].clone();
        root["routes"] = json!([{"prefix": prefix, "upstream": upstream}]);
    }
    if rng.u8(..4) == 0 {
        let path = pool[rng.usize(..pool.len())].clone();
        root["policies"] = json!([{"name": "p", "match": {"path": path, "methods": [pool[rng.usize(..pool.len())].clone()]}}]);
    }
    serde_json::to_string(&root).unwrap()
}

#[test]
fn generated_configs_never_panic_validation() {
    let pool = pool();
    let mut rng = fastrand::Rng::with_seed(0x7011_9a7e);
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..3000 {
        let yaml = generate(&mut rng, &pool);
        match tollgate::Config::from_yaml(&yaml) {
            Ok(_) => valid += 1,
            Err(errors) => {
                invalid += 1;
                for e in errors {
                    assert!(!e.message.is_empty(), "{yaml}");
                }
            }
        }
    }
    assert!(
        valid > 50 && invalid > 500,
        "both kinds generated: {valid} valid, {invalid} invalid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_configs_never_panic_a_reload() {
    let pool = pool();
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "{}").unwrap();
    let gw = gateway_from_file(file.path(), false).await;
    let up = echo_upstream().await;
    let mut applied = 0;
    for _ in 0..150 {
        let yaml = generate(&mut rng, &pool);
        std::fs::write(file.path(), &yaml).unwrap();
        // A panic inside the reload would fail this task, not return Ok or Err.
        let shared = gw.shared().clone();
        let result = tokio::spawn(async move { tollgate::reload::reload(&shared).await })
            .await
            .unwrap_or_else(|e| panic!("reload panicked on {yaml}: {e}"));
        applied += usize::from(result.is_ok());
    }
    assert!(applied > 0, "some generated configs were applied");
    // Still serving on whatever config is in force: back to a plain one.
    std::fs::write(file.path(), "{}").unwrap();
    tollgate::reload::reload(gw.shared()).await.unwrap();
    let got = send(
        &client(),
        via_header(&gw, up.addr, "/").body(empty()).unwrap(),
    )
    .await;
    assert_eq!(got.status, 200);
}
