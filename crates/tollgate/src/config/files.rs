//! Several config files as one config: `--config` given more than once, or a directory
//! (conf.d: its `*.yaml` and `*.yml` files in name order), so recipes combine without
//! hand-merging. Each file must be a valid partial config on its own (known keys, right
//! types); then mappings merge key by key and lists are joined in file order. A value
//! two files both set, a limit or endpoint two files both define, and a policy name two
//! files both use are errors naming both files. Errors found after merging (a policy
//! naming a rate limit no file defines) are reported in the file and at the line the
//! offending value came from.

use super::{Config, ConfigErrors, locate, parse_all, validate};
use crate::fields::ConfigError;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use yaml_serde::{Mapping, Value};

/// The config files a gateway was started with, as given (files and directories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFiles {
    given: Vec<PathBuf>,
}

/// A file read, with its name as errors show it.
struct Part {
    name: String,
    text: String,
}

/// Where a value of the merged config was written: its path there, the file, its
/// path in that file.
struct Origin {
    merged: String,
    part: usize,
    written: String,
}

impl ConfigFiles {
    pub fn new(given: Vec<PathBuf>) -> Self {
        Self { given }
    }

    pub fn one(path: &Path) -> Self {
        Self::new(vec![path.to_owned()])
    }

    /// The files and directories as given, for messages (`a.yaml + conf.d`).
    pub fn describe(&self) -> String {
        let names: Vec<String> = self.given.iter().map(|p| p.display().to_string()).collect();
        names.join(" + ")
    }

    /// The files read: directories expanded to their `*.yaml`/`*.yml` files (not hidden
    /// ones) in name order, read again at each load so a file added to conf.d is seen
    /// by the next reload.
    pub fn files(&self) -> Result<Vec<PathBuf>, ConfigErrors> {
        let mut out = Vec::new();
        for p in &self.given {
            if !p.is_dir() {
                out.push(p.clone());
                continue;
            }
            let entries = std::fs::read_dir(p)
                .map_err(|e| whole(p, format!("cannot read the directory: {e}")))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| {
                    let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    !name.starts_with('.')
                        && (name.ends_with(".yaml") || name.ends_with(".yml"))
                        && f.is_file()
                })
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(whole(
                    p,
                    "the directory holds no *.yaml or *.yml file; put the config files there, or name a file".into(),
                ));
            }
            out.extend(found);
        }
        Ok(out)
    }

    /// Reads, merges and validates the files; with `env_optional`, unset `${VARS}` come
    /// back as warnings. One file is read exactly as [`Config::load`] reads it.
    pub fn load(&self, env_optional: bool) -> Result<(Config, Vec<String>), ConfigErrors> {
        let files = self.files()?;
        if let [one] = files.as_slice() {
            return Config::read(one, env_optional);
        }
        let mut parts = Vec::new();
        for f in &files {
            let text =
                super::read_text(f).map_err(|e| whole(f, format!("cannot read file: {e}")))?;
            // Each file alone: known keys and the right types, placed in that file.
            if let Err(errors) =
                parse_all(&text).and_then(
                    |(_, units)| {
                        if units.is_empty() { Ok(()) } else { Err(units) }
                    },
                )
            {
                return Err(ConfigErrors {
                    source: f.display().to_string(),
                    errors,
                });
            }
            parts.push(Part {
                name: f.display().to_string(),
                text,
            });
        }
        let source = self.describe();
        let (merged, origins) = merge_parts(&parts).map_err(|errors| ConfigErrors {
            source: source.clone(),
            errors,
        })?;
        let text = yaml_serde::to_string(&merged).map_err(|e| ConfigErrors {
            source: source.clone(),
            errors: vec![ConfigError {
                path: String::new(),
                message: format!("cannot join the files: {e}"),
                location: None,
            }],
        })?;
        parse_all(&text)
            .and_then(|(raw, units)| validate::validate_env(&raw, units, env_optional))
            .map_err(|errors| ConfigErrors {
                source,
                errors: errors
                    .into_iter()
                    .map(|e| traced(e, &parts, &origins))
                    .collect(),
            })
    }

    /// [`ConfigFiles::load`] for a reload: an empty file is refused (far more likely
    /// caught mid-write than meant as "all defaults").
    pub fn reload(&self) -> Result<Config, Vec<ConfigError>> {
        let flat = |e: ConfigErrors| e.errors;
        for f in self.files().map_err(flat)? {
            let text = super::read_text(&f).map_err(|e| {
                vec![ConfigError {
                    path: String::new(),
                    message: format!("cannot read `{}`: {e}", f.display()),
                    location: None,
                }]
            })?;
            if text.trim().is_empty() {
                return Err(vec![ConfigError {
                    path: String::new(),
                    message: format!(
                        "`{}` is empty (caught mid-write?); the running config is kept. To go back to the built-in defaults on purpose, write `{{}}`",
                        f.display()
                    ),
                    location: None,
                }]);
            }
        }
        self.load(false).map(|(c, _)| c).map_err(flat)
    }

    /// A fingerprint of the files' names, sizes, modification times and inodes: the
    /// watcher reloads when it changes (a file edited, added to or removed from a
    /// directory). `None` while a file cannot be read.
    pub fn stamp(&self) -> Option<u64> {
        let files = self.files().ok()?;
        let mut h = DefaultHasher::new();
        for f in &files {
            f.hash(&mut h);
            stamp(f)?.hash(&mut h);
        }
        Some(h.finish())
    }
}

fn whole(path: &Path, message: String) -> ConfigErrors {
    ConfigErrors {
        source: path.display().to_string(),
        errors: vec![ConfigError {
            path: String::new(),
            message,
            location: None,
        }],
    }
}

