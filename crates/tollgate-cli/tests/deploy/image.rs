//! The image: `deploy/Dockerfile` built with buildah (no daemon, chroot isolation),
//! started, and asked `/healthz`, where the machine can pull its base images; the build
//! context `.dockerignore` leaves is checked everywhere.

use super::{ROOT, answers, free_port};
use std::process::{Command, Stdio};

/// What `.dockerignore` leaves out of the build context: the build folder, git's, and
/// local state, all of which the image's build never reads.
#[test]
fn the_build_context_leaves_out_target_and_git() {
    let ignore = std::fs::read_to_string(format!("{ROOT}/.dockerignore")).unwrap();
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target", ".git"] {
        assert!(
            patterns
                .iter()
                .any(|p| p.trim_start_matches('/').trim_end_matches('/') == needed),
            ".dockerignore leaves out {needed}: {patterns:?}"
        );
    }
    // Nothing the Dockerfile's build copies is left out: the workspace's manifests,
    // lock file and crates, scripts/pgo, which builds the gateway trained, and
    // .cargo/config.toml, the inlining budget of the plain build (`PGO=0`).
    for kept in [
        "Cargo.toml",
        "Cargo.lock",
        ".cargo",
        "crates",
        "deploy",
        "scripts",
    ] {
        assert!(
            !patterns
                .iter()
                .any(|p| p.trim_start_matches('/').trim_end_matches('/') == kept),
            "{kept} is needed by the build: {patterns:?}"
        );
    }
}

/// The trained build inlines with the budget every other build from a clone has:
/// scripts/pgo sets a `RUSTFLAGS`, which replaces `.cargo/config.toml`'s list, so it
/// names the budget itself, and the two must not drift apart.
#[test]
fn the_trained_build_inlines_with_the_budget_of_every_build() {
    let config = std::fs::read_to_string(format!("{ROOT}/.cargo/config.toml")).unwrap();
    let budget = config
        .split("inline-threshold=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!(".cargo/config.toml names no inline-threshold:\n{config}"));
    let pgo = std::fs::read_to_string(format!("{ROOT}/scripts/pgo")).unwrap();
    assert!(
        pgo.lines().any(|l| l == format!("BUDGET={budget}")),
        "scripts/pgo's BUDGET is not .cargo/config.toml's {budget}"
    );
    assert!(
        pgo.contains("-inline-threshold=$BUDGET"),
        "scripts/pgo does not pass its BUDGET"
    );
}

/// scripts/pgo's counts find their functions in the optimised build by symbol name, which
/// carries each crate's `-C metadata`: cargo hashes the profile's settings and the
/// features into it, so the instrumented and the optimised builds must be given the same
/// cargo options (their RUSTFLAGS alone differ). A `--config` given to the optimised build
/// alone (BOLT's `strip=false`, once) built the image's gateway untrained.
#[test]
fn both_trained_builds_get_the_same_cargo_options() {
    let pgo = std::fs::read_to_string(format!("{ROOT}/scripts/pgo")).unwrap();
    let builds: Vec<(usize, &str)> = pgo
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("cargo build --profile"))
        .collect();
    let [(first, a), (second, b)] = builds[..] else {
        panic!("scripts/pgo has not two builds of --profile: {builds:?}");
    };
    assert_eq!(a.trim(), b.trim(), "the two builds' cargo options differ");
    let between: Vec<&str> = pgo.lines().skip(first).take(second - first).collect();
    assert!(
        !between.iter().any(|l| l.trim_start().starts_with("set --")),
        "scripts/pgo changes the cargo options between its builds"
    );
}

