//! Configuration: the YAML file is read into raw serde types (unknown keys rejected),
//! then validated into the domain types below. Errors name the field path, and the
//! line and column where the YAML parser gives them.

pub mod append;
mod conceal;
mod diff;
pub mod files;
mod locate;
pub mod raw;
pub mod raw_diagnosis;
pub mod raw_endpoints;
pub mod raw_policy;
mod shorthand;
mod validate;
mod validate_diagnosis;
mod validate_endpoints;
mod validate_intercept;
mod validate_policy;
mod validate_store;
mod written;

pub use crate::fields::{ConfigError, units};
pub use crate::logging::Log;
pub use crate::upstream::Settings as Upstream;
pub use diff::{ConfigDiff, diff};

use crate::domains::DomainRules;
use crate::egress::EgressRules;
use crate::policy::PolicySet;
use crate::routes::RouteTable;
use crate::secret::Secret;
pub use files::ConfigFiles;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The validated configuration a request runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    pub admin: Admin,
    pub upstream: Upstream,
    pub domains: DomainRules,
    pub egress: EgressRules,
    pub intercept: crate::intercept::Intercept,
    pub store: crate::policy::store::settings::StoreSettings,
    pub routes: RouteTable,
    pub endpoints: crate::aggregate::Endpoints,
    pub policies: PolicySet,
    pub log: Log,
    /// As written: nothing to resolve.
    pub metrics: raw::RawMetrics,
    pub diagnosis: crate::diagnosis::settings::Diagnosis,
    /// As written: nothing to resolve.
    pub shutdown: raw::RawShutdown,
    /// The policies and shared limits as written (defaults filled in, secrets masked),
    /// for `GET /config` and the reload diff.
    pub written: serde_json::Value,
    /// The whole file as written with each secret as a keyed fingerprint (never shown):
    /// the reload diff names a rotated secret's path from it.
    pub fingerprints: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Listen {
    pub address: SocketAddr,
    pub max_header_bytes: usize,
    pub header_read_timeout: Duration,
    pub max_concurrent_streams: u32,
    pub send_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Admin {
    pub address: SocketAddr,
    pub token: Option<Secret>,
    /// `admin.hosts`: names a request's `Host` may give without a token.
    pub hosts: Vec<crate::glob::HostGlob>,
    pub ui: Ui,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ui {
    pub enabled: bool,
    pub session_ttl: std::time::Duration,
    pub max_sessions: usize,
}

impl Default for Config {
    fn default() -> Self {
        validate::validate(&raw::RawConfig::default()).expect("built-in defaults are valid")
    }
}

/// Every problem found in a config file (validation reports them all, not only the first).
#[derive(Debug, Clone)]
pub struct ConfigErrors {
    pub source: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config {}:", self.source)?;
        for e in &self.errors {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        Self::read(path, false).map(|(c, _)| c)
    }

    /// [`Config::load`] for `check --env-optional` (CI checking a file whose secrets are
    /// set only where it runs): unset `${VARS}` come back as warnings, not errors.
    pub fn load_env_optional(path: &Path) -> Result<(Config, Vec<String>), ConfigErrors> {
        Self::read(path, true)
    }

    fn read(path: &Path, env_optional: bool) -> Result<(Config, Vec<String>), ConfigErrors> {
        let source = path.display().to_string();
        let text = read_text(path).map_err(|e| ConfigErrors {
            source: source.clone(),
            errors: vec![ConfigError {
                path: String::new(),
                message: format!("cannot read file: {e}"),
                location: None,
            }],
        })?;
        parse_all(&text)
            .and_then(|(raw, units)| {
                validate::validate_env(&raw, units, env_optional).map_err(|e| placed(&text, e))
            })
            .map_err(|errors| ConfigErrors { source, errors })
    }

    /// Parses and validates YAML text.
    pub fn from_yaml(text: &str) -> Result<Config, Vec<ConfigError>> {
        let (raw, units) = parse_all(text)?;
        validate::validate_env(&raw, units, false)
            .map(|(c, _)| c)
            .map_err(|e| placed(text, e))
    }

    /// What diagnosis needs of this config: its settings, the policies' names and path
    /// templates, and the secrets it must redact (credentials, the admin token).
    pub fn diagnosis_given(&self) -> crate::diagnosis::Given<'_> {
        let (mut names, mut values) = (Vec::new(), Vec::new());
        for p in &self.policies.policies {
            p.spec.secrets(&mut names, &mut values);
        }
        if let Some(t) = &self.admin.token {
            values.push(t.expose().to_owned());
        }
        crate::diagnosis::Given {
            settings: &self.diagnosis,
            policies: self
                .policies
                .policies
                .iter()
                .map(|p| (p.name.as_str(), p.matcher.path.as_ref().map(|t| t.as_str())))
                .collect(),
            secret_names: names,
            secret_values: values,
        }
    }

    /// The effective configuration as JSON, secrets masked (served by `GET /config`).
    pub fn effective(&self) -> serde_json::Value {
        validate::effective(self)
    }
}

/// Validation's errors with the line and column of their paths ([`locate`]).
fn placed(text: &str, mut errors: Vec<ConfigError>) -> Vec<ConfigError> {
    for e in errors.iter_mut().filter(|e| e.location.is_none()) {
        e.location = locate::locate(text, &e.path);
    }
    errors
}

/// A config file's text, without the UTF-8 byte order mark an editor on Windows may
/// write first (YAML 1.2 §5.2 allows it; the parser would read it as a document of its
/// own).
pub fn read_text(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Parses YAML into the raw types, naming the failing field path and its line:column;
/// a duration, size, share or count outside its field's type is an error too.
pub fn parse(text: &str) -> Result<raw::RawConfig, Vec<ConfigError>> {
    match parse_all(text)? {
        (raw, units) if units.is_empty() => Ok(raw),
        (_, units) => Err(units),
    }
}

/// [`parse`], with the values outside their unit types returned beside the raw config
/// (each at its path and line), for validation to report with every other error.
fn parse_all(text: &str) -> Result<(raw::RawConfig, Vec<ConfigError>), Vec<ConfigError>> {
    // An empty file (or one with only comments) means "all defaults".
    if matches!(
        yaml_serde::from_str::<yaml_serde::Value>(text),
        Ok(yaml_serde::Value::Null)
    ) {
        return Ok((raw::RawConfig::default(), Vec::new()));
    }
    let (raw, invalid) = crate::fields::units::reading(|| deserialize(text))?;
    // Each further pass stops at the next invalid value, which the parser then places
    // (at the start of the mapping that holds it: the key is looked for from there).
    let units = (1..=invalid)
        .filter_map(|n| crate::fields::units::failing_at(n, || deserialize(text)).err())
        .flatten()
        .map(|mut e| {
            let key = e.path.rsplit('.').next().unwrap_or_default();
            if let Some(at) = e.location
                && !key.ends_with(']')
                && let Some(&first) = key_lines(text, at, key).as_deref().and_then(<[_]>::first)
            {
                e.location = Some(first);
            }
            e
        })
        .collect();
    Ok((raw, units))
}

fn deserialize(text: &str) -> Result<raw::RawConfig, Vec<ConfigError>> {
    let de = yaml_serde::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let mut location = inner.location().map(|l| (l.line(), l.column()));
        let mut message = inner.to_string();
        // An unclosed quote is found where the file ends; the user needs where it opened,
        // which the parser gives as the context (`…, while scanning a quoted scalar at
        // line L column C`).
        if let Some(at) = message
            .split_once("while scanning a quoted scalar at ")
            .and_then(|(_, rest)| mark(rest))
        {
            location = Some(at);
            message =
                "a quoted string starts here and is never closed; add the closing quote".into();
        }
        // yaml_serde appends " at line L column C" (and a context); we report the location separately.
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        // yaml_serde also prefixes its own view of the path; we report ours.
        if let Some((prefix, rest)) = message.split_once(": ")
            && !prefix.contains(' ')
            && path.starts_with(prefix)
        {
            message = rest.to_owned();
        }
        // A `{` never closed is found where the file (or the next key) begins; the user
        // needs where it opened.
        if message.contains("did not find expected ',' or '}'")
            && let Some(open) = location.and_then(|at| unclosed_brace(text, at))
        {
            location = Some(open);
            message = "this `{` is never closed: add the `}` (inside `{ }`, quote a value that holds `{`, `}` or `,`, such as \"${VAR}\")".into();
        }
        if message.contains("cannot start any token") || message.contains("tab character") {
            let at = location.and_then(|(l, c)| {
                text.lines()
                    .nth(l.checked_sub(1)?)?
                    .chars()
                    .nth(c.checked_sub(1)?)
            });
            if at == Some('\t') {
                message =
                    "a tab character: YAML indents with spaces only; replace the tab with spaces"
                        .into();
            }
        }
        // The parser places a duplicate key at the start of its mapping (line 1 for a
        // top-level key): point at the second one, and at where the first one is.
        if let Some(key) = message
            .strip_prefix("duplicate field `")
            .and_then(|m| m.strip_suffix('`'))
            && let Some((first, second)) = location.and_then(|at| duplicate(text, at, key))
        {
            location = Some(second);
            message = format!(
                "`{key}` is written twice (first at line {}): keep one; to add to its list or section, write under the first",
                first.0
            );
        }
        let (path, message) = conceal::conceal(&path, &message, location);
        vec![ConfigError {
            path: if path == "." { String::new() } else { path },
            message: humanize(&message),
            location,
        }]
    })
}

