//! Hot reload: on file change, SIGHUP or `POST /reload`. The new file is validated
//! first; an invalid one leaves the running config in place and reports every error.
//! A request keeps the runtime it started with, so a reload fails no request.

use crate::config::ConfigDiff;
use crate::config::{ConfigError, ConfigFiles, diff};
use crate::metrics::ResultLabels;
use crate::state::{Runtime, Shared};
use crate::upstream::UpstreamClient;
use std::sync::Arc;
use std::time::Duration;

/// Reloads the config file the gateway was started with.
pub async fn reload(shared: &Arc<Shared>) -> Result<ConfigDiff, Vec<ConfigError>> {
    let _guard = shared.reload_lock.lock().await;
    let result = try_reload(shared);
    let label = ResultLabels {
        result: if result.is_ok() { "ok" } else { "error" },
    };
    shared.metrics.reloads.get_or_create(&label).inc();
    shared.ui.reloaded(match &result {
        Ok(d) => serde_json::json!({ "reloaded": true, "diff": d }),
        Err(errors) => serde_json::json!({
            "reloaded": false,
            "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        }),
    });
    match &result {
        Ok(d) => {
            tracing::info!(changed = ?d.changed, paths = ?d.paths, needs_restart = ?d.needs_restart, "config reloaded")
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
    let Some(files) = &shared.config_files else {
        return Err(vec![ConfigError {
            path: String::new(),
            message: "tollgate runs on built-in defaults (no --config file): nothing to reload"
                .into(),
            location: None,
        }]);
    };
    let mut config = files.reload()?;
    shared.overrides.apply(&mut config);
    let current = shared.runtime.load_full();
    let d = diff(&current.config, &config);
    let egress = shared.egress(&config);
    let clients = if current.client.settings == config.upstream && current.client.egress == egress {
        shared.clients()
    } else {
        UpstreamClient::for_workers(
            &config.upstream,
            &egress,
            &shared.metrics,
            shared.locals.len(),
        )
        .map_err(|message| {
            vec![ConfigError {
                path: "upstream.tls".into(),
                message,
                location: None,
            }]
        })?
    };
    for w in config.policies.warnings() {
        tracing::warn!("{w}");
    }
    // Resources whose definition did not change keep their state (counters, queues,
    // caches); requests in flight finish on the engine they started with.
    let engine = crate::policy::Engine::build(
        &config.policies,
        Some(&current.engine),
        &shared.store,
        &shared.metrics,
    );
    let intercept = crate::intercept::Interceptor::build(
        &config.intercept,
        current.intercept.as_ref(),
        &shared.metrics,
    );
    let runtime = Runtime {
        intercept,
        diag: Arc::new(crate::diagnosis::Plan::new(&config.diagnosis_given())),
        config: Arc::new(config),
        client: clients[0].clone(),
        engine: Arc::new(engine),
    };
    shared.install(runtime, &clients);
    Ok(d)
}

/// How often the watcher looks at the file.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// Polls the files' stamp every [`WATCH_INTERVAL`] and reloads once a change has
/// settled: the stamp differs from the running config's and is the same at two polls in
/// a row. A file caught in the middle of a write (still growing, or truncated before
/// being rewritten) is not applied; a change is applied 0.5–1 s after the last write.
/// `last` is the stamp taken before the running config was read, so a change in between
/// is not missed.
pub async fn watch(shared: Arc<Shared>, files: ConfigFiles, mut last: Option<u64>) {
    let mut tick = tokio::time::interval(WATCH_INTERVAL);
    let mut seen = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.stop.cancelled() => return,
        }
        let now = files.stamp();
        if now.is_none() || now == last {
            seen = None;
        } else if now == seen {
            last = now;
            seen = None;
            let _ = reload(&shared).await;
        } else {
            seen = now;
        }
    }
}
