//! Hot reload: on file change, SIGHUP or `POST /reload`. The new file is validated
//! first; an invalid one leaves the running config in place and reports every error.
//! A request keeps the runtime it started with, so a reload fails no request.

use crate::config::ConfigDiff;
use crate::config::{Config, ConfigError, diff};
use crate::metrics::ResultLabels;
use crate::state::{Runtime, Shared};
use crate::upstream::UpstreamClient;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Reloads the config file the gateway was started with.
pub async fn reload(shared: &Arc<Shared>) -> Result<ConfigDiff, Vec<ConfigError>> {
    let _guard = shared.reload_lock.lock().await;
    let result = try_reload(shared);
    let label = ResultLabels {
        result: if result.is_ok() { "ok" } else { "error" },
    };
    shared.metrics.reloads.get_or_create(&label).inc();
    match &result {
        Ok(d) => {
            tracing::info!(changed = ?d.changed, needs_restart = ?d.needs_restart, "config reloaded")
        }
        Err(errors) => {
            for e in errors {
                tracing::error!("reload rejected, running config kept: {e}");
            }
        }
    }
    result
}

fn try_reload(shared: &Arc<Shared>) -> Result<ConfigDiff, Vec<ConfigError>> {
    let Some(path) = &shared.config_path else {
        return Err(vec![ConfigError {
            path: String::new(),
            message: "tollgate runs on built-in defaults (no --config file): nothing to reload"
                .into(),
            location: None,
        }]);
    };
    let mut config = Config::load(path).map_err(|e| e.errors)?;
    shared.overrides.apply(&mut config);
    let current = shared.runtime.load_full();
    let d = diff(&current.config, &config);
    let client = if current.client.settings == config.upstream {
        current.client.clone()
    } else {
        let c =
            UpstreamClient::new(&config.upstream, shared.metrics.clone()).map_err(|message| {
                vec![ConfigError {
                    path: "upstream.tls".into(),
                    message,
                    location: None,
                }]
            })?;
        Arc::new(c)
    };
    shared.runtime.store(Arc::new(Runtime {
        config: Arc::new(config),
        client,
    }));
    Ok(d)
}

/// What the watcher compares: modification time and size.
pub type Stamp = Option<(SystemTime, u64)>;

pub fn stamp(path: &std::path::Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Polls the file's stamp every 500 ms and reloads when it changes. `last` is the stamp
/// taken before the running config was read, so a change in between is not missed.
pub async fn watch(shared: Arc<Shared>, path: PathBuf, mut last: Stamp) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.stop.cancelled() => return,
        }
        let now = stamp(&path);
        if now.is_some() && now != last {
            last = now;
            let _ = reload(&shared).await;
        }
    }
}
