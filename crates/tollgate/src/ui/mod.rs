//! What the dashboard (docs/dashboard.md) keeps and serves: its pages and assets, the
//! live calls, the last minute, the login sessions, the last reload. The admin listener
//! answers its paths (`admin::ui`); the observer thread fills it.

pub mod assets;
pub mod live;
pub mod minute;
pub mod session;

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What the dashboard keeps: the live calls, the last minute, the sessions, the last
/// reload. Made once with the gateway.
pub struct Dashboard {
    pub live: Arc<live::Live>,
    pub minute: Mutex<minute::Minute>,
    pub sessions: session::Sessions,
    started: SystemTime,
    last_reload: Mutex<Option<Value>>,
}

impl Dashboard {
    pub fn new(watching: crate::diagnosis::Watching, metrics: &crate::metrics::Metrics) -> Self {
        Self {
            live: Arc::new(live::Live::new(watching, metrics)),
            minute: Mutex::default(),
            sessions: session::Sessions::default(),
            started: SystemTime::now(),
            last_reload: Mutex::default(),
        }
    }

    /// Records a reload's outcome for the config view.
    pub fn reloaded(&self, outcome: Value) {
        let mut v = outcome;
        v["at"] = json!(timestamp(SystemTime::now()));
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
    }

    /// When the gateway started.
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// The last reload's outcome, if any.
    pub fn last_reload(&self) -> Option<Value> {
        self.last_reload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

pub fn unix_s(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn timestamp(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}
