//! Every relative link in the repository's Markdown leads somewhere: the file exists and,
//! where the link names a heading of a Markdown file, that heading does (anchors as GitHub
//! makes them: lower case, punctuation dropped, spaces as hyphens, repeats numbered).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files of the repository, build outputs and installed packages left out.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                markdown(&p, out);
            }
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors a file offers: its headings' and any `id="…"` it writes in HTML.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut out = BTreeSet::new();
    for line in prose(text).lines() {
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        let s = slug(h.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    for part in text.split("id=\"").skip(1) {
        out.insert(part.split('"').next().unwrap_or("").to_owned());
    }
    out
}

/// The targets of the file's inline links `[text](target)`.
fn links(text: &str) -> Vec<String> {
    prose(text)
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn broken() -> Vec<String> {
    let mut files = Vec::new();
    markdown(&root(), &mut files);
    let texts: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|f| {
            (
                f.canonicalize().unwrap(),
                std::fs::read_to_string(f).unwrap(),
            )
        })
        .collect();
    let mut out = Vec::new();
    for (file, text) in &texts {
        for link in links(text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                Some(file.clone())
            } else {
                file.parent().unwrap().join(path).canonicalize().ok()
            };
            let shown = file.strip_prefix(root().canonicalize().unwrap()).unwrap();
            match target {
                None => out.push(format!("{}: {link} (no such file)", shown.display())),
                Some(t) if !anchor.is_empty() => {
                    if let Some(target_text) = texts.get(&t)
                        && !anchors(target_text).contains(anchor)
                    {
                        out.push(format!("{}: {link} (no such heading)", shown.display()));
                    }
                }
                Some(_) => {}
            }
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_leads_somewhere() {
    let broken = broken();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_checker_sees_a_missing_file_and_a_missing_heading() {
    let text = "# Quick start: two commands\n\n## Quick start: two commands\n\
        [a](#quick-start-two-commands-1) [b](#nowhere)";
    let a = anchors(text);
    assert!(a.contains("quick-start-two-commands-1"), "{a:?}");
    assert!(!a.contains("nowhere"));
    assert_eq!(
        links("x [a](docs/a.md#b \"t\")\n```\n[e](f)\n```\n"),
        ["docs/a.md#b"]
    );
}
