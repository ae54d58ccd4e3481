//! A typed diff between two configs, logged and returned on reload so operators see
//! what a reload changed (and what needs a restart).

use super::Config;
use serde_json::Value;

/// Most changed paths listed: a rewritten file does not flood the log.
pub const MAX_PATHS: usize = 200;

/// What changed between two configs, by section.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConfigDiff {
    /// Sections whose new values apply to requests that start after the reload.
    pub changed: Vec<String>,
    /// Every value that changed, by its path: `policies[0].retry.base_delay`,
    /// `breakers.github.open_for` (at most [`MAX_PATHS`]).
    pub paths: Vec<String>,
    /// Changes that only take effect after a restart (listener addresses, log set-up).
    pub needs_restart: Vec<&'static str>,
}

impl ConfigDiff {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.needs_restart.is_empty()
    }
}

/// The sections a diff names: every key of the file, in its order (the declared
/// sections of the remedies' registry among them).
fn sections() -> Vec<String> {
    let all = yaml_serde::to_value(super::raw::RawConfig::default()).unwrap_or_default();
    all.as_mapping()
        .into_iter()
        .flat_map(|m| m.keys())
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect()
}

pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    let (o, n) = (old.effective(), new.effective());
    for section in sections() {
        if o[&section] != n[&section] {
            leaves(section.clone(), &o[&section], &n[&section], &mut d.paths);
            d.changed.push(section);
        }
    }
    // A rotated secret (`admin.token`, a credential) shows `MASKED` on both sides of the
    // views above: its path is found by its fingerprints, its value never shown.
    rotated(String::new(), &old.fingerprints, &new.fingerprints, &mut d);
    if old.listen.address != new.listen.address {
        d.needs_restart.push("listen.address");
    }
    if old.admin.address != new.admin.address {
        d.needs_restart.push("admin.address");
    }
    if old.log.level != new.log.level
        || old.log.json != new.log.json
        || old.log.access_log_file != new.log.access_log_file
    {
        d.needs_restart.push("log (level, format, access_log_file)");
    }
    if old.diagnosis != new.diagnosis {
        d.needs_restart.push("diagnosis");
    }
    if old.store != new.store {
        // Counters live in the store the gateway started with; a new one would start
        // every limit afresh.
        d.needs_restart.push("store");
    }
    if old.metrics != new.metrics {
        d.needs_restart.push("metrics.max_hosts");
    }
    d
}

/// The paths of the leaves that differ between `a` and `b` (a key or an element only on
/// one side is a leaf too).
fn leaves(path: String, a: &Value, b: &Value, out: &mut Vec<String>) {
    if a == b || out.len() >= MAX_PATHS {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            for k in keys {
                let (va, vb) = (&a[k.as_str()], &b[k.as_str()]);
                leaves(format!("{path}.{k}"), va, vb, out);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let (va, vb) = (
                    x.get(i).unwrap_or(&Value::Null),
                    y.get(i).unwrap_or(&Value::Null),
                );
                leaves(format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ => out.push(path),
    }
}

/// The paths of secrets whose fingerprints differ between `o` and `n` (a secret added or
/// removed shows in the views already), with their sections.
fn rotated(path: String, o: &Value, n: &Value, d: &mut ConfigDiff) {
    let secret = |v: &Value| v.as_str().is_some_and(|s| s.starts_with("MASKED#"));
    match (o, n) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, av) in a {
                if let Some(bv) = b.get(k) {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    rotated(p, av, bv, d);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                rotated(format!("{path}[{i}]"), av, bv, d);
            }
        }
        (a, b) if secret(a) && secret(b) && a != b => {
            let section = path.split(['.', '[']).next().unwrap_or_default();
            if !section.is_empty() && !d.changed.iter().any(|c| c == section) {
                d.changed.push(section.to_owned());
            }
            if d.paths.len() < MAX_PATHS && !d.paths.contains(&path) {
                d.paths.push(path);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_appended_route_is_named_at_its_place_in_the_file() {
        let old =
            Config::from_yaml("routes:\n  - {prefix: /a, upstream: 'http://a.example'}\n").unwrap();
        // Longer: matched first, but the file's second route.
        let new = Config::from_yaml(
            "routes:\n  - {prefix: /a, upstream: 'http://a.example'}\n  - {prefix: /longer, upstream: 'http://b.example'}\n",
        )
        .unwrap();
        let d = diff(&old, &new);
        assert!(
            d.paths.iter().all(|p| p.starts_with("routes[1]")),
            "{:?}",
            d.paths
        );
    }

    #[test]
    fn a_change_deep_in_a_policy_is_named_by_its_path() {
        let old = Config::from_yaml(
            "breakers:\n  gh: {consecutive_failures: 5}\npolicies:\n  - name: p\n    retry: {base_delay: 100ms}\n    breaker: gh\n",
        )
        .unwrap();
        let new = Config::from_yaml(
            "breakers:\n  gh: {consecutive_failures: 5, open_for: 10s}\npolicies:\n  - name: p\n    retry: {base_delay: 250ms}\n    breaker: gh\n",
        )
        .unwrap();
        let d = diff(&old, &new);
        assert_eq!(d.changed, ["policies", "breakers"]);
        assert_eq!(
            d.paths,
            [
                "policies[0].breaker.open_for",
                "policies[0].retry.base_delay",
                "breakers.gh.open_for"
            ]
        );
        assert!(diff(&new, &new).is_empty());
    }
}
