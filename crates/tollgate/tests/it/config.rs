//! Config parsing and validation: unknown keys rejected, errors with field paths and
//! line:column, `${ENV}` substitution, defaults, the committed JSON Schema.

use tollgate::Config;
use tollgate::config::ConfigError;

fn errors(yaml: &str) -> Vec<ConfigError> {
    Config::from_yaml(yaml).expect_err("config should be invalid")
}

#[test]
fn empty_and_comment_only_files_are_the_defaults() {
    for yaml in ["", "# nothing\n", "{}"] {
        let c = Config::from_yaml(yaml).unwrap();
        assert_eq!(c.listen.address.to_string(), "127.0.0.1:8000");
        assert_eq!(c.admin.address.to_string(), "127.0.0.1:8081");
        assert!(c.routes.is_empty());
    }
}

#[test]
fn unknown_keys_are_rejected_with_path_and_location() {
    let e = errors("upstream:\n  pool:\n    max_idle: 3\n");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].path, "upstream.pool.max_idle");
    assert!(
        e[0].message.contains("unknown field `max_idle`"),
        "{}",
        e[0].message
    );
    assert_eq!(e[0].location.map(|l| l.0), Some(3));
    let shown = e[0].to_string();
    assert!(
        shown.starts_with("upstream.pool.max_idle: unknown field `max_idle`")
            && shown.contains("(line 3, column"),
        "{shown}"
    );
}

#[test]
fn a_duplicate_key_is_pointed_at_where_it_is_written_again() {
    for (yaml, path, first, at) in [
        // Two `policies:` — what appending two `tollgate har mock` outputs used to give.
        (
            "policies:\n  - name: a\n    match: { host: a.com }\n    mock: { status: 200 }\n# more\npolicies:\n  - name: b\n    match: { host: b.com }\n    mock: { status: 200 }\n",
            "",
            1,
            (6, 1),
        ),
        (
            "listen:\n  address: 127.0.0.1:1\nadmin:\n  address: 127.0.0.1:2\n  # again\n  address: 127.0.0.1:3\n",
            "admin",
            4,
            (6, 3),
        ),
        (
            "policies:\n  - name: a\n    match: { host: a.com, host: b.com }\n    mock: { status: 200 }\n",
            "policies[0].match",
            3,
            (3, 27),
        ),
    ] {
        let e = errors(yaml);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].path, path, "{e:?}");
        assert_eq!(e[0].location, Some(at), "{yaml}\n{}", e[0]);
        assert!(
            e[0].message.contains(&format!("first at line {first}")),
            "{}",
            e[0]
        );
    }
}

#[test]
fn type_errors_name_the_field() {
    let e = errors("upstream:\n  pool:\n    max_idle_per_host: lots\n");
    assert_eq!(e[0].path, "upstream.pool.max_idle_per_host");
    assert!(e[0].location.is_some());
    let e = errors("routes:\n  - prefix: /a\n    upstream: http://a\n  - prefix: /b\n");
    assert_eq!(e[0].path, "routes[1]");
    assert!(
        e[0].message.contains("missing field `upstream`"),
        "{}",
        e[0].message
    );
}

#[test]
fn validation_reports_every_error_with_its_path() {
    let e = errors(
        "listen:\n  address: nowhere\n  max_header_bytes: 10\nupstream:\n  connect_timeout: 5\n  response_timeout: 0s\ndomains:\n  deny: ['bad host']\nlog:\n  format: xml\npolicies:\n  - name: p\n    match:\n      path: no-slash\n      methods: ['G E T']\n",
    );
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "listen.address",
        "listen.max_header_bytes",
        "upstream.connect_timeout",
        "upstream.response_timeout",
        "domains.deny[0]",
        "log.format",
        "policies[0].match.path",
        "policies[0].match.methods[0]",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    // A value outside its unit type is placed by the parser, at its key's line.
    let at = |path: &str| e.iter().find(|e| e.path == path).and_then(|e| e.location);
    assert_eq!(at("listen.max_header_bytes").map(|l| l.0), Some(3), "{e:?}");
    assert_eq!(
        at("upstream.connect_timeout").map(|l| l.0),
        Some(5),
        "{e:?}"
    );
    assert_eq!(
        at("upstream.response_timeout").map(|l| l.0),
        Some(6),
        "{e:?}"
    );
}

