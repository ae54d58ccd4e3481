//! Body types: everything the proxy sends is a boxed, streaming body.

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

pub fn from_incoming(b: hyper::body::Incoming) -> Body {
    b.map_err(BoxError::from).boxed_unsync()
}
