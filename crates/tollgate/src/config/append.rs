//! `tollgate har mock … --append FILE`: adds a mock policy to an existing config as text,
//! under its `policies:` list, so the user's comments, order and formatting stay. Two
//! outputs appended with `>>` would be two `policies:` keys: an invalid config.

use crate::diagnosis::har::read::MockPolicy;

/// `config` with `policy` added at the end of its `policies:` list (the list created when
/// there is none). A name already taken gets a `-2`, `-3`… suffix.
pub fn append(config: &str, mut policy: MockPolicy) -> Result<String, String> {
    let taken = names(config)?;
    let base = policy.name.clone();
    let mut n = 1;
    while taken.contains(&policy.name) {
        n += 1;
        policy.name = format!("{base}-{n}");
    }
    let item = yaml_serde::to_string(&vec![policy]).map_err(|e| e.to_string())?;
    let lines: Vec<&str> = config.lines().collect();
    let mut out = String::with_capacity(config.len() + item.len() + 16);
    let Some(at) = lines
        .iter()
        .position(|l| top_level_key(l) == Some("policies"))
    else {
        out.push_str(config);
        if !config.is_empty() && !config.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("policies:\n");
        out.push_str(&indent(&item, 2));
        return Ok(out);
    };
    let inline = lines[at]
        .split_once(':')
        .map_or("", |(_, v)| v.split(" #").next().unwrap_or("").trim());
    if !inline.is_empty() && inline != "[]" {
        return Err(format!(
            "`policies` at line {} is written inline; write it as a block list (one `- name:` per line) to append to it",
            at + 1
        ));
    }
    // The list's items: their indentation, and the last line that belongs to them.
    let mut item_indent = None;
    let mut last = at;
    for (i, l) in lines.iter().enumerate().skip(at + 1) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let ind = l.len() - t.len();
        let in_list = ind > 0 || (t.starts_with("- ") || t == "-");
        if !in_list {
            break;
        }
        item_indent.get_or_insert(ind);
        last = i;
    }
    for l in &lines[..at] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(if inline == "[]" {
        "policies:"
    } else {
        lines[at]
    });
    out.push('\n');
    for l in &lines[at + 1..=last] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(&indent(&item, item_indent.unwrap_or(2)));
    for l in &lines[last + 1..] {
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

/// The key of a top-level `key:` line.
fn top_level_key(line: &str) -> Option<&str> {
    if line.starts_with([' ', '\t', '#', '-']) {
        return None;
    }
    let (k, _) = line.split_once(':')?;
    Some(k.trim().trim_matches(['"', '\'']))
}

/// The names of the config's policies (the config must be YAML).
fn names(config: &str) -> Result<Vec<String>, String> {
    let doc: yaml_serde::Value =
        yaml_serde::from_str(config).map_err(|e| format!("the config is not valid YAML: {e}"))?;
    Ok(doc
        .get("policies")
        .and_then(|p| p.as_sequence())
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("name")?.as_str().map(str::to_owned))
        .collect())
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// Adds the entry's mock policy to `file`, written whole or not at all (a temporary file
/// renamed over it).
pub fn append_to_file(file: &std::path::Path, entry: &serde_json::Value) -> Result<(), String> {
    let policy = crate::diagnosis::har::read::mock_policy(entry)?;
    let config = match super::read_text(file) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let out = append(&config, policy).map_err(|e| format!("{}: {e}", file.display()))?;
    if let Err(errors) = super::parse(&out) {
        let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        return Err(format!(
            "{} would not parse with the mock added, so it is left as it was: {}",
            file.display(),
            shown.join("; ")
        ));
    }
    let tmp = file.with_extension("tollgate-tmp");
    std::fs::write(&tmp, &out)
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    eprintln!("added a mock policy to {}", file.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    fn mock(name: &str) -> MockPolicy {
        MockPolicy {
            name: name.into(),
            matches: yaml_serde::from_str("host: h.com").unwrap(),
            mock: yaml_serde::from_str("status: 200").unwrap(),
        }
    }

    #[test]
    fn appends_under_the_list_keeping_everything_else() {
        let config = "# dev config\nlisten: { address: 127.0.0.1:8000 }\npolicies:\n- name: a # first\n  match: { host: a.com }\n  mock: { status: 204 }\n\n# admin below\nadmin:\n  address: 127.0.0.1:8081\n";
        let out = append(config, mock("a")).unwrap();
        assert!(out.starts_with("# dev config\nlisten: { address: 127.0.0.1:8000 }\npolicies:\n- name: a # first\n  match: { host: a.com }\n  mock: { status: 204 }\n- name: a-2\n"), "{out}");
        assert!(
            out.ends_with("\n\n# admin below\nadmin:\n  address: 127.0.0.1:8081\n"),
            "{out}"
        );
        let c = crate::Config::from_yaml(&out).unwrap();
        assert_eq!(c.policies.policies.len(), 2);
    }

    #[test]
    fn creates_the_list_and_replaces_an_empty_one() {
        for config in ["", "listen: { address: 127.0.0.1:8000 }", "policies: []\n"] {
            let out = append(config, mock("m")).unwrap();
            let once = append(&out, mock("m")).unwrap();
            let c = crate::Config::from_yaml(&once).unwrap_or_else(|e| panic!("{e:?}\n{once}"));
            let names: Vec<_> = c
                .policies
                .policies
                .iter()
                .map(|p| p.name.to_string())
                .collect();
            assert_eq!(names, ["m", "m-2"], "{once}");
        }
        assert!(
            append("policies: [{name: x}]\n", mock("m"))
                .unwrap_err()
                .contains("inline")
        );
    }
}
