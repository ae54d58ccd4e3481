//! What the policy engine sends an attempt through: [`Sender`], one attempt with its own
//! settings passed explicitly. The upstream client is one; a test's scripted provider on
//! a paused clock is another, so remedies are tested without sockets.

use super::deadline::ResponseTimer;
use super::{CONNECT_TIMEOUT, UpstreamClient};
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
        let send = self.send_within(req, target, timer, sent, s.response_timeout, s.resend_lost);
        Box::pin(async move {
            // The connector is called by hyper-util's client too, which carries nothing
            // but the URI: the policy's connect timeout reaches it as a task-local, set
            // only here, around this attempt.
            let r = match s.connect_timeout {
                Some(t) => CONNECT_TIMEOUT.scope(t, send).await,
                None => send.await,
            };
            r.map(|r| r.map(|b| b.boxed_unsync()))
        })
    }

    fn response_timeout(&self) -> Duration {
        self.settings.response_timeout
    }
}
