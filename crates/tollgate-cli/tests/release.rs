//! What a team installing a release finds: `--version` naming the commit, shell
//! completions and man pages generated from the command line itself, the license file
//! that Cargo.toml names, and the security policy.

use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn tollgate(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "tollgate {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_version_names_the_commit_the_binary_was_built_from() {
    let version = tollgate(&["--version"]);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    assert_eq!(
        version.trim(),
        format!("tollgate {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn completions_know_every_command_and_bash_accepts_them() {
    let bash = tollgate(&["completions", "bash"]);
    for command in [
        "run",
        "check",
        "discover",
        "har",
        "ca",
        "completions",
        "man",
    ] {
        assert!(bash.contains(command), "{command} in the bash completions");
    }
    // bash parses it and `complete` registers it for `tollgate`.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("{bash}\ncomplete -p tollgate"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("tollgate"));
    for shell in ["zsh", "fish"] {
        assert!(tollgate(&["completions", shell]).contains("tollgate"));
    }
}

#[test]
fn man_pages_for_the_binary_and_each_command() {
    let page = tollgate(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH tollgate 1"),
        "{page}"
    );
    assert!(page.contains("API egress gateway"));
    let dir = tempfile::tempdir().unwrap();
    tollgate(&["man", "--dir", dir.path().to_str().unwrap()]);
    for file in [
        "tollgate.1",
        "tollgate-run.1",
        "tollgate-check.1",
        "tollgate-har-list.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(text.contains(".TH"), "{file} is a man page");
    }
    let run = std::fs::read_to_string(dir.path().join("tollgate-run.1")).unwrap();
    assert!(run.contains("\\-\\-config"), "run's page lists --config");
}

#[test]
fn the_license_file_is_the_one_cargo_toml_names_and_security_md_says_how_to_report() {
    let manifest = std::fs::read_to_string(format!("{ROOT}/Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"Apache-2.0\""));
    let license = std::fs::read_to_string(format!("{ROOT}/LICENSE")).unwrap();
    assert!(license.contains("Apache License"));
    assert!(license.contains("Version 2.0, January 2004"));
    assert!(license.contains("END OF TERMS AND CONDITIONS"));
    let security = std::fs::read_to_string(format!("{ROOT}/SECURITY.md")).unwrap();
    assert!(security.contains("Reporting a vulnerability"));
    assert!(security.contains("tollgate --version"));
}
