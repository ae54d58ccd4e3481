//! What a registry, a scanner or a reporter reads of a release agrees with Cargo's: the
//! version and the repository in the chart, the image's labels and SECURITY.md; and
//! CHANGELOG.md keeps the Keep a Changelog form (an Unreleased section, versions with
//! their dates newest first, the six kinds of change, a link for each).

use super::ROOT;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap()
}

#[test]
fn the_chart_the_image_and_security_md_name_cargos_version_and_repository() {
    assert!(
        REPOSITORY.starts_with("https://github.com/"),
        "{REPOSITORY:?}"
    );
    let chart: yaml_serde::Value =
        yaml_serde::from_str(&read("deploy/helm/tollgate/Chart.yaml")).unwrap();
    assert_eq!(chart["version"].as_str(), Some(VERSION));
    assert_eq!(chart["appVersion"].as_str(), Some(VERSION));
    assert_eq!(chart["home"].as_str(), Some(REPOSITORY));
    assert_eq!(chart["sources"][0].as_str(), Some(REPOSITORY));
    assert_eq!(chart["maintainers"][0]["url"].as_str(), Some(REPOSITORY));
    let values: yaml_serde::Value =
        yaml_serde::from_str(&read("deploy/helm/tollgate/values.yaml")).unwrap();
    assert_eq!(values["image"]["tag"].as_str(), Some(VERSION));
    let dockerfile = read("deploy/Dockerfile");
    for label in [
        format!("org.opencontainers.image.version=\"{VERSION}\""),
        format!("org.opencontainers.image.source=\"{REPOSITORY}\""),
        format!("org.opencontainers.image.url=\"{REPOSITORY}\""),
    ] {
        assert!(
            dockerfile.contains(&label),
            "deploy/Dockerfile lacks {label}"
        );
    }
    let security = read("SECURITY.md");
    assert!(
        security.contains(&format!("<{REPOSITORY}/security/advisories/new>")),
        "SECURITY.md names no private way to report"
    );
}

/// Whether `line` is `## [x.y.z] - YYYY-MM-DD`: its version and date.
fn release(line: &str) -> Option<(&str, &str)> {
    let (version, date) = line.strip_prefix("## [")?.split_once("] - ")?;
    let d: Vec<&str> = date.split('-').collect();
    let digits = |s: &str, n| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    (d.len() == 3 && digits(d[0], 4) && digits(d[1], 2) && digits(d[2], 2))
        .then_some((version, date))
}

#[test]
fn the_changelog_keeps_a_changelogs_form() {
    let text = read("CHANGELOG.md");
    let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(heads.first(), Some(&"## [Unreleased]"), "{heads:?}");
    let releases: Vec<(&str, &str)> = heads[1..]
        .iter()
        .map(|h| release(h).unwrap_or_else(|| panic!("{h:?} is not `## [x.y.z] - YYYY-MM-DD`")))
        .collect();
    assert!(
        releases.iter().any(|(v, _)| *v == VERSION),
        "CHANGELOG.md has no section for {VERSION}, the version Cargo builds"
    );
    let dates: Vec<&str> = releases.iter().map(|r| r.1).collect();
    assert!(dates.is_sorted_by(|a, b| a >= b), "newest first: {dates:?}");
    for kind in text.lines().filter_map(|l| l.strip_prefix("### ")) {
        assert!(
            [
                "Added",
                "Changed",
                "Deprecated",
                "Removed",
                "Fixed",
                "Security"
            ]
            .contains(&kind),
            "`### {kind}` is not one of Keep a Changelog's kinds of change"
        );
    }
    assert!(text.contains(&format!("[Unreleased]: {REPOSITORY}/compare/v")));
    for (v, _) in &releases {
        assert!(
            text.contains(&format!("[{v}]: {REPOSITORY}/")),
            "no link for [{v}]"
        );
    }
}
