//! The dashboard header's last minute: requests, errors and latency in one-second slots,
//! one minute per data-plane worker, filled by the worker as each request ends (under a
//! lock only its worker and the reader take) and summed by `/ui/api/summary`.

use std::time::Duration;

/// Slots kept: one a second for a minute.
const SLOTS: usize = 60;
/// Sub-buckets per power of two of microseconds: latency to within 1/8 (12.5 %).
const SUB: u32 = 8;
/// Powers of two covered: 1 µs to 2^36 µs (19 hours); longer counts in the last bucket.
const OCTAVES: u32 = 36;
const BUCKETS: usize = (OCTAVES * SUB) as usize;

/// One second of calls.
struct Slot {
    /// The unix second it counts; a slot whose second is gone is stale.
    second: u64,
    requests: u32,
    errors: u32,
    latency: Box<[u32; BUCKETS]>,
}

/// The last minute of calls.
pub struct Minute {
    slots: Vec<Slot>,
}

/// What the header shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastMinute {
    pub requests: u64,
    pub errors: u64,
    /// Requests per second over the seconds counted.
    pub per_second: f64,
    /// The 99th percentile of total time, in milliseconds (None without requests).
    pub p99_ms: Option<f64>,
}

impl Default for Minute {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    second: 0,
                    requests: 0,
                    errors: 0,
                    latency: Box::new([0; BUCKETS]),
                })
                .collect(),
        }
    }
}

/// The bucket of a duration: log-linear, `SUB` buckets per power of two.
fn bucket(us: u64) -> usize {
    let us = us.max(1);
    let octave = 63 - us.leading_zeros();
    if octave >= OCTAVES {
        return BUCKETS - 1;
    }
    // The `SUB` steps between 2^octave and 2^(octave+1).
    let frac = if octave >= 3 {
        ((us >> (octave - 3)) & (SUB as u64 - 1)) as u32
    } else {
        ((us << (3 - octave)) & (SUB as u64 - 1)) as u32
    };
    (octave * SUB + frac) as usize
}

/// The upper edge of a bucket, in microseconds.
fn upper_us(b: usize) -> f64 {
    let (octave, frac) = (b as u32 / SUB, b as u32 % SUB);
    2f64.powi(octave as i32) * (1.0 + (frac + 1) as f64 / SUB as f64)
}

impl Minute {
    /// Counts one finished call at unix second `now`.
    pub fn record(&mut self, now: u64, total: Duration, error: bool) {
        let slot = &mut self.slots[(now % SLOTS as u64) as usize];
        if slot.second != now {
            slot.second = now;
            slot.requests = 0;
            slot.errors = 0;
            slot.latency.fill(0);
        }
        slot.requests += 1;
        slot.errors += u32::from(error);
        slot.latency[bucket(total.as_micros() as u64)] += 1;
    }
}

/// The minute before second `now` (the current second, still filling, left out) over
/// several minutes (each worker counts its own), of a gateway up since second `since` (a
/// younger one's rate is over its life).
pub fn last_of<'m>(
    minutes: impl IntoIterator<Item = &'m Minute>,
    now: u64,
    since: u64,
) -> LastMinute {
    let mut latency = [0u64; BUCKETS];
    let (mut requests, mut errors) = (0u64, 0u64);
    let fresh = |s: &&Slot| s.second < now && s.second + SLOTS as u64 >= now;
    for s in minutes
        .into_iter()
        .flat_map(|m| m.slots.iter().filter(fresh))
    {
        requests += u64::from(s.requests);
        errors += u64::from(s.errors);
        for (t, n) in latency.iter_mut().zip(s.latency.iter()) {
            *t += u64::from(*n);
        }
    }
    let p99_ms = (requests > 0).then(|| {
        let rank = (requests as f64 * 0.99).ceil() as u64;
        let mut seen = 0;
        let b = latency
            .iter()
            .position(|n| {
                seen += n;
                seen >= rank
            })
            .unwrap_or(BUCKETS - 1);
        upper_us(b) / 1e3
    });
    LastMinute {
        requests,
        errors,
        per_second: requests as f64 / now.saturating_sub(since).clamp(1, SLOTS as u64) as f64,
        p99_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_an_eighth() {
        for us in [
            1,
            2,
            7,
            8,
            9,
            15,
            100,
            999,
            1_000,
            12_345,
            1_000_000,
            3_600_000_000,
        ] {
            let b = bucket(us);
            let hi = upper_us(b);
            assert!(hi >= us as f64, "{us} under its bucket's edge {hi}");
            assert!(hi <= us as f64 * 1.126 + 1.0, "{us}: edge {hi} too far");
        }
    }

    #[test]
    fn counts_the_minute_before_now_only() {
        let mut m = Minute::default();
        for i in 0..99 {
            m.record(1_000, Duration::from_millis(1), i == 0);
        }
        m.record(1_000, Duration::from_millis(100), false);
        // The current second is left out until it is over.
        assert_eq!(last_of([&m], 1_000, 0).requests, 0);
        let l = last_of([&m], 1_001, 0);
        assert_eq!(last_of([&m], 1_001, 1_000).per_second, 100.0);
        assert_eq!((l.requests, l.errors), (100, 1));
        let p99 = l.p99_ms.unwrap();
        assert!((1.0..1.13).contains(&p99), "{p99}");
        // Two workers' minutes read as one.
        let mut other = Minute::default();
        other.record(1_000, Duration::from_millis(1), true);
        let both = last_of([&m, &other], 1_001, 0);
        assert_eq!((both.requests, both.errors), (101, 2));
        // A minute later the slot has aged out, and a reused slot starts afresh.
        assert_eq!(last_of([&m], 1_061, 0).requests, 0);
        m.record(1_060, Duration::from_millis(5), false);
        assert_eq!(last_of([&m], 1_061, 0).requests, 1);
        assert!(last_of([&m], 1_061, 0).p99_ms.unwrap() >= 5.0);
    }
}