/// A key written as one of a set of words is read like a unit: a wrong word is reported
/// with every other error, at its line, saying which words there are.
#[test]
fn a_wrong_word_is_reported_with_the_rest_at_its_line() {
    let e =
        errors("log:\n  format: xml\nstore:\n  on_error: ignore\n  sync: batch\n  timeout: 1h\n");
    let at = |path: &str| {
        e.iter()
            .find(|e| e.path == path)
            .unwrap_or_else(|| panic!("{path} missing from {e:?}"))
    };
    assert!(at("log.format").message.contains("`text`, `json`"), "{e:?}");
    assert_eq!(at("store.on_error").location.map(|l| l.0), Some(4), "{e:?}");
    assert!(
        at("store.on_error")
            .message
            .contains("`local`, `allow`, `deny`"),
        "{e:?}"
    );
    assert_eq!(at("store.sync").location.map(|l| l.0), Some(5), "{e:?}");
    at("store.timeout");
}

#[test]
fn match_keys_that_could_never_apply_are_refused_with_what_to_write() {
    for (m, path, says) in [
        (
            "{ host: '127.0.0.5:8443' }",
            "policies[0].match.host",
            "write `127.0.0.5`",
        ),
        (
            "{ host: api.example.com, path: '/v1/items?page=2' }",
            "policies[0].match.path",
            "write `/v1/items`",
        ),
    ] {
        let e = errors(&format!(
            "policies:\n  - name: p\n    match: {m}\n    mock: {{ status: 200 }}\n"
        ));
        assert_eq!(e[0].path, path, "{e:?}");
        assert!(e[0].message.contains(says), "{}", e[0]);
    }
    // IPv6 literals keep their colons.
    assert!(
        tollgate::Config::from_yaml(
            "policies:\n  - name: p\n    match: { host: '[::1]' }\n    mock: { status: 200 }\n"
        )
        .is_ok()
    );
}

#[test]
fn env_substitution_and_missing_variables() {
    let e = errors(
        "routes:\n  - prefix: /x\n    upstream: https://${TOLLGATE_SURELY_UNSET_VAR}.example.com\n",
    );
    assert_eq!(e[0].path, "routes[0].upstream");
    assert!(
        e[0].message.contains("TOLLGATE_SURELY_UNSET_VAR"),
        "{}",
        e[0].message
    );
    // SAFETY: only this test uses this variable.
    unsafe { std::env::set_var("TOLLGATE_TEST_HOST", "api.example.com") };
    let c = Config::from_yaml(
        "routes:\n  - prefix: /x\n    upstream: https://${TOLLGATE_TEST_HOST}/v2\n",
    )
    .unwrap();
    let (route, path) = c.routes.find("/x/y").unwrap();
    assert_eq!((&*route.target.host, &*path), ("api.example.com", "/v2/y"));
}

#[test]
fn sizes_durations_and_policies_parse() {
    let c = Config::from_yaml(
        "listen:\n  max_header_bytes: 1MiB\nupstream:\n  response_timeout: 1m30s\n  pool:\n    idle_timeout: 250ms\npolicies:\n  - name: users\n    match:\n      host: '*.example.com'\n      path: /v1/users/{id}/*\n      methods: [get, POST]\n",
    )
    .unwrap();
    assert_eq!(c.listen.max_header_bytes, 1 << 20);
    assert_eq!(c.upstream.response_timeout.as_secs(), 90);
    assert_eq!(c.upstream.pool_idle_timeout.as_millis(), 250);
    let p = c
        .policies
        .find("api.example.com", &http::Method::GET, "/v1/users/7/posts")
        .unwrap()
        .unwrap();
    assert_eq!(c.policies.policies[p].name, "users");
    assert!(
        c.policies
            .find("api.example.com", &http::Method::DELETE, "/v1/users/7")
            .unwrap()
            .is_none()
    );
}

#[test]
fn committed_schema_is_current() {
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tollgate.schema.json"
    ))
    .expect("tollgate.schema.json is committed at the repository root");
    assert!(
        committed == tollgate::config::json_schema(),
        "tollgate.schema.json is stale: run `cargo run -- schema > tollgate.schema.json`"
    );
}

