//! What the dashboard (docs/dashboard.md) keeps and serves: its pages and assets, the
//! live calls, the last minute, the login sessions, the last reload. The admin listener
//! answers its paths (`admin::ui`); the workers count the last minute, the observer
//! thread fills the rest.

pub mod assets;
pub mod live;
pub mod minute;
pub mod session;
pub mod throttle;

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// What the dashboard keeps: the live calls, the last minute, the sessions, the last
/// reload. Made once with the gateway.
pub struct Dashboard {
    pub live: Arc<live::Live>,
    /// The last minute, one per data-plane worker (each counts its own requests).
    minutes: Box<[WorkerMinute]>,
    pub sessions: session::Sessions,
    /// Wrong admin tokens by client address (the form's and `Authorization`'s).
    pub logins: throttle::Logins,
    started: SystemTime,
    /// When the gateway started, on the clock the minutes' seconds count from.
    started_at: Instant,
    last_reload: Mutex<Option<Value>>,
}

impl Dashboard {
    pub fn new(
        watching: crate::diagnosis::Watching,
        metrics: &crate::metrics::Metrics,
        workers: usize,
    ) -> Self {
        Self {
            live: Arc::new(live::Live::new(watching, metrics)),
            minutes: (0..workers.max(1))
                .map(|_| WorkerMinute::default())
                .collect(),
            sessions: session::Sessions::default(),
            logins: throttle::Logins::default(),
            started: SystemTime::now(),
            started_at: Instant::now(),
            last_reload: Mutex::default(),
        }
    }

    /// Records a reload's outcome for the config view.
    pub fn reloaded(&self, outcome: Value) {
        let mut v = outcome;
        v["at"] = json!(timestamp(SystemTime::now()));
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
    }

    /// Counts a call of worker `worker` that ended at `at`.
    pub fn count(&self, worker: usize, at: Instant, total: Duration, failed: bool) {
        if let Some(m) = self.minutes.get(worker) {
            let second = at.saturating_duration_since(self.started_at).as_secs();
            let mut m = m.0.lock().unwrap_or_else(|p| p.into_inner());
            m.get_or_insert_default().record(second, total, failed);
        }
    }

    /// The minute before now, over every worker's.
    pub fn last_minute(&self) -> minute::LastMinute {
        let now = self.started_at.elapsed().as_secs();
        let held: Vec<_> = self
            .minutes
            .iter()
            .map(|m| m.0.lock().unwrap_or_else(|p| p.into_inner()))
            .collect();
        minute::last_of(held.iter().filter_map(|m| m.as_ref()), now, 0)
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

/// A worker's last minute, alone on its cache lines: its worker locks it per request.
/// Made by the worker's first call, so its slots lie on the worker's own heap pages.
#[derive(Default)]
#[repr(align(128))]
struct WorkerMinute(Mutex<Option<minute::Minute>>);

pub fn unix_s(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn timestamp(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}