/// The last `{` before `at` (line and column, 1-based) that no `}` closes, outside
/// quotes and comments: where an unclosed flow mapping opened.
fn unclosed_brace(text: &str, at: (usize, usize)) -> Option<(usize, usize)> {
    let mut open = Vec::new();
    for (i, line) in text.lines().enumerate().take(at.0) {
        let mut quote = None;
        for (j, c) in line.char_indices() {
            if i + 1 == at.0 && j + 1 >= at.1 {
                break;
            }
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') if j == 0 || line[..j].ends_with(' ') => break,
                (None, '{') => open.push((i + 1, j + 1)),
                (None, '}') => {
                    open.pop();
                }
                _ => {}
            }
        }
    }
    open.pop()
}

/// Where `key` is written first and second in the mapping that starts at `at` (line and
/// column, 1-based): a block mapping's keys at that column, or a flow mapping `{…}`'s.
fn duplicate(
    text: &str,
    at: (usize, usize),
    key: &str,
) -> Option<((usize, usize), (usize, usize))> {
    let found = key_lines(text, at, key)?;
    (found.len() >= 2).then(|| (found[0], found[1]))
}

/// Where `key` is written (its first two times) in the mapping that starts at `at`.
fn key_lines(text: &str, at: (usize, usize), key: &str) -> Option<Vec<(usize, usize)>> {
    let lines: Vec<&str> = text.lines().collect();
    let (line, col) = (at.0.checked_sub(1)?, at.1.checked_sub(1)?);
    let is_key = |rest: &str| {
        let rest = rest
            .strip_prefix(key)
            .or_else(|| rest.strip_prefix(&format!("\"{key}\"")))
            .or_else(|| rest.strip_prefix(&format!("'{key}'")));
        rest.is_some_and(|r| r.trim_start().starts_with(':'))
    };
    let mut found = Vec::new();
    if lines.get(line)?.get(col..)?.starts_with('{') {
        // A flow mapping: keys follow `{` or `,`.
        for (i, l) in lines.iter().enumerate().skip(line) {
            let from = if i == line { col } else { 0 };
            for (j, c) in l.char_indices().filter(|(j, _)| *j >= from) {
                if (c == '{' || c == ',') && is_key(l[j + 1..].trim_start()) {
                    let k = j + 1 + (l[j + 1..].len() - l[j + 1..].trim_start().len());
                    found.push((i + 1, k + 1));
                }
            }
            if found.len() >= 2 || l.contains('}') {
                break;
            }
        }
    } else {
        for (i, l) in lines.iter().enumerate().skip(line) {
            let indent = l.len() - l.trim_start().len();
            let blank = l.trim().is_empty() || l.trim_start().starts_with('#');
            if i > line && !blank && indent < col {
                break;
            }
            if (i == line || indent == col) && l.get(col..).is_some_and(is_key) {
                found.push((i + 1, col + 1));
            }
            if found.len() >= 2 {
                break;
            }
        }
    }
    Some(found)
}