#[test]
fn schema_states_defaults() {
    let schema: serde_json::Value = serde_json::from_str(&tollgate::config::json_schema()).unwrap();
    let text = schema.to_string();
    for default in [
        "127.0.0.1:8000",
        "127.0.0.1:8081",
        "64KiB",
        "5s",
        "1m",
        "90s",
        "30s",
    ] {
        assert!(
            text.contains(&format!("\"{default}\"")),
            "default {default} missing from schema"
        );
    }
    // A unit field's range comes from its type, after its doc comment.
    let connect = &schema["$defs"]["RawUpstream"]["properties"]["connect_timeout"];
    assert!(
        connect["description"]
            .as_str()
            .unwrap()
            .ends_with("504 `upstream_timeout`. A duration from 1ms to 1h."),
        "{connect}"
    );
    assert!(connect.get("x-range").is_none(), "{connect}");
}

/// The secrets the examples name, set so that they validate as `tollgate check` would
/// with them exported.
fn example_secrets() {
    for name in [
        "GITHUB_TOKEN",
        "OPENAI_KEY_A",
        "OPENAI_KEY_B",
        "OPENAI_API_KEY",
        "STRIPE_SECRET_KEY",
        "KEY",
        "USER",
        "PASS",
    ] {
        // SAFETY: set before any reader in this test binary needs a different value.
        unsafe { std::env::set_var(name, "example-secret") };
    }
    // SAFETY: as above.
    unsafe { std::env::set_var("REDIS_URL", "redis://:example-secret@127.0.0.1:6379/0") };
}

/// What `tollgate check` does: validate, then build the policy chains.
fn check(config: &Config) {
    assert_eq!(tollgate::check::check(config), Ok(Vec::new()));
}

