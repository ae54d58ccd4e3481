//! `tollgate check`: a config is valid when everything `run` builds from it builds — the
//! compiled policy chains, a writable access log, the diagnosis sinks — not only when it
//! parses.

use crate::config::Config;

/// Builds what `run` would from `config`. `Ok` carries warnings (policies that never
/// apply); `Err` the first thing `run` could not build.
pub fn check(config: &Config) -> Result<Vec<String>, String> {
    let metrics = crate::metrics::Metrics::default();
    let store =
        crate::policy::store::build(&config.store, &metrics).map_err(|e| format!("store: {e}"))?;
    crate::policy::Engine::build(&config.policies, None, &store, &metrics);
    if let Some(p) = &config.log.access_log_file {
        crate::observe::check_access_log(p)?;
    }
    crate::diagnosis::check(&config.diagnosis_given(), &config.upstream)?;
    Ok(config.policies.warnings())
}
