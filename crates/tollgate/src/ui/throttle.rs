//! Wrong admin tokens slow their sender down: per client address, the first few wrong
//! tokens are free, then each further one closes the address to token checks for a
//! while, doubling up to a minute (a guess a second at most; a wrong token every few
//! seconds from a person mistyping is never held up). A right token from an address that
//! is not closed is taken at once and clears its count; other addresses are never
//! affected, so no one can lock the operator out. Bounded: at most [`MAX_ADDRESSES`]
//! addresses are remembered, the quietest forgotten first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens an address may send before it is slowed down.
const FREE: u32 = 5;
/// The longest an address is closed after a wrong token.
const MOST: Duration = Duration::from_secs(60);
/// A count older than this is forgotten.
const FORGET: Duration = Duration::from_secs(15 * 60);
/// Addresses remembered at once.
pub const MAX_ADDRESSES: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    closed_until: Instant,
}

/// The wrong tokens seen, by client address.
#[derive(Default)]
pub struct Logins(Mutex<HashMap<IpAddr, Failures>>);

impl Logins {
    /// How long `addr` must still wait before its token is checked (`None`: check it).
    pub fn closed(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let f = map.get(&addr)?;
        (f.closed_until > now).then(|| f.closed_until - now)
    }

    /// A token from `addr` was checked: right (its count cleared) or wrong (counted, and
    /// past the free ones the address closed for a while).
    pub fn checked(&self, addr: IpAddr, right: bool, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if right {
            map.remove(&addr);
            return;
        }
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            // Forget the stale counts, else the address quiet the longest.
            map.retain(|_, f| now.duration_since(f.last) < FORGET && f.closed_until > now);
            if map.len() >= MAX_ADDRESSES
                && let Some(quietest) = map.iter().min_by_key(|(_, f)| f.last).map(|(a, _)| *a)
            {
                map.remove(&quietest);
            }
        }
        let f = map.entry(addr).or_insert(Failures {
            count: 0,
            last: now,
            closed_until: now,
        });
        if now.duration_since(f.last) >= FORGET {
            f.count = 0;
        }
        f.count += 1;
        f.last = now;
        if f.count > FREE {
            let doublings = (f.count - FREE - 1).min(6);
            f.closed_until = now + (Duration::from_secs(1) * (1 << doublings)).min(MOST);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_tokens_close_their_address_and_only_theirs() {
        let l = Logins::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = Instant::now();
        for _ in 0..FREE {
            l.checked(a, false, t);
            assert_eq!(l.closed(a, t), None, "the first wrong tokens are free");
        }
        l.checked(a, false, t);
        assert_eq!(l.closed(a, t), Some(Duration::from_secs(1)));
        assert_eq!(l.closed(b, t), None, "another address is not affected");
        let later = t + Duration::from_secs(1);
        assert_eq!(l.closed(a, later), None);
        l.checked(a, false, later);
        assert_eq!(l.closed(a, later), Some(Duration::from_secs(2)), "doubling");
        for i in 0..20 {
            l.checked(a, false, later + Duration::from_secs(i));
        }
        assert!(l.closed(a, later + Duration::from_secs(19)).unwrap() <= MOST);
        // The right token, once the address may try again, clears it.
        let open = later + Duration::from_secs(200);
        assert_eq!(l.closed(a, open), None);
        l.checked(a, true, open);
        l.checked(a, false, open);
        assert_eq!(l.closed(a, open), None);
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let l = Logins::default();
        let t = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 50) {
            l.checked(IpAddr::from(i.to_be_bytes()), false, t);
        }
        assert!(l.0.lock().unwrap().len() <= MAX_ADDRESSES);
    }
}
