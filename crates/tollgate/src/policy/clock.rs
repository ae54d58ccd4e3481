//! Wall-clock time for windows and deadlines, read through tokio's clock: unix time at
//! the first reading plus tokio's elapsed time since. Tests pause and advance tokio's
//! clock, and every window, queue wait and breaker period follows.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    let (at, unix) = *ANCHOR.get_or_init(|| {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        (Instant::now(), unix)
    });
    unix + Instant::now().saturating_duration_since(at).as_millis() as u64
}

/// The tokio instant `ms` (unix milliseconds) corresponds to.
pub fn instant_at(ms: u64) -> Instant {
    let now = now_ms();
    if ms >= now {
        Instant::now() + Duration::from_millis(ms - now)
    } else {
        Instant::now()
    }
}

/// Seconds from now until `ms`, rounded up (for `Retry-After`), at least 1.
pub fn secs_until(ms: u64) -> u64 {
    ms.saturating_sub(now_ms()).div_ceil(1000).max(1)
}

/// Seconds from now until `at`, rounded up (for `Retry-After`), at least 1.
pub fn secs_until_instant(at: Instant) -> u64 {
    (at.saturating_duration_since(Instant::now()).as_millis() as u64)
        .div_ceil(1000)
        .max(1)
}
