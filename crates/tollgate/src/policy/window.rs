//! Fixed windows aligned to the clock: second, minute, hour, day (UTC), and for quotas a
//! day or a calendar month in a time zone, renewing on a given day of the month.

use crate::fields::Errors;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, PartialEq)]
pub enum Window {
    /// A fixed length in milliseconds, aligned to the Unix epoch (second, minute, hour, UTC day).
    Fixed(u64),
    /// A day starting at midnight in a time zone.
    Day { tz: TimeZone, last: Last },
    /// A month starting at midnight of `renews_on` in a time zone.
    Month {
        renews_on: i8,
        tz: TimeZone,
        last: Last,
    },
}

/// The calendar window found last, so that the time zone's rules are not applied again
/// on every request of the same day or month (jiff's conversions are some 1 000
/// instructions a call): its start in seconds (the high 40 bits) and its length in
/// seconds (the low 24: 194 days), in one word that every request reads without a lock
/// and that whichever request first sees the next window writes; 0 until then.
#[derive(Debug, Default)]
pub struct Last(AtomicU64);

impl Last {
    const LEN_BITS: u32 = 24;

    fn get(&self, now_ms: u64) -> Option<(u64, u64)> {
        let v = self.0.load(Ordering::Relaxed);
        let start = (v >> Self::LEN_BITS) * 1000;
        let end = start + (v & ((1 << Self::LEN_BITS) - 1)) * 1000;
        (v != 0 && start <= now_ms && now_ms < end).then_some((start, end))
    }

    /// Keeps `(start, end)` when both are whole seconds and fit the word.
    fn set(&self, (start, end): (u64, u64)) {
        let len = end.saturating_sub(start) / 1000;
        let whole = start % 1000 == 0 && end % 1000 == 0;
        if whole && len > 0 && len < 1 << Self::LEN_BITS && start / 1000 < 1 << 40 {
            self.0
                .store((start / 1000) << Self::LEN_BITS | len, Ordering::Relaxed);
        }
    }
}

/// Copies start empty: each holder finds its own.
impl Clone for Last {
    fn clone(&self) -> Self {
        Last::default()
    }
}

/// A window is its definition: what it found last is not part of it.
impl PartialEq for Last {
    fn eq(&self, _: &Last) -> bool {
        true
    }
}

impl Window {
    /// A day starting at midnight in `tz`.
    pub fn day(tz: TimeZone) -> Window {
        Window::Day {
            tz,
            last: Last::default(),
        }
    }

    /// A month starting at midnight of `renews_on` in `tz`.
    pub fn month(renews_on: i8, tz: TimeZone) -> Window {
        Window::Month {
            renews_on,
            tz,
            last: Last::default(),
        }
    }

    /// `second`, `minute`, `hour`, `day` (UTC).
    pub fn parse_fixed(s: &str) -> Option<Window> {
        Some(Window::Fixed(match s {
            "second" => 1_000,
            "minute" => 60_000,
            "hour" => 3_600_000,
            "day" => 86_400_000,
            _ => return None,
        }))
    }

    /// The window holding `now_ms`: its start and end (unix ms).
    pub fn bounds(&self, now_ms: u64) -> (u64, u64) {
        match self {
            Window::Fixed(len) => {
                let start = now_ms - now_ms % len;
                (start, start + len)
            }
            Window::Day { tz, last } => last.get(now_ms).unwrap_or_else(|| {
                let z = zoned(now_ms, tz);
                let start = z.start_of_day().unwrap_or_else(|_| z.clone());
                let end = start.checked_add(1.day()).unwrap_or_else(|_| start.clone());
                let b = (ms(&start), ms(&end));
                last.set(b);
                b
            }),
            Window::Month {
                renews_on,
                tz,
                last,
            } => last.get(now_ms).unwrap_or_else(|| {
                let z = zoned(now_ms, tz);
                let at = |y: i16, m: i8| {
                    jiff::civil::date(y, m, *renews_on)
                        .to_zoned(tz.clone())
                        .map(|z| ms(&z))
                        .unwrap_or(now_ms)
                };
                let (y, m) = (z.year(), z.month());
                let this = at(y, m);
                let (prev, next) = (
                    if m == 1 { at(y - 1, 12) } else { at(y, m - 1) },
                    if m == 12 { at(y + 1, 1) } else { at(y, m + 1) },
                );
                let b = match now_ms >= this {
                    true => (this, next),
                    false => (prev, this),
                };
                last.set(b);
                b
            }),
        }
    }
}

fn zoned(now_ms: u64, tz: &TimeZone) -> Zoned {
    Timestamp::from_millisecond(now_ms as i64)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_zoned(tz.clone())
}

fn ms(z: &Zoned) -> u64 {
    z.timestamp().as_millisecond().max(0) as u64
}

// ---- config: as written, and its validation ----

pub fn window(e: &mut Errors, path: &str, s: &str) -> Window {
    Window::parse_fixed(s).unwrap_or_else(|| {
        e.fail(
            path,
            format!("`{s}`: write `second`, `minute`, `hour` or `day`"),
        );
        Window::Fixed(1000)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_the_clock() {
        let w = Window::parse_fixed("minute").unwrap();
        assert_eq!(w.bounds(125_000), (120_000, 180_000));
        // 2026-03-15T12:00:00Z
        let now = 1_773_576_000_000;
        let tz = TimeZone::get("Europe/Paris").unwrap();
        let (s, e) = Window::month(20, tz.clone()).bounds(now);
        // 2026-02-20T00:00+01:00 .. 2026-03-20T00:00+01:00
        assert_eq!((s, e), (1_771_542_000_000, 1_773_961_200_000));
        let (s, e) = Window::day(tz).bounds(now);
        assert_eq!(e - s, 86_400_000);
        assert_eq!(s, 1_773_529_200_000);
    }

    #[test]
    fn a_calendar_window_found_last_is_found_again_only_while_it_holds() {
        let paris = TimeZone::get("Europe/Paris").unwrap();
        let fresh = |now| Window::day(paris.clone()).bounds(now);
        let w = Window::day(paris.clone());
        // 2026-03-28T12:00Z, then the next day, which is 23 hours long (summer time
        // starts), then back: each asked of the same window as of a fresh one.
        let days = [1_774_699_200_000, 1_774_785_600_000, 1_774_699_200_000];
        for now in days.into_iter().chain([days[0] + 1, days[1] - 1]) {
            assert_eq!(w.bounds(now), fresh(now));
        }
        let (s, e) = w.bounds(days[1]);
        assert_eq!(e - s, 23 * 3_600_000);
        let m = Window::month(28, paris.clone());
        for now in [1_773_576_000_000, 1_775_000_000_000, 1_773_576_000_000] {
            assert_eq!(m.bounds(now), Window::month(28, paris.clone()).bounds(now));
        }
        // An end not in whole seconds is not kept, and still answered.
        let last = Last::default();
        last.set((1_500, 3_000));
        assert_eq!(last.get(2_000), None);
    }
}
