//! Per-policy timeouts: `connect` and `response` (per attempt) override the `upstream`
//! ones (the connect timeout reaches the connector through
//! [`crate::upstream::CONNECT_TIMEOUT`]); `total` frames the whole exchange (the engine enforces it, queue waits,
//! attempts, backoffs and the response body included).

use crate::error::ProxyError;
use crate::policy::chain::{BoxFuture, Exchange, Flow, Remedy, Stage};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub connect: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Option<Duration>,
}

impl Remedy for Timeouts {
    fn stage(&self) -> Stage {
        Stage::Timeouts
    }

    fn request<'a>(&'a self, x: &'a mut Exchange) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        x.connect_timeout = self.connect;
        x.response_timeout = self.response;
        Box::pin(std::future::ready(Ok(Flow::Continue)))
    }
}
