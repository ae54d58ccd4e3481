//! docs/architecture.md opens with the library's modules in layers, each using only
//! modules below it: the picture is computed here from the source (`crate::X` paths, test
//! modules left out) and must match the doc's (`TOLLGATE_BLESS=1` rewrites it); there is
//! no import cycle.

use std::collections::{BTreeMap, BTreeSet};

/// Each top-level module of the library and the top-level modules it imports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = p.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs").to_owned();
        if top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap();
        let deps = out.entry(top.clone()).or_default();
        for part in text.split("crate::").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // The crate root's re-exports.
            let name = match name.as_str() {
                "Config" => "config".to_owned(),
                "Gateway" | "StartError" | "StartOptions" => "server".to_owned(),
                "Overrides" => "state".to_owned(),
                _ => name,
            };
            if name != top && !name.is_empty() {
                deps.insert(name);
            }
        }
    }
    let known: BTreeSet<String> = out.keys().cloned().collect();
    for deps in out.values_mut() {
        deps.retain(|d| known.contains(d));
    }
    out
}

/// Each module's layer: 0 for one that imports none of the others, else one above the
/// highest it imports. `Err` names the modules left when there is a cycle.
fn layers(g: &BTreeMap<String, BTreeSet<String>>) -> Result<BTreeMap<String, usize>, Vec<String>> {
    let mut layer = BTreeMap::new();
    while layer.len() < g.len() {
        let ready: Vec<_> = g
            .iter()
            .filter(|(m, deps)| {
                !layer.contains_key(*m) && deps.iter().all(|d| layer.contains_key(d))
            })
            .map(|(m, deps)| {
                (
                    m.clone(),
                    deps.iter().map(|d| layer[d] + 1).max().unwrap_or(0),
                )
            })
            .collect();
        if ready.is_empty() {
            return Err(g
                .keys()
                .filter(|m| !layer.contains_key(*m))
                .cloned()
                .collect());
        }
        layer.extend(ready);
    }
    Ok(layer)
}

fn picture(g: &BTreeMap<String, BTreeSet<String>>, layer: &BTreeMap<String, usize>) -> String {
    let mut out = String::from("| layer | module | uses |\n|---|---|---|\n");
    let mut rows: Vec<_> = layer.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (m, l) in rows {
        let uses: Vec<_> = g[m].iter().map(|d| format!("`{d}`")).collect();
        out.push_str(&format!("| {l} | `{m}` | {} |\n", uses.join(" ")));
    }
    out
}

#[test]
fn the_modules_form_layers_as_the_architecture_doc_shows() {
    let g = imports();
    let layer = layers(&g).unwrap_or_else(|left| panic!("an import cycle among {left:?}"));
    let text = picture(&g, &layer);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let (open, close) = (
        "<!-- generated:modules -->\n",
        "<!-- /generated:modules -->",
    );
    let start = doc
        .find(open)
        .expect("architecture.md has the modules marker")
        + open.len();
    let end = start + doc[start..].find(close).unwrap();
    if doc[start..end] != text {
        assert!(
            std::env::var_os("TOLLGATE_BLESS").is_some(),
            "docs/architecture.md's module picture differs from the code; run `TOLLGATE_BLESS=1 cargo test -p tollgate --test it architecture`"
        );
        std::fs::write(path, format!("{}{text}{}", &doc[..start], &doc[end..])).unwrap();
    }
}

#[test]
fn a_cycle_is_found() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "a"), ("c", "a")]
        .into_iter()
        .map(|(m, d)| (m.to_owned(), BTreeSet::from([d.to_owned()])))
        .collect();
    assert_eq!(layers(&g).unwrap_err(), vec!["a", "b", "c"]);
}

