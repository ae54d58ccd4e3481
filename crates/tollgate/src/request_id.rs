//! Request ids: `x-tollgate-request-id` echoed from the request or generated.

use http::{HeaderMap, HeaderValue};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::headers::X_TOLLGATE_REQUEST_ID;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The id field's value in a head made ahead of its request (a worker's copy of a cache
/// entry): the field in place, its value given when the response is relayed. Empty, which
/// no id is ([`RequestIds::for_request`] takes no empty one).
pub const PLACEHOLDER: HeaderValue = HeaderValue::from_static("");

/// Generates ids `<prefix>-<counter>`, one generator per worker: the prefix is the
/// process's random number plus the worker's index, so ids are unique within a process
/// and, by the random part, across processes; no lock, one atomic add on memory of the
/// worker's own.
pub struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        Self::new(Self::prefix(), 0)
    }
}

impl RequestIds {
    /// A process's random prefix.
    pub fn prefix() -> u32 {
        fastrand::u32(..)
    }

    /// The generator of worker `worker` in a process whose prefix is `base`.
    pub fn new(base: u32, worker: usize) -> Self {
        Self {
            prefix: format!("{:08x}", base.wrapping_add(worker as u32)),
            next: AtomicU64::new(1),
        }
    }

    /// The client's id if it sent a usable one (visible ASCII, at most 200 bytes), else a new one.
    pub fn for_request(&self, headers: &HeaderMap) -> HeaderValue {
        if let Some(v) = headers.get(X_TOLLGATE_REQUEST_ID)
            && !v.is_empty()
            && v.len() <= 200
            && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
        {
            return v.clone();
        }
        self.fresh()
    }

    /// A new id, whatever the request carries.
    pub fn fresh(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // `<8 hex>-<up to 16 hex>` built on the stack: no formatting machinery per request.
        let mut buf = [0u8; 25];
        buf[..8].copy_from_slice(self.prefix.as_bytes());
        buf[8] = b'-';
        let digits = (16 - n.leading_zeros() as usize / 4).max(1);
        for i in 0..digits {
            buf[9 + digits - 1 - i] = HEX[((n >> (4 * i)) & 0xf) as usize];
        }
        let id = Id {
            buf,
            len: (9 + digits) as u8,
        };
        HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(id))
            .expect("hex is a valid header value")
    }
}

/// A generated id's bytes, owned by its `Bytes`: a copy of the id (a matched request's
/// record, the access log's) counts a reference instead of copying the bytes into a
/// shared buffer of their own (what a clone of copied bytes does).
struct Id {
    buf: [u8; 25],
    len: u8,
}

impl AsRef<[u8]> for Id {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_or_generates() {
        let ids = RequestIds::default();
        let mut h = HeaderMap::new();
        let a = ids.for_request(&h);
        let b = ids.for_request(&h);
        assert_ne!(a, b);
        assert!(
            a.to_str().unwrap().ends_with("-1") && b.to_str().unwrap().ends_with("-2"),
            "{a:?} {b:?}"
        );
        ids.next.store(0xabc_def0_1234, Ordering::Relaxed);
        assert!(
            ids.for_request(&h)
                .to_str()
                .unwrap()
                .ends_with("-abcdef01234")
        );
        h.insert(X_TOLLGATE_REQUEST_ID, HeaderValue::from_static("abc-123"));
        assert_eq!(ids.for_request(&h), "abc-123");
        h.insert(X_TOLLGATE_REQUEST_ID, HeaderValue::from_static("has space"));
        assert_ne!(ids.for_request(&h), "has space");
    }

    #[test]
    fn workers_of_one_process_never_share_a_prefix() {
        let h = HeaderMap::new();
        let base = u32::MAX;
        let a = RequestIds::new(base, 0).for_request(&h);
        let b = RequestIds::new(base, 1).for_request(&h);
        assert_eq!(a, "ffffffff-1");
        assert_eq!(b, "00000000-1");
    }
}