/// `scripts/pgo --out ~/.cargo/bin/tollgate` (README's install of the trained build)
/// replaces a binary that a running gateway may be executing, which a copy onto it cannot
/// do ("Text file busy"), and `--out ~/.cargo/bin` does the same. scripts/pgo's own lines
/// for `--out`, run against such a file: a copy of `sleep` executing from it.
#[test]
fn the_trained_build_installs_over_a_running_binary() {
    let pgo = std::fs::read_to_string(format!("{ROOT}/scripts/pgo")).unwrap();
    let block: Vec<&str> = pgo
        .lines()
        .skip_while(|l| *l != r#"if [ -n "$out" ]; then"#)
        .collect();
    let end = block.iter().position(|l| *l == "fi").unwrap_or_else(|| {
        panic!("scripts/pgo has no `if [ -n \"$out\" ]; then … fi` block for --out")
    });
    let block = block[..=end].join("\n");

    let dir = tempfile::tempdir().unwrap();
    let installed = dir.path().join("tollgate");
    for (n, out) in [&installed, &dir.path().to_path_buf()]
        .into_iter()
        .enumerate()
    {
        std::fs::copy("/bin/sleep", &installed).unwrap();
        // `spawn` returns once the child has exec'd: from then on the file is busy.
        let mut running = Command::new(&installed).arg("60").spawn().unwrap();
        let built = dir.path().join("built");
        let build = format!("trained build {n}");
        std::fs::write(&built, &build).unwrap();
        let script = format!(
            "bin='{}'; out='{}'\n{block}\necho \"$bin\"",
            built.display(),
            out.display()
        );
        let run = Command::new("bash")
            .args(["-euc", &script])
            .output()
            .unwrap();
        running.kill().unwrap();
        running.wait().unwrap();

        assert!(
            run.status.success(),
            "--out {} could not replace a running binary: {}",
            out.display(),
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(std::fs::read_to_string(&installed).unwrap(), build);
        assert_eq!(
            String::from_utf8_lossy(&run.stdout).trim(),
            installed.display().to_string(),
            "scripts/pgo does not print where the binary went"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "a temporary file was left beside: {left:?}");
    }
}

/// Builds the image (as shipped: trained for profile-guided optimisation, three builds and
/// the training), runs it on the host's network and probes `/healthz`. It needs
/// buildah (Debian's package) and its base images (`rust:1-bookworm`,
/// `debian:bookworm-slim`) from a registry, so it is reported as ignored, with that
/// reason, unless asked for; `scripts/test` asks for it where buildah can pull the base
/// images. Asked for where either is missing, it fails saying which.
#[test]
#[ignore = "builds the image: needs buildah and its base images from a registry (scripts/test runs it where both are: cargo test -p tollgate-cli --test deploy -- --ignored image)"]
fn the_image_builds_starts_and_answers_healthz() {
    assert!(
        Command::new("buildah").arg("--version").output().is_ok(),
        "the image is not built here: buildah is not installed (apt-get install buildah)"
    );
    let pull = Command::new("buildah")
        .args(["pull", "--quiet", "docker.io/library/debian:bookworm-slim"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        pull.status.success(),
        "the image is not built here: buildah cannot pull its base images ({})",
        String::from_utf8_lossy(&pull.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .trim()
    );
    let built = Command::new("buildah")
        .args([
            "build",
            "--isolation",
            "chroot",
            "--layers",
            "-f",
            "deploy/Dockerfile",
            "-t",
            "tollgate-test:latest",
            ".",
        ])
        .current_dir(ROOT)
        .status()
        .unwrap();
    assert!(built.success(), "buildah build -f deploy/Dockerfile failed");
    let admin = free_port();
    let container = Command::new("buildah")
        .args(["from", "--quiet", "tollgate-test:latest"])
        .output()
        .unwrap();
    assert!(container.status.success(), "{container:?}");
    let name = String::from_utf8_lossy(&container.stdout).trim().to_owned();
    let mut run = Command::new("buildah")
        .args([
            "run",
            "--isolation",
            "chroot",
            "--network",
            "host",
            &name,
            "--",
        ])
        .args([
            "tollgate",
            "run",
            "--admin",
            &format!("127.0.0.1:{admin}"),
            "--listen",
            "127.0.0.1:0",
        ])
        .spawn()
        .unwrap();
    let up = answers(admin, "GET /healthz HTTP/1.0\r\n\r\n", "HTTP/1.0 200");
    let _ = run.kill();
    let _ = run.wait();
    let _ = Command::new("buildah").args(["rm", &name]).status();
    assert!(up, "the image's tollgate never answered /healthz");
}

/// The user the image runs as (10001:10001) has a group of that id: `useradd --system
/// --user-group` gave it the next free system id (999), leaving 10001 no group entry.
#[test]
fn the_images_user_and_group_are_one_id() {
    let dockerfile = std::fs::read_to_string(format!("{ROOT}/deploy/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("groupadd --system --gid 10001 tollgate"),
        "{dockerfile}"
    );
    assert!(
        dockerfile.contains("useradd --system --uid 10001 --gid 10001"),
        "{dockerfile}"
    );
    assert!(dockerfile.contains("USER 10001:10001"));
}
