//! What the policy engine sends an attempt through: [`Sender`], one attempt with its own
//! settings passed explicitly. The upstream client is one; a test's scripted provider on
//! a paused clock is another, so remedies are tested without sockets. The engine is
//! generic over it: the client's send is part of the policy's future, not a box of its
//! own per attempt.

use super::UpstreamClient;
use super::connector::ConnectTimeout;
use super::deadline::ResponseTimer;
use crate::body::Body;
use crate::error::ProxyError;
use crate::target::Target;
use http::{Request, Response};
use http_body_util::BodyExt;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How one attempt is sent. `C` is the connect timeout: a policy's `timeouts.connect`
/// (`Option<Duration>`), or `()` for the `upstream` one, of no size in the unmatched
/// path's future.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSettings<C: ConnectTimeout = Option<Duration>> {
    /// From `sent` until the response head (a policy's `timeouts.response`, or the
    /// upstream one).
    pub response_timeout: Duration,
    /// A policy's `timeouts.connect`, when it sets one.
    pub connect_timeout: C,
    /// Whether the HTTP/1.1 pool may resend a request a stale keep-alive connection lost
    /// (not when a retry remedy decides, counting the attempt).
    pub resend_lost: bool,
}

impl AttemptSettings<()> {
    /// A request sent once, within `response_timeout`, over the `upstream` connect
    /// timeout; the pool may resend it when a stale keep-alive connection lost it.
    pub fn plain(response_timeout: Duration) -> Self {
        Self {
            response_timeout,
            connect_timeout: (),
            resend_lost: true,
        }
    }
}

/// Sends one attempt and waits for the response head.
pub trait Sender: Sync {
    fn send_attempt<'a>(
        &'a self,
        req: Request<Body>,
        target: &'a Target,
        timer: &'a ResponseTimer,
        sent: Instant,
        settings: AttemptSettings,
    ) -> impl Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a;

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
    ) -> impl Future<Output = Result<Response<Body>, ProxyError>> + Send + 'a {
        // A combinator, not `async move { send.await … }`: an async block would keep the
        // send's future twice, as its capture and as what it awaits (rust-lang/rust#62958),
        // and every matched request's engine future would carry both.
        futures_util::FutureExt::map(self.send_within(req, target, timer, sent, s), |r| {
            r.map(|r| r.map(|b| b.boxed_unsync()))
        })
    }

    fn response_timeout(&self) -> Duration {
        self.settings.response_timeout
    }
}