/// The life of a request in docs/architecture.md (its numbered sections) is held to the
/// code: each section's named code exists (a file, a folder, a `module::item`), and the
/// synchronous phases in `request::prepare` carry the sections' numbers (`// §7`) in the
/// doc's order.
#[test]
fn the_life_of_a_request_follows_the_code() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let doc = std::fs::read_to_string(root.join("../../docs/architecture.md")).unwrap();
    let mut order = Vec::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix("## ") else {
            continue;
        };
        let Some((number, title)) = rest.split_once(". ") else {
            continue;
        };
        if !number.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            continue;
        }
        order.push(number.to_owned());
        let anchors = title.split_once(" (").map_or("", |(_, a)| a);
        for anchor in anchors.split('`').skip(1).step_by(2) {
            let found = if let Some((module, item)) = anchor.split_once("::") {
                let file = [format!("{module}.rs"), format!("{module}/mod.rs")]
                    .into_iter()
                    .map(|f| src.join(f))
                    .find(|f| f.exists());
                file.is_some_and(|f| {
                    let text = std::fs::read_to_string(f).unwrap();
                    ["fn ", "struct ", "enum ", "type "]
                        .iter()
                        .any(|k| text.contains(&format!("{k}{item}")))
                })
            } else {
                src.join(anchor).exists()
            };
            assert!(
                found,
                "section {number} names `{anchor}`, which the code lacks"
            );
        }
    }
    let code = std::fs::read_to_string(src.join("request/mod.rs")).unwrap();
    let prepare = code
        .split("fn prepare(")
        .nth(1)
        .expect("request::prepare")
        .split("\n}\n")
        .next()
        .unwrap();
    let marks: Vec<String> = prepare
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("// §"))
        .flat_map(|l| {
            // `// §8 Domain lists, §9 policy match.`
            std::iter::once(l)
                .chain(l.split(", §").skip(1))
                .map(|m| m.split([' ', '.']).next().unwrap_or("").to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(marks.len() >= 8, "prepare's phases are marked: {marks:?}");
    let positions: Vec<usize> = marks
        .iter()
        .map(|m| {
            order
                .iter()
                .position(|o| o == m)
                .unwrap_or_else(|| panic!("§{m} in prepare is no section of architecture.md"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "prepare's phases {marks:?} are not in the doc's order {order:?}"
    );
}

/// The files of `folder` (`policy`), each as its module path (`policy::remedies::quota`),
/// and the files of the same folder each one imports: `crate::…` and `super::…` paths,
/// comments and test modules left out, each path taken to the longest module it names.
fn file_imports(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    let mut todo = vec![src.join(folder)];
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            files.insert(parts.join("::"), p);
        }
    }
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| files.contains_key(m))
    };
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect()
    };
    let mut out = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap();
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let here: Vec<String> = module.split("::").map(str::to_owned).collect();
        let mut deps = BTreeSet::new();
        for part in code.split("crate::").skip(1) {
            let p: Vec<String> = ident(part).split("::").map(str::to_owned).collect();
            deps.extend(resolve(&p));
        }
        for (i, _) in code.match_indices("super::") {
            if code[..i].ends_with("super::") {
                continue; // counted from the first `super::` of the run
            }
            let (mut rest, mut ups) = (&code[i..], 0);
            while let Some(r) = rest.strip_prefix("super::") {
                (rest, ups) = (r, ups + 1);
            }
            let tail = ident(rest);
            // A `mod.rs` is its folder's module: `super` is the folder's parent, as it
            // is a file's beside it.
            let base = here.len().saturating_sub(ups);
            let mut p = here[..base].to_vec();
            p.extend(tail.split("::").map(str::to_owned));
            deps.extend(resolve(&p));
        }
        deps.remove(module);
        out.insert(module.clone(), deps);
    }
    out
}

/// Inside `policy/` and `config/`, no file imports one that imports it back (directly
/// or through others): each folder's files form layers too.
#[test]
fn no_file_circle_inside_policy_or_config() {
    for folder in ["policy", "config"] {
        let g = file_imports(folder);
        assert!(g.len() > 10, "{folder}: {} files read", g.len());
        assert!(
            g.values().map(BTreeSet::len).sum::<usize>() > 10,
            "{folder}: imports read"
        );
        if let Err(left) = layers(&g) {
            panic!("{folder}: an import circle among (or above) {left:?}");
        }
    }
}

/// A remedy is its module and its registry line: no file outside `policy/remedies/`
/// names a remedy's module (what the rest of tollgate needs of a remedy comes through
/// the registry's generated types and the `RemedyKind` traits), and the registry names
/// every one. CONTRIBUTING.md's count of hand edits for a new remedy rests on this.
#[test]
fn a_remedy_is_named_only_in_its_module_and_the_registry() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let folder = src.join("policy/remedies");
    let remedies: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "mod")
        .collect();
    assert!(remedies.len() >= 12, "{remedies:?}");
    let registry = std::fs::read_to_string(folder.join("mod.rs")).unwrap();
    let mut offenders = Vec::new();
    let mut todo = vec![src.clone()];
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            if p != folder {
                todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for r in &remedies {
            if text.contains(&format!("remedies::{r}::"))
                || text.contains(&format!("remedies::{r};"))
            {
                offenders.push(format!("{} names `{r}`", p.display()));
            }
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
    for r in &remedies {
        assert!(
            registry.contains(&format!(" {r}::")),
            "`{r}` has no registry line"
        );
    }
}
