//! Records the git commit the binary is built from, for `tollgate --version` and the
//! benchmarks' `metadata.json`. A build without `.git` (the image's, whose context
//! leaves it out) takes it from `TOLLGATE_GIT_COMMIT` (`--build-arg COMMIT=…`).
fn main() {
    println!("cargo:rerun-if-env-changed=TOLLGATE_GIT_COMMIT");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
    let commit = std::env::var("TOLLGATE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TOLLGATE_GIT_COMMIT={commit}");
}
