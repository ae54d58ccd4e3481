//! Fixed windows aligned to the clock: second, minute, hour, day (UTC), and for quotas a
//! day or a calendar month in a time zone, renewing on a given day of the month.

use crate::fields::Errors;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

#[derive(Debug, Clone, PartialEq)]
pub enum Window {
    /// A fixed length in milliseconds, aligned to the Unix epoch (second, minute, hour, UTC day).
    Fixed(u64),
    /// A day starting at midnight in a time zone.
    Day(TimeZone),
    /// A month starting at midnight of `renews_on` in a time zone.
    Month { renews_on: i8, tz: TimeZone },
}

impl Window {
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
            Window::Day(tz) => {
                let z = zoned(now_ms, tz);
                let start = z.start_of_day().unwrap_or_else(|_| z.clone());
                let end = start.checked_add(1.day()).unwrap_or_else(|_| start.clone());
                (ms(&start), ms(&end))
            }
            Window::Month { renews_on, tz } => {
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
                if now_ms >= this {
                    (this, next)
                } else {
                    (prev, this)
                }
            }
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
        let (s, e) = Window::Month {
            renews_on: 20,
            tz: tz.clone(),
        }
        .bounds(now);
        // 2026-02-20T00:00+01:00 .. 2026-03-20T00:00+01:00
        assert_eq!((s, e), (1_771_542_000_000, 1_773_961_200_000));
        let (s, e) = Window::Day(tz).bounds(now);
        assert_eq!(e - s, 86_400_000);
        assert_eq!(s, 1_773_529_200_000);
    }
}
