//! What the policy engine sends an attempt through: [`Sender`], one attempt with its own
//! settings passed explicitly. The upstream client is one; a test's scripted provider on
//! a paused clock is another, so remedies are tested without sockets.

use super::UpstreamClient;
use super::deadline::ResponseTimer;
use crate::body::Body;
use crate::error::ProxyError;
use crate::target::Target;
use http::{Request, Response};
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

/// How one attempt is sent.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSettings {
    /// From `sent` until the response head (a policy's `timeouts.response`, or the
    /// upstream one).
    pub response_timeout: Duration,
    /// A policy's `timeouts.connect`, when it sets one.
    pub connect_timeout: Option<Duration>,
    /// Whether the HTTP/1.1 pool may resend a request a stale keep-alive connection lost
    /// (not when a retry remedy decides, counting the attempt).
    pub resend_lost: bool,
}

pub type SendFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a>>;

/// Sends one attempt and waits for the response head.
pub trait Sender: Sync {
    fn send_attempt<'a>(
        &'a self,
        req: Request<Body>,
        target: &'a Target,
        timer: &'a ResponseTimer,
        sent: Instant,
        settings: AttemptSettings,
    ) -> SendFuture<'a>;

    /// The response-head timeout of an attempt whose policy sets none.
    fn response_timeout(&self) -> Duration;
}

impl Sender for UpstreamClient {
    fn send_attempt<'a>(
        &'a self,
        req: Request<Body>,
        target: &'a Target,
        timer: &'a ResponseTimer,
        sent: Instant,
        s: AttemptSettings,
    ) -> SendFuture<'a> {
        let (limit, resend, connect) = (s.response_timeout, s.resend_lost, s.connect_timeout);
        let send = self.send_within(req, target, timer, sent, limit, resend, connect);
        Box::pin(async move { send.await.map(|r| r.map(|b| b.boxed_unsync())) })
    }

    fn response_timeout(&self) -> Duration {
        self.settings.response_timeout
    }
}
