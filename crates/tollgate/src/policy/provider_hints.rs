//! What a provider's response says about when to come back: `Retry-After` (RFC 9110
//! §10.2.3: seconds or an HTTP-date), and the rate-limit headers `RateLimit-Remaining`
//! / `RateLimit-Reset` (IETF draft-ietf-httpapi-ratelimit-headers: seconds to the reset)
//! and `X-RateLimit-Remaining` / `X-RateLimit-Reset` (GitHub, Twilio…: often a Unix time).

use super::clock;
use http::HeaderMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest delay a hint is read as: a provider asking for more (even more than 64
/// bits of seconds) asks for "a very long time", which each remedy caps at its own
/// limit (`max_throttle`, `max_delay`), and unix-ms arithmetic stays far from overflow.
pub const LONGEST: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// `Retry-After` as a delay from now.
pub fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(http::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still a number of seconds: the longest.
        let secs = v.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(LONGEST));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    // The provider's clock against ours: a date in the past means "now".
    let at_ms = at.duration_since(UNIX_EPOCH).ok()?.as_millis() as u64;
    Some(Duration::from_millis(at_ms.saturating_sub(clock::now_ms())))
}

/// When a provider says its budget is spent (`RateLimit-Remaining: 0` or
/// `X-RateLimit-Remaining: 0`), the delay until its reset.
pub fn exhausted_until(h: &HeaderMap) -> Option<Duration> {
    for (remaining, reset) in [
        ("ratelimit-remaining", "ratelimit-reset"),
        ("x-ratelimit-remaining", "x-ratelimit-reset"),
    ] {
        let zero = h
            .get(remaining)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() == "0");
        if !zero {
            continue;
        }
        let n: u64 = h.get(reset)?.to_str().ok()?.trim().parse().ok()?;
        // Values this large are a Unix time (GitHub); smaller ones are seconds to wait.
        let d = if n > 1_000_000_000 {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            Duration::from_secs(n.saturating_sub(now))
        } else {
            Duration::from_secs(n)
        };
        return Some(d.min(LONGEST));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        // More seconds than 64 bits hold: the longest, not "no hint".
        h.insert("retry-after", "99999999999999999999999".parse().unwrap());
        assert_eq!(retry_after(&h), Some(LONGEST));
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "30".parse().unwrap());
        assert_eq!(exhausted_until(&h), Some(Duration::from_secs(30)));
        h.insert("x-ratelimit-remaining", "3".parse().unwrap());
        assert_eq!(exhausted_until(&h), None);
    }
}