/// Merges the parts in order, recording where each value came from.
fn merge_parts(parts: &[Part]) -> Result<(Value, Vec<Origin>), Vec<ConfigError>> {
    let mut merged = Value::Mapping(Mapping::new());
    let mut origins = Vec::new();
    let mut errors = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let value: Value = yaml_serde::from_str(&part.text).unwrap_or(Value::Null);
        if value.is_null() {
            continue;
        }
        let mut m = Merge {
            parts,
            part: i,
            origins: &mut origins,
            errors: &mut errors,
        };
        m.value(&mut merged, value, "", "");
    }
    policy_names(&merged, &origins, parts, &mut errors);
    if errors.is_empty() {
        Ok((merged, origins))
    } else {
        Err(errors)
    }
}

struct Merge<'a> {
    parts: &'a [Part],
    part: usize,
    origins: &'a mut Vec<Origin>,
    errors: &'a mut Vec<ConfigError>,
}

impl Merge<'_> {
    /// Merges `value` (at `written` in this part) into `into` (at `merged`).
    fn value(&mut self, into: &mut Value, value: Value, merged: &str, written: &str) {
        match (into, value) {
            (Value::Mapping(have), Value::Mapping(add)) => {
                for (k, v) in add {
                    let key = k.as_str().map_or_else(|| format!("{k:?}"), str::to_owned);
                    let (m, w) = (join(merged, &key), join(written, &key));
                    match have.get_mut(&k) {
                        Some(existing) => self.value(existing, v, &m, &w),
                        None => {
                            self.origin(&m, &w);
                            have.insert(k, v);
                        }
                    }
                }
            }
            (Value::Sequence(have), Value::Sequence(add)) => {
                for (j, v) in add.into_iter().enumerate() {
                    self.origin(
                        &format!("{merged}[{}]", have.len()),
                        &format!("{written}[{j}]"),
                    );
                    have.push(v);
                }
            }
            (existing, v) if *existing == v => {}
            (_, _) => {
                // Where the first file wrote it: its path there, and its line.
                let first = self
                    .origins
                    .iter()
                    .rev()
                    .find(|o| merged == o.merged || merged.starts_with(&format!("{}.", o.merged)))
                    .map_or("another file".to_owned(), |o| {
                        let part = &self.parts[o.part];
                        let path = format!("{}{}", o.written, &merged[o.merged.len()..]);
                        match locate::locate(&part.text, &path) {
                            Some((line, _)) => format!("{} ({path}, line {line})", part.name),
                            None => format!("{} ({path})", part.name),
                        }
                    });
                let here = &self.parts[self.part];
                self.errors.push(ConfigError {
                    path: format!("{}: {written}", here.name),
                    message: format!(
                        "also set in {first}, to something else; set it in one file only"
                    ),
                    location: locate::locate(&here.text, written),
                });
            }
        }
    }

    fn origin(&mut self, merged: &str, written: &str) {
        self.origins.push(Origin {
            merged: merged.to_owned(),
            part: self.part,
            written: written.to_owned(),
        });
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Two policies of one name in different files: the recipes' most likely clash, named
/// with both files (validation's own message would name only merged positions).
fn policy_names(merged: &Value, origins: &[Origin], parts: &[Part], errors: &mut Vec<ConfigError>) {
    let Some(policies) = merged.get("policies").and_then(Value::as_sequence) else {
        return;
    };
    let origin = |i: usize| resolve(origins, &format!("policies[{i}]"));
    for (i, p) in policies.iter().enumerate() {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let Some(j) = policies[..i]
            .iter()
            .position(|q| q.get("name").and_then(Value::as_str) == Some(name))
        else {
            continue;
        };
        let (Some(a), Some(b)) = (origin(j), origin(i)) else {
            continue;
        };
        if a.0 == b.0 {
            continue; // one file's own duplicate: validation reports it in that file
        }
        let here = &parts[b.0];
        let path = format!("{}.name", b.1);
        let first_line = locate::locate(&parts[a.0].text, &format!("{}.name", a.1))
            .map_or(String::new(), |(line, _)| format!(", line {line}"));
        errors.push(ConfigError {
            path: format!("{}: {path}", here.name),
            message: format!(
                "a policy named `{name}` is already defined in {} ({}{first_line}); give one of them another name",
                parts[a.0].name, a.1
            ),
            location: locate::locate(&here.text, &path),
        });
    }
}

/// Which part wrote the value at `merged`, and its path there: the longest recorded
/// prefix of the path (a list or section one file wrote whole holds what is under it).
fn resolve(origins: &[Origin], merged: &str) -> Option<(usize, String)> {
    origins
        .iter()
        .filter(|o| {
            merged == o.merged
                || merged.starts_with(&format!("{}.", o.merged))
                || merged.starts_with(&format!("{}[", o.merged))
        })
        .max_by_key(|o| o.merged.len())
        .map(|o| {
            (
                o.part,
                format!("{}{}", o.written, &merged[o.merged.len()..]),
            )
        })
}

/// An error of the merged config, told in the file and at the line its value came from;
/// one the files share stays as it is.
fn traced(mut e: ConfigError, parts: &[Part], origins: &[Origin]) -> ConfigError {
    match resolve(origins, &e.path) {
        Some((part, written)) => {
            let part = &parts[part];
            e.location = locate::locate(&part.text, &written);
            e.path = format!("{}: {written}", part.name);
        }
        // A path no one file wrote alone (a section several files add to): no line.
        None => e.location = None,
    }
    e
}

/// What the watcher compares: modification time, size and (on Unix) the inode, which
/// an atomic replacement (write a new file, rename it over the old) changes.
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Some((m.modified().ok()?, m.len(), inode))
}
