//! Request ids: `x-tollgate-request-id` echoed from the request or generated.

use http::{HeaderMap, HeaderValue};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::headers::X_TOLLGATE_REQUEST_ID;

/// Generates ids `<process prefix>-<counter>`: unique within a process, and across
/// processes by the random prefix; no lock, one atomic add.
const HEX: &[u8; 16] = b"0123456789abcdef";

pub struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

impl Default for RequestIds {
    fn default() -> Self {
        Self {
            prefix: format!("{:08x}", fastrand::u32(..)),
            next: AtomicU64::new(1),
        }
    }
}

impl RequestIds {
    /// The client's id if it sent a usable one (visible ASCII, at most 200 bytes), else a new one.
    pub fn for_request(&self, headers: &HeaderMap) -> HeaderValue {
        if let Some(v) = headers.get(X_TOLLGATE_REQUEST_ID)
            && !v.is_empty()
            && v.len() <= 200
            && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
        {
            return v.clone();
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // `<8 hex>-<up to 16 hex>` built on the stack: no formatting machinery per request.
        let mut buf = [0u8; 25];
        buf[..8].copy_from_slice(self.prefix.as_bytes());
        buf[8] = b'-';
        let digits = (16 - n.leading_zeros() as usize / 4).max(1);
        for i in 0..digits {
            buf[9 + digits - 1 - i] = HEX[((n >> (4 * i)) & 0xf) as usize];
        }
        HeaderValue::from_bytes(&buf[..9 + digits]).expect("hex is a valid header value")
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
}