#[test]
fn example_configs_are_valid() {
    example_secrets();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("examples/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            n += 1;
            match Config::load(&path) {
                Ok(c) => check(&c),
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(n >= 6);
}

/// Every whole config shown in the docs (```yaml blocks that start at column 0; indented
/// ones are fragments of a policy) passes `check`. Those that intercept assume the reader
/// ran `tollgate ca init`: they are checked with a CA made so.
#[test]
fn configs_in_the_docs_are_valid() {
    example_secrets();
    let ca = tempfile::tempdir().unwrap();
    tollgate::intercept::ca::Ca::create(ca.path(), false).unwrap();
    let with_ca = format!(
        "intercept:\n  ca: {{cert_file: {0}/tollgate-ca.pem, key_file: {0}/tollgate-ca-key.pem}}\n",
        ca.path().display()
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut n = 0;
    for doc in [
        "README.md",
        "docs/configuration.md",
        "docs/policies.md",
        "docs/architecture.md",
        "docs/aggregation.md",
        "docs/interception.md",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        for block in text.split("```yaml\n").skip(1) {
            let yaml = block.split("```").next().unwrap();
            if yaml.starts_with(' ') {
                continue;
            }
            n += 1;
            let yaml = &yaml.replacen("intercept:\n", &with_ca, 1);
            match Config::from_yaml(yaml) {
                Ok(c) => check(&c),
                Err(e) => panic!("{doc}: {e:?}\n{yaml}"),
            }
        }
    }
    assert!(n >= 8, "{n} configs found");
}

#[test]
fn every_value_has_a_range() {
    for (yaml, path, says) in [
        (
            "upstream:\n  dns_ttl: 2000y\n",
            "upstream.dns_ttl",
            "from 0 to 1d",
        ),
        (
            "upstream:\n  response_timeout: 2000y\n",
            "upstream.response_timeout",
            "to 1d",
        ),
        (
            "listen:\n  header_read_timeout: 0\n",
            "listen.header_read_timeout",
            "from 10ms",
        ),
        (
            "listen:\n  send_timeout: 0\n",
            "listen.send_timeout",
            "from 10ms",
        ),
        (
            "listen:\n  max_header_bytes: 0\n",
            "listen.max_header_bytes",
            "from 1KiB to 16MiB",
        ),
        (
            "listen:\n  max_concurrent_streams: 0\n",
            "listen.max_concurrent_streams",
            "from 1 to 100000",
        ),
        (
            "log:\n  queue_capacity: 18446744073709551615\n",
            "log.queue_capacity",
            "from 1 to",
        ),
        (
            "metrics:\n  max_hosts: 0\n",
            "metrics.max_hosts",
            "from 1 to 100000",
        ),
        (
            "shutdown:\n  drain_timeout: 1000h\n",
            "shutdown.drain_timeout",
            "to 1h",
        ),
        (
            "egress:\n  connect_ports: [0]\n",
            "egress.connect_ports[0]",
            "port 0",
        ),
        (
            "egress:\n  connect_ports: ['9-1']\n",
            "egress.connect_ports[0]",
            "a range",
        ),
        (
            "egress:\n  deny: ['10.0.0.0/33']\n",
            "egress.deny[0]",
            "CIDR",
        ),
    ] {
        let e = errors(yaml);
        assert_eq!(e[0].path, path, "{yaml}");
        assert!(e[0].message.contains(says), "{yaml}: {}", e[0].message);
    }
}

#[test]
fn check_builds_the_tls_config_run_builds() {
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        ca.path(),
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let e = errors(&format!(
        "upstream:\n  tls:\n    extra_ca_file: {}\n",
        ca.path().display()
    ));
    assert_eq!(e[0].path, "upstream.tls.extra_ca_file");
}

#[test]
fn messages_show_text_as_written_never_a_substituted_secret() {
    // SAFETY: only this test uses these variables.
    unsafe { std::env::set_var("TOLLGATE_TEST_SECRET", "hunter2-secret") };
    unsafe { std::env::set_var("TOLLGATE_TEST_CA_DIR", "/nonexistent-hunter2") };
    for yaml in [
        "routes:\n  - prefix: /x\n    upstream: ftp://host/${TOLLGATE_TEST_SECRET}\n",
        "routes:\n  - prefix: /x\n    upstream: 'http://h st/${TOLLGATE_TEST_SECRET}'\n",
        "upstream:\n  tls:\n    extra_ca_file: ${TOLLGATE_TEST_CA_DIR}/ca.pem\n",
    ] {
        let shown: Vec<String> = errors(yaml).iter().map(|e| e.to_string()).collect();
        let all = shown.join("\n");
        assert!(!all.contains("hunter2"), "{all}");
        assert!(
            all.contains("${TOLLGATE_TEST_"),
            "the text as written: {all}"
        );
    }
}

#[test]
fn messages_say_what_to_write_not_internal_types() {
    for (yaml, path, says, line) in [
        (
            "listen:\n  max_concurrent_streams: -1\n",
            "listen.max_concurrent_streams",
            "a whole number",
            2,
        ),
        ("domains: 5\n", "domains", "`key: value` lines", 1),
        ("routes:\n  prefix: /x\n", "routes", "a list", 2),
        (
            "log:\n  access_log: yes please\n",
            "log.access_log",
            "`true` or `false`",
            2,
        ),
        (
            "listen:\n  address: \"127.0.0.1:8000\nadmin:\n  address: x\nlog:\n  level: info\n",
            "listen.address",
            "never closed",
            2,
        ),
        ("listen:\n\taddress: 127.0.0.1:8000\n", "listen", "tab", 2),
    ] {
        let e = errors(yaml);
        let shown = e[0].to_string();
        assert_eq!(e[0].path, path, "{shown}");
        assert!(e[0].message.contains(says), "{yaml:?}: {shown}");
        assert_eq!(e[0].location.map(|l| l.0), Some(line), "{shown}");
        for internal in ["Raw", "u32", "usize", "struct", "sequence"] {
            assert!(!shown.contains(internal), "{shown}");
        }
    }
}

#[test]
fn listen_and_admin_take_an_address_alone() {
    let c = Config::from_yaml("listen: 127.0.0.1:9100\nadmin: 127.0.0.1:9101\n").unwrap();
    assert_eq!(c.listen.address.to_string(), "127.0.0.1:9100");
    assert_eq!(c.admin.address.to_string(), "127.0.0.1:9101");
    assert_eq!(
        c.listen.max_header_bytes,
        64 * 1024,
        "the rest stays default"
    );
    let e = errors("listen:\n  adress: 127.0.0.1:1\n");
    assert!(
        e[0].message.contains("unknown field `adress`"),
        "{}",
        e[0].message
    );
}

/// `examples/full.yaml` lists every key of the schema (README says it does).
#[test]
fn full_yaml_lists_every_key() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/tollgate.schema.json")).unwrap(),
    )
    .unwrap();
    fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::Object(p)) = m.get("properties") {
                    out.extend(p.keys().cloned());
                }
                m.values().for_each(|v| keys(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut all = std::collections::BTreeSet::new();
    keys(&schema, &mut all);
    let full = std::fs::read_to_string(format!("{root}/examples/full.yaml")).unwrap();
    let written = |k: &str| {
        full.lines().any(|l| {
            let l = l.trim_start().trim_start_matches("- ");
            l.starts_with(&format!("{k}:"))
                || l.contains(&format!("{{{k}:"))
                || l.contains(&format!(", {k}:"))
        })
    };
    let missing: Vec<&String> = all.iter().filter(|k| !written(k)).collect();
    assert!(missing.is_empty(), "examples/full.yaml lacks {missing:?}");
}

/// `GET /config` shows every key: each key path written in `examples/full.yaml` (which
/// lists every key) is in the effective config.
#[test]
fn the_effective_config_shows_every_key() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let text = std::fs::read_to_string(format!("{root}/examples/full.yaml")).unwrap();
    let config = tollgate::Config::load_env_optional(std::path::Path::new(&format!(
        "{root}/examples/full.yaml"
    )))
    .unwrap_or_else(|e| panic!("{e}"))
    .0;
    let written: serde_json::Value = yaml_serde::from_str(&text).unwrap();
    let effective = config.effective();
    fn walk(w: &serde_json::Value, e: &serde_json::Value, path: String, out: &mut Vec<String>) {
        match (w, e) {
            (serde_json::Value::Object(wm), serde_json::Value::Object(em)) => {
                for (k, v) in wm {
                    let p = format!("{path}.{k}");
                    match em.get(k) {
                        Some(ev) => walk(v, ev, p, out),
                        None => out.push(p),
                    }
                }
            }
            (serde_json::Value::Array(wa), serde_json::Value::Array(ea)) => {
                // A list's items are values; the keys inside them must show.
                for (i, (v, ev)) in wa.iter().zip(ea).enumerate() {
                    walk(v, ev, format!("{path}[{i}]"), out);
                }
            }
            (serde_json::Value::Object(_), _) => out.push(path),
            _ => {}
        }
    }
    let mut missing = Vec::new();
    walk(&written, &effective, String::new(), &mut missing);
    assert!(missing.is_empty(), "/config lacks {missing:#?}");
}

/// The keys `/config` shows as written keep their secrets masked: the headers sent to a
/// trace endpoint or a HAR collector, the obfuscation key, the admin token.
#[test]
fn the_effective_config_masks_the_secrets_it_shows_as_written() {
    let c = tollgate::Config::from_yaml(
        "admin: {address: '127.0.0.1:9901', token: admin-token-literal}\ndiagnosis:\n  traces: {enabled: true, endpoint: 'http://127.0.0.1:4318/v1/traces', headers: {authorization: Bearer trace-secret-literal, x-env: '${HOME}'}}\n  har:\n    enabled: true\n    collector: {url: 'http://127.0.0.1:9/har', headers: {x-api-key: collector-secret-literal}}\n    obfuscate: {key: obfuscation-key-literal-0123456789}\n",
    )
    .unwrap();
    let shown = c.effective();
    let text = shown.to_string();
    for secret in [
        "admin-token-literal",
        "trace-secret-literal",
        "collector-secret-literal",
        "obfuscation-key-literal",
    ] {
        assert!(!text.contains(secret), "/config shows `{secret}`: {text}");
    }
    assert_eq!(shown["diagnosis"]["traces"]["headers"]["x-env"], "${HOME}");
    assert_eq!(
        shown["diagnosis"]["traces"]["headers"]["authorization"],
        "MASKED"
    );
}

/// A reload diff names the leaf path of a key `/config` shows only as written.
#[test]
fn the_reload_diff_names_every_changed_leaf() {
    let a = tollgate::Config::from_yaml("diagnosis:\n  traces: {batch_size: 512}\n").unwrap();
    let b = tollgate::Config::from_yaml("diagnosis:\n  traces: {batch_size: 64}\n").unwrap();
    let d = tollgate::config::diff(&a, &b);
    assert_eq!(
        d.paths,
        vec!["diagnosis.traces.batch_size".to_owned()],
        "{d:?}"
    );
    assert_eq!(d.changed, vec!["diagnosis"]);
}

/// The one error of `yaml`, as `path: message`.
fn the_error(yaml: &str) -> String {
    let e = errors(yaml);
    assert_eq!(e.len(), 1, "{e:?}");
    format!("{}: {}", e[0].path, e[0].message)
}

#[test]
fn mistakes_that_were_accepted_silently_are_refused_with_what_to_write() {
    // A level tracing would read as a target, switching the log off.
    let e = the_error("log: {level: verbose}\n");
    assert!(
        e.starts_with("log.level") && e.contains("`verbose` is not a level"),
        "{e}"
    );
    Config::from_yaml("log: {level: 'warn,tollgate=debug'}\n").unwrap();
    // A method that is none.
    let e = the_error(
        "policies:\n  - name: p\n    match: {methods: [GETT]}\n    rate_limit: {limit: 1, window: hour}\n",
    );
    assert!(
        e.contains("methods[0]") && e.contains("`GETT` is not an HTTP method"),
        "{e}"
    );
    Config::from_yaml("policies:\n  - name: p\n    match: {methods: [get, PATCH]}\n    rate_limit: {limit: 1, window: hour}\n").unwrap();
    // The admin API on the proxy's own port passed check and failed at run.
    let e = the_error("listen: {address: '127.0.0.1:9100'}\nadmin: {address: '0.0.0.0:9100'}\n");
    assert!(
        e.starts_with("admin.address") && e.contains("port of its own"),
        "{e}"
    );
    // A bracket in a host pattern, a URL where a host goes.
    let e = the_error("domains: {allow: ['api.[github.com']}\n");
    assert!(e.starts_with("domains.allow[0]"), "{e}");
    let e = the_error("domains: {allow: ['https://api.openai.com/']}\n");
    assert!(e.contains("write the host alone, `api.openai.com`"), "{e}");
    let e = the_error(
        "policies:\n  - name: p\n    match: {host: 'https://api.openai.com/v1'}\n    rate_limit: {limit: 1, window: hour}\n",
    );
    assert!(e.contains("`api.openai.com`"), "{e}");
}

#[test]
fn errors_found_after_parsing_have_lines_and_every_bad_value_is_reported() {
    // Validation's errors (a window, a route's prefix) carry where they are written.
    let e = errors(
        "routes:\n  - prefix: nope\n    upstream: http://x\npolicies:\n  - name: p\n    rate_limit: {limit: 5, window: fortnight}\n",
    );
    let at = |path: &str| {
        e.iter()
            .find(|e| e.path == path)
            .unwrap_or_else(|| panic!("{path}: {e:?}"))
            .location
    };
    assert_eq!(at("routes[0]").map(|l| l.0), Some(2), "{e:?}");
    assert_eq!(at("policies[0].rate_limit.window"), Some((6, 36)), "{e:?}");
    // A value of the wrong type no longer ends the parse: each is reported, with the
    // hint of its own field.
    let e = errors(
        "listen: {max_header_bytes: abc}\nupstream: {connect_timeout: true}\npolicies:\n  - name: p\n    rate_limit: {limit: true, window: hour}\n",
    );
    let text = format!("{e:?}");
    assert_eq!(e.len(), 3, "{text}");
    assert!(text.contains("`true` is not a whole number"), "{text}");
    assert!(text.contains("`true` is not a duration"), "{text}");
    assert!(
        !text.contains("such as `250ms`, `64KiB` or `20%`"),
        "{text}"
    );
    // An unclosed `{` is placed where it opened, not at the end of the file.
    let e = errors("policies:\n  - name: p\n    rate_limit: {limit: 5, window: hour\n");
    assert_eq!(e[0].location, Some((3, 17)), "{e:?}");
    assert!(e[0].message.contains("never closed"), "{e:?}");
}

/// The tests' config builder writes the YAML it stands for.
#[test]
fn a_built_config_is_the_yaml_it_stands_for() {
    let built = crate::support::config::config()
        .section("breakers", "{b: {consecutive_failures: 3}}")
        .local_policy(&[("breaker", "b"), ("retry", "{attempts: 2}")])
        .yaml();
    let c = tollgate::Config::from_yaml(&built).unwrap_or_else(|e| panic!("{e:?}\n{built}"));
    assert_eq!(c.policies.policies.len(), 1);
    assert_eq!(c.policies.policies[0].spec.remedies(), ["breaker", "retry"]);
}
