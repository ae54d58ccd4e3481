//! Several config files as one (`--config` repeated, or a conf.d directory): the
//! cookbook's recipes joined as they are, clashes named with both files, errors found
//! after joining told in the file and line they came from, and a file added to the
//! directory picked up by a reload.

use crate::support::*;
use std::path::{Path, PathBuf};
use tollgate::config::ConfigFiles;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The joined files' errors, one line each.
fn errors(files: Vec<PathBuf>) -> Vec<String> {
    let e = ConfigFiles::new(files)
        .load(false)
        .map(|_| ())
        .expect_err("the files join into an invalid config");
    e.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn the_cookbooks_github_and_openai_recipes_join_without_editing() {
    let files = ConfigFiles::new(vec![
        format!("{ROOT}/examples/github.yaml").into(),
        format!("{ROOT}/examples/openai.yaml").into(),
    ]);
    // Their secrets are ${VARS} set where it runs: checked as `check --env-optional`.
    let (config, unset) = files.load(true).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = config
        .policies
        .policies
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert!(
        names.contains(&"github") && names.contains(&"openai-chat"),
        "{names:?}"
    );
    let routes = config.effective()["routes"].clone();
    let prefixes: Vec<&str> = routes
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["prefix"].as_str())
        .collect();
    assert_eq!(
        prefixes,
        ["/github", "/openai"],
        "lists joined in file order"
    );
    // Other tests set variables of their own in this process: only these are known.
    for u in &unset {
        assert!(
            ["GITHUB_TOKEN", "OPENAI_KEY_A", "OPENAI_KEY_B"]
                .iter()
                .any(|v| u.contains(v)),
            "{u}"
        );
    }
}

#[test]
fn a_policy_name_or_a_value_set_in_two_files_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.yaml",
        "listen: {address: 127.0.0.1:8000}\npolicies:\n  - name: github\n    match: {host: api.github.com}\n",
    );
    let b = write(
        dir.path(),
        "b.yaml",
        "listen: {address: 127.0.0.1:9000}\npolicies:\n  - name: other\n    match: {host: a.example}\n  - name: github\n    match: {host: b.example}\n",
    );
    let got = errors(vec![a.clone(), b.clone()]);
    let (a, b) = (a.display().to_string(), b.display().to_string());
    assert!(
        got.contains(&format!(
            "{b}: listen.address: also set in {a} (listen.address, line 1), to something else; set it in one file only (line 1, column 19)"
        )),
        "{got:#?}"
    );
    assert!(
        got.contains(&format!(
            "{b}: policies[1].name: a policy named `github` is already defined in {a} (policies[0], line 3); give one of them another name (line 5, column 11)"
        )),
        "{got:#?}"
    );
}

#[test]
fn the_same_value_in_two_files_is_no_clash_and_sections_merge_key_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.yaml",
        "listen: {address: 127.0.0.1:8000}\nupstream: {pool: {idle_timeout: 30s}}\n",
    );
    let b = write(
        dir.path(),
        "b.yaml",
        "listen: {address: 127.0.0.1:8000, max_header_bytes: 32768}\n",
    );
    let (config, _) = ConfigFiles::new(vec![a, b])
        .load(false)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.listen.address.port(), 8000);
    assert_eq!(config.listen.max_header_bytes, 32768);
    assert_eq!(config.upstream.pool_idle_timeout.as_secs(), 30);
}

#[test]
fn an_error_found_after_joining_is_told_in_its_file_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.yaml",
        "rate_limits:\n  github: {limit: 10, window: minute}\n",
    );
    let b = write(
        dir.path(),
        "b.yaml",
        "# the policies\npolicies:\n  - name: github\n    match: {host: api.github.com}\n    rate_limit: githb\n",
    );
    let got = errors(vec![a, b.clone()]);
    let b = b.display().to_string();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(
        got[0].starts_with(&format!("{b}: policies[0].rate_limit: ")),
        "{got:#?}"
    );
    assert!(got[0].ends_with("(line 5, column 17)"), "{got:#?}");

    // A file that is wrong on its own (an unknown key) is reported alone, in place.
    let c = write(dir.path(), "c.yaml", "listen:\n  adress: 127.0.0.1:1\n");
    let e = ConfigFiles::new(vec![c.clone()])
        .load(false)
        .map(|_| ())
        .unwrap_err();
    let joined = ConfigFiles::new(vec![dir.path().join("a.yaml"), c.clone()])
        .load(false)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(joined.source, c.display().to_string());
    assert_eq!(joined.errors[0].to_string(), e.errors[0].to_string());
}

#[tokio::test]
async fn a_conf_d_directory_is_read_in_name_order_and_a_new_file_joins_at_reload() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(|_req| async { answer(200, &[], "from upstream") }).await;
    write(
        dir.path(),
        "10-routes.yaml",
        &format!(
            "routes:\n  - prefix: /one\n    upstream: http://{}\n",
            up.addr
        ),
    );
    write(dir.path(), "notes.txt", "not a config: ignored");
    write(dir.path(), ".hidden.yaml", "this: is not read");
    let gw = gateway_from_file(dir.path(), false).await;
    let got = send(
        &client(),
        http::Request::get(format!("http://{}/one/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, 200);

    write(
        dir.path(),
        "20-more.yaml",
        &format!(
            "routes:\n  - prefix: /two\n    upstream: http://{}\n",
            up.addr
        ),
    );
    let reloaded = post_reload(&gw).await;
    assert_eq!(reloaded.status, 200, "{:?}", reloaded.body);
    let got = send(
        &client(),
        http::Request::get(format!("http://{}/two/x", gw.proxy_addr))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, 200, "the new file's route");
    let config = admin_get(&gw, "/config").await.json();
    let prefixes: Vec<&str> = config["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["prefix"].as_str())
        .collect();
    assert_eq!(prefixes, ["/one", "/two"]);
}

/// A file that is no config (a password file copied into the config directory) is
/// refused without quoting its contents back: the error names its line.
#[test]
fn a_file_that_is_no_config_is_not_quoted_back() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", "listen: {address: '127.0.0.1:0'}\n");
    let shadow = "root:$6$SALTsalt$Hash0123456789abcdefHASH:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n";
    write(dir.path(), "shadow.yaml", shadow);
    let e = ConfigFiles::new(vec![dir.path().to_path_buf()])
        .load(true)
        .unwrap_err()
        .to_string();
    assert!(!e.contains("SALTsalt") && !e.contains("Hash0123"), "{e}");
    assert!(e.contains("shadow.yaml"), "the file is named: {e}");
    assert!(e.contains("line 1"), "its line is named: {e}");
}

/// A file an editor saved with a UTF-8 byte order mark, holding a block list written at
/// its key's own indentation (the parser took the mark for a document of its own),
/// loads as it would without one, alone or in a directory.
#[test]
fn a_byte_order_mark_is_not_a_document() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\u{feff}policies:\n- name: gh\n  match: {host: api.github.com}\n  rate_limit: {limit: 5, window: minute}\n";
    let f = write(dir.path(), "gh.yaml", text);
    let (config, _) = ConfigFiles::new(vec![f.clone()]).load(true).unwrap();
    assert_eq!(config.policies.policies[0].name, "gh");
    let (config, _) = ConfigFiles::new(vec![dir.path().to_path_buf()])
        .load(true)
        .unwrap();
    assert_eq!(config.policies.policies.len(), 1);
    assert!(tollgate::config::Config::load(&f).is_ok());
}
