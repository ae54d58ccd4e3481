//! The store part naming a consumer group (`group_by`): a fixed-size digest of the
//! header's value, so the state a client can create costs the same few bytes per group
//! whatever it sends, and `max_groups` bounds bytes as well as entries.

use std::fmt::Write;
use std::sync::Arc;

/// Bytes of a header value that name its group; longer values are grouped by these
/// first bytes (hashing a 64 KB value on every request would cost more than it says).
pub const MAX_VALUE: usize = 1024;

/// `{prefix}{hex}`: the first 16 bytes of SHA-256 over the value's first [`MAX_VALUE`]
/// bytes. A cryptographic digest, so no client can pick a value that lands in another
/// client's group, and stable across processes for a shared store.
pub fn part(prefix: &str, value: &[u8]) -> Arc<str> {
    let d = ring::digest::digest(&ring::digest::SHA256, &value[..value.len().min(MAX_VALUE)]);
    let mut s = String::with_capacity(prefix.len() + 32);
    s.push_str(prefix);
    for b in &d.as_ref()[..16] {
        let _ = write!(s, "{b:02x}");
    }
    Arc::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_have_one_size_and_differ_by_value() {
        let long = vec![b'a'; 60_000];
        assert_eq!(part("h:", &long).len(), 34);
        assert_eq!(part("h:", b"").len(), 34);
        assert_ne!(part("h:", b"alice"), part("h:", b"bob"));
        assert_eq!(part("h:", b"alice"), part("h:", b"alice"));
        // Values alike in their first MAX_VALUE bytes share a group.
        let mut other = long.clone();
        other[MAX_VALUE] = b'b';
        assert_eq!(part("h:", &long), part("h:", &other));
        other[MAX_VALUE - 1] = b'b';
        assert_ne!(part("h:", &long), part("h:", &other));
    }
}
