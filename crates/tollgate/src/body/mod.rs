//! Body types: everything the proxy sends is a boxed, streaming body; [`Watched`] is the
//! one wrapper that sees frames pass (counting, copying, storing, ending on a deadline).

mod watched;
pub use watched::{Watch, Watched};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streaming body, boxed so that upstream bodies, proxy-made bodies and (later) cached
/// or mocked bodies share one type.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// The client's request body, relayed. Its errors are marked as the client's, so a
/// malformed chunked body is answered 400 (the client's fault), not 502.
pub fn from_incoming(b: hyper::body::Incoming) -> Body {
    b.map_err(|e| BoxError::from(ClientBodyError(e)))
        .boxed_unsync()
}

/// Reading the client's request body failed (malformed chunked encoding, a body shorter
/// than its `Content-Length`, the client gone).
#[derive(Debug, thiserror::Error)]
#[error("the client's request body is malformed or incomplete: {0}")]
pub struct ClientBodyError(pub hyper::Error);

/// Whether `err` or one of its sources is a [`ClientBodyError`].
pub fn is_client_body_error(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(s) = source {
        if s.is::<ClientBodyError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Why [`read_capped`] returned no body.
#[derive(Debug)]
pub enum ReadError {
    /// Larger than the cap (reading stopped there).
    TooLarge,
    Failed(BoxError),
}

/// Reads a body whole, up to `cap` bytes: for the features that must see all of it (an
/// aggregated endpoint's JSON answers, the request body it sends to several backends).
/// Frame by frame rather than through `Limited`, whose boxed error type made the request's
/// future fail the `Send` check.
pub async fn read_capped(mut body: Body, cap: usize) -> Result<Bytes, ReadError> {
    use http_body::Body as _;
    if body.size_hint().lower() > cap as u64 {
        return Err(ReadError::TooLarge);
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ReadError::Failed)?;
        if let Some(d) = frame.data_ref() {
            if buf.len() + d.len() > cap {
                return Err(ReadError::TooLarge);
            }
            buf.extend_from_slice(d);
        }
    }
    Ok(buf.freeze())
}
