//! A typed diff between two configs, logged and returned on reload so operators see
//! what a reload changed (and what needs a restart).

use super::Config;

/// What changed between two configs, by section.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConfigDiff {
    /// Sections whose new values apply to requests that start after the reload.
    pub changed: Vec<&'static str>,
    /// Changes that only take effect after a restart (listener addresses, log set-up).
    pub needs_restart: Vec<&'static str>,
}

impl ConfigDiff {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.needs_restart.is_empty()
    }
}

pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    let (o, n) = (old.effective(), new.effective());
    for section in [
        "listen",
        "admin",
        "upstream",
        "domains",
        "egress",
        "routes",
        "endpoints",
        "policies",
        "log",
        "metrics",
        "diagnosis",
        "shutdown",
    ] {
        if o[section] != n[section] {
            d.changed.push(section);
        }
    }
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
    if old.metrics != new.metrics {
        d.needs_restart.push("metrics.max_hosts");
    }
    d
}