/// `line L column C` at the start of `s`.
fn mark(s: &str) -> Option<(usize, usize)> {
    let rest = s.strip_prefix("line ")?;
    let (line, rest) = rest.split_once(" column ")?;
    let col: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((line.parse().ok()?, col.parse().ok()?))
}

/// Says what to write instead of naming Rust types (`struct RawListen`, `u32`).
fn humanize(message: &str) -> String {
    let mut m = message.to_owned();
    // `expected struct RawX`: the section wants `key: value` lines.
    while let Some(i) = m.find("struct Raw") {
        let end = m[i..]
            .find(|c: char| !c.is_ascii_alphanumeric() && c != ' ')
            .map_or(m.len(), |e| i + e);
        m.replace_range(i..end, "`key: value` lines under it");
    }
    if m.contains("did not find expected ',' or '}'") {
        m.push_str("; inside `{ }`, quote a value that holds `{`, `}` or `,`, such as \"${VAR}\"");
    }
    for (rust, said) in [
        ("expected u16", "expected a whole number from 0 to 65535"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        ("expected usize", "expected a whole number (0 or more)"),
        ("expected u64", "expected a whole number (0 or more)"),
        (
            "expected a sequence",
            "expected a list (`- item` lines, or `[a, b]`)",
        ),
        ("expected a boolean", "expected `true` or `false`"),
        ("invalid type: map", "invalid type: `key: value` lines"),
        ("invalid type: sequence", "invalid type: a list"),
        (
            "data did not match any variant of untagged enum RawPort",
            "expected a port number (443), a range (\"8000-8100\") or \"*\"",
        ),
    ] {
        m = m.replace(rust, said);
    }
    m
}

/// The JSON Schema of the config file.
pub fn json_schema() -> String {
    let mut schema = schemars::schema_for!(raw::RawConfig).to_value();
    state_ranges(&mut schema);
    serde_json::to_string_pretty(&schema).expect("schema serialises") + "\n"
}

/// A unit field's range, which its type declares ([`crate::fields::units`]), joins the
/// field's description, where editors and the generated docs show it.
fn state_ranges(v: &mut serde_json::Value) {
    use crate::fields::units::RANGE_KEYWORD;
    match v {
        serde_json::Value::Object(m) => {
            if let Some(serde_json::Value::String(range)) = m.remove(RANGE_KEYWORD) {
                let sentence = format!("{}{}.", range[..1].to_uppercase(), &range[1..]);
                let text = match m.get("description").and_then(|d| d.as_str()) {
                    Some(d) => format!("{d} {sentence}"),
                    None => sentence,
                };
                m.insert("description".into(), text.into());
            }
            m.values_mut().for_each(state_ranges);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(state_ranges),
        _ => {}
    }
}
