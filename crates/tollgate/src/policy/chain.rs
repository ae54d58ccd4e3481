//! The one interface every remedy implements as it runs, the compiled [`Chain`], and the
//! per-request [`Exchange`] the remedies work on.
//!
//! A request runs the chain's request phases in the registry's order (the request stack);
//! any may change the request, answer it, or wait. Then the attempts are sent by the
//! chain's [`Attempts`] layer (once, or again as `retry` decides), each through the
//! attempt stack ([`AttemptRemedy`]) before and after it is sent. The response phases run in reverse order
//! (the last stage sees the provider's response first). A remedy's end hook runs exactly
//! once for every request whose request phase it started, when the [`Exchange`] is
//! dropped: after the response body ended, on an error, on an early answer, or when the
//! client went away (its future or body dropped).

use crate::body::{Body, full};
use crate::error::ProxyError;
use crate::target::Target;
use crate::upstream::AttemptSettings;
use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use http_body::Body as _;
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a request phase decided.
pub enum Flow {
    Continue,
    /// Answer now, without calling the provider (mock, cache hit).
    Answer(Response<Body>),
}

/// What a request phase returns: its outcome when it decided without waiting (a memory
/// store's count, a header checked, a worker's own cache copy), or the future to wait on.
/// Only a phase that waits pays for a boxed future: most matched requests decide every
/// phase at once.
pub enum Phase<'a> {
    Now(Result<Flow, ProxyError>),
    Wait(BoxFuture<'a, Result<Flow, ProxyError>>),
}

impl<'a> Phase<'a> {
    /// Decided: go on to the next stage.
    pub fn next() -> Self {
        Phase::Now(Ok(Flow::Continue))
    }

    /// A phase that waits: `f`, boxed.
    pub fn wait(f: impl Future<Output = Result<Flow, ProxyError>> + Send + 'a) -> Self {
        Phase::Wait(Box::pin(f))
    }
}

/// An attempt's outcome, as the attempt stack sees it.
pub type Outcome<'a> = Result<&'a http::response::Parts, &'a ProxyError>;

/// One remedy as it runs on the request: the hooks every stage has. Only `request` is
/// required.
pub trait Remedy: Send + Sync + 'static {
    /// The request phase: change the request, answer it, or wait ([`Phase::Now`] when it
    /// decides without waiting).
    fn request<'a>(&'a self, x: &'a mut Exchange) -> Phase<'a>;

    /// The response phase (reverse order): may change the head or wrap the body.
    fn response(&self, _x: &mut Exchange, resp: Response<Body>) -> Response<Body> {
        resp
    }

    /// Runs exactly once for each request whose request phase this remedy started.
    fn end(&self, _x: &Exchange) {}

    /// Its live state for `GET /policies`, under its name.
    fn state(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        None
    }

    /// Drops what it keeps of answers (`POST /cache/purge`): what it did, under its name;
    /// `None`: it keeps none.
    fn purge(&self) -> Option<BoxFuture<'_, serde_json::Value>> {
        None
    }

    /// This stage as one data-plane worker's chain runs it, where the stage keeps state
    /// of that worker's own (the cache's copies of the entries it serves); `None`: the
    /// one stage, shared. Only the request stack's stage is replaced, so a remedy with a
    /// part in each attempt keeps that part shared.
    fn for_worker(&self) -> Option<Arc<dyn Remedy>> {
        None
    }
}

/// One attempt on its way out: its number (0 for the first), its request and how it is
/// sent.
pub struct Attempt {
    pub number: u32,
    pub request: Request<Body>,
    pub settings: AttemptSettings,
}

/// What an attempt hook returns: its outcome when it decided without waiting (a header
/// set, a setting changed, a response head read), or the future to wait on (a shared
/// store asked), as [`Phase`] is for the request stack. Only a hook that waits pays for a
/// boxed future.
pub enum Hook<'a, T> {
    Now(T),
    Wait(BoxFuture<'a, T>),
}

impl<'a, T> Hook<'a, T> {
    /// A hook that waits: `f`, boxed.
    pub fn wait(f: impl Future<Output = T> + Send + 'a) -> Self {
        Hook::Wait(Box::pin(f))
    }
}

/// A remedy's part in each attempt (the attempt stack, below retry): a breaker or a
/// provider's pause refusing a retry, credentials set on each attempt, a policy's own
/// timeouts. Runs in registry order before each attempt and after it.
pub trait AttemptRemedy: Send + Sync + 'static {
    /// Before each attempt is sent, decided at once: may refuse it, or change its request
    /// or settings. The first attempt's hooks never wait (its request phase admitted it),
    /// so a plain chain's one attempt leaves without a future of its own.
    fn before(&self, _x: &mut Exchange, _a: &mut Attempt) -> Result<(), ProxyError> {
        Ok(())
    }

    /// Before a retry (an attempt after the first), after [`AttemptRemedy::before`]: may
    /// refuse it, waiting for a shared store where it must.
    fn before_retry<'a>(&'a self, _x: &'a mut Exchange) -> Hook<'a, Result<(), ProxyError>> {
        Hook::Now(Ok(()))
    }

    /// After the attempt: the provider's response head, or the error.
    fn after<'a>(&'a self, _x: &'a mut Exchange, _o: Outcome<'a>) -> Hook<'a, ()> {
        Hook::Now(())
    }
}

/// What sends a request's attempts, between the request stack and the attempt stack (as
/// linkerd2-proxy's retry layer sits): [`Once`], or retry, which decides on each further
/// attempt and tells the client what it did.
pub trait Attempts: Send + Sync + 'static {
    /// Whether the request is kept to be sent again (each attempt gets a copy).
    fn keeps(&self, x: &Exchange) -> bool;

    /// After an attempt (the provider's response, or the error): how long to wait
    /// before sending it again, or `None` to answer with it.
    fn again<'a>(
        &'a self,
        x: &'a mut Exchange,
        o: Result<&'a Response<Body>, &'a ProxyError>,
    ) -> BoxFuture<'a, Option<Duration>>;

    /// Whether the HTTP/1.1 pool may resend a request a stale keep-alive connection lost
    /// (not when this layer decides, counting each attempt).
    fn resend_lost(&self) -> bool;

    /// The error the client gets, with what this layer did told beside it.
    fn answer(&self, _x: &Exchange, e: ProxyError) -> ProxyError {
        e
    }
}

/// Beside the attempts layer: when it stops on a failure, whether the request goes on to
/// the next of a list of alternatives (`llm.fallback`: another model, account or
/// provider). It may read a small error body to decide (`o` is the attempt's outcome,
/// given back whole).
pub trait Fallback: Send + Sync + 'static {
    fn next<'a>(
        &'a self,
        x: &'a mut Exchange,
        o: &'a mut Result<Response<Body>, ProxyError>,
    ) -> BoxFuture<'a, bool>;
}

/// Each request sent once; the pool may resend one a stale connection lost.
pub struct Once;

impl Attempts for Once {
    fn keeps(&self, _x: &Exchange) -> bool {
        false
    }

    fn again<'a>(
        &'a self,
        _x: &'a mut Exchange,
        _o: Result<&'a Response<Body>, &'a ProxyError>,
    ) -> BoxFuture<'a, Option<Duration>> {
        Box::pin(NoMore)
    }

    fn resend_lost(&self) -> bool {
        true
    }
}

/// [`Once`]'s answer: no further attempt. Of no size, so boxing it allocates nothing on
/// every matched request.
struct NoMore;

impl Future for NoMore {
    type Output = Option<Duration>;

    fn poll(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Duration>> {
        std::task::Poll::Ready(None)
    }
}

/// What a remedy builds into: its stage on the request, and where it has them, its part
/// in each attempt, the layer sending the attempts (retry), and the bound on the whole
/// exchange (`timeouts.total`).
pub struct Built {
    pub remedy: Arc<dyn Remedy>,
    pub attempt: Option<Arc<dyn AttemptRemedy>>,
    pub attempts: Option<Arc<dyn Attempts>>,
    pub fallback: Option<Arc<dyn Fallback>>,
    pub total: Option<Duration>,
}

impl<R: Remedy> From<Arc<R>> for Built {
    fn from(remedy: Arc<R>) -> Self {
        Built {
            remedy,
            attempt: None,
            attempts: None,
            fallback: None,
            total: None,
        }
    }
}

impl Built {
    /// A remedy with a part in each attempt too.
    pub fn with_attempts<R: Remedy + AttemptRemedy>(r: Arc<R>) -> Self {
        Built {
            attempt: Some(r.clone()),
            ..Built::from(r)
        }
    }
}

/// A policy compiled into its chain, in the registry's order: the request stack, the
/// layer sending the attempts, the attempt stack.
#[derive(Clone)]
pub struct Chain {
    pub policy: Arc<str>,
    pub remedies: Vec<Arc<dyn Remedy>>,
    /// The remedies' names, in order.
    pub names: Vec<&'static str>,
    /// The remedies' parts in each attempt, in order.
    pub attempt: Vec<Arc<dyn AttemptRemedy>>,
    /// What sends the attempts: retry's layer, or [`Once`].
    pub attempts: Arc<dyn Attempts>,
    /// Where the request goes when the attempts layer stops on a failure.
    pub fallback: Option<Arc<dyn Fallback>>,
    /// The bound on the whole exchange (`timeouts.total`).
    pub total: Option<Duration>,
    /// Sent [`Once`], with no fallback or total timeout (see [`Chain::plain`]).
    plain: bool,
}

impl Chain {
    /// Whether the chain is its request stack, one attempt (through its attempt stack, if
    /// it has one) and its response phases, with none of the layers that send, wait or
    /// bound more than one attempt (retry, a fallback, a bound on the whole exchange):
    /// such a chain runs in the request's own future (`engine::run_plain`), not on a
    /// boxed one of its own.
    pub fn plain(&self) -> bool {
        self.plain
    }

    /// A copy whose policy name is an allocation of its own, with the stages that keep
    /// per-worker state ([`Remedy::for_worker`]) made anew (the others stay shared): see
    /// [`crate::policy::Engine::for_worker`].
    pub fn detached(&self) -> Chain {
        Chain {
            policy: Arc::from(&*self.policy),
            remedies: self
                .remedies
                .iter()
                .map(|r| r.for_worker().unwrap_or_else(|| r.clone()))
                .collect(),
            ..self.clone()
        }
    }

    /// The chain of `built` (in registry order) for `policy`.
    pub fn new(policy: &str, built: Vec<Built>, names: Vec<&'static str>) -> Self {
        let layer = built.iter().find_map(|b| b.attempts.clone());
        let attempt: Vec<_> = built.iter().filter_map(|b| b.attempt.clone()).collect();
        let fallback = built.iter().find_map(|b| b.fallback.clone());
        let total = built.iter().find_map(|b| b.total);
        Self {
            policy: Arc::from(policy),
            plain: layer.is_none() && fallback.is_none() && total.is_none(),
            attempts: layer.unwrap_or_else(|| Arc::new(Once)),
            attempt,
            fallback,
            total,
            names,
            remedies: built.into_iter().map(|b| b.remedy).collect(),
        }
    }
}

/// Something held for the request's lifetime and released when the exchange ends
/// (a concurrency slot, a cache fill ticket): dropping it releases it.
pub type Hold = Box<dyn Send + Sync>;

/// What remedies keep for one request, each value under its own type (the cache's
/// pending fill, a breaker's probe, retry's deadline): a remedy's per-request state is
/// its own, and another remedy that reads it names its type. Up to four values are held
/// inline (a chain's remedies keep a few at most), not in an allocation of their own.
#[derive(Default)]
pub struct Locals(smallvec::SmallVec<[Box<dyn std::any::Any + Send + Sync>; 4]>);

impl Locals {
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.0.iter().find_map(|v| v.downcast_ref())
    }

    pub fn get_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.0.iter_mut().find_map(|v| v.downcast_mut())
    }

    /// Sets the value of type `T`, replacing one set before.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        match self.get_mut::<T>() {
            Some(v) => *v = value,
            None => self.0.push(Box::new(value)),
        }
    }

    /// The value of type `T`, removed.
    pub fn take<T: 'static>(&mut self) -> Option<T> {
        let i = self.0.iter().position(|v| v.is::<T>())?;
        self.0.swap_remove(i).downcast().ok().map(|b| *b)
    }

    /// The value of type `T`, set to its default first when absent.
    pub fn get_or_default<T: Default + Send + Sync + 'static>(&mut self) -> &mut T {
        if self.get::<T>().is_none() {
            self.0.push(Box::new(T::default()));
        }
        self.get_mut().expect("just set")
    }
}

/// One request on its way through a chain.
pub struct Exchange {
    pub chain: Arc<Chain>,
    /// The upstream request head, as the remedies leave it.
    pub parts: http::request::Parts,
    pub method: Method,
    /// The request body, until buffered or sent.
    pub body: Option<Body>,
    /// The whole request body, when a remedy needed it in memory (JSON transform, a body
    /// in the cache key, replay for retries).
    pub buffered: Option<Bytes>,
    pub target: Target,
    /// Each remedy's own per-request values, by type.
    pub locals: Locals,
    /// Cancelled at the gateway's drain deadline: queue waits give up (503).
    pub give_up: Option<Arc<tokio_util::sync::CancellationToken>>,
    pub holds: Vec<Hold>,
    /// The request's diagnosis (remedy actions, trace, HAR capture), when kept.
    pub diag: Option<Box<crate::diagnosis::RequestDiag>>,
    /// How many remedies started their request phase (their end hooks run).
    ran: usize,
}

impl Exchange {
    pub fn new(chain: Arc<Chain>, req: Request<Body>, target: Target) -> Self {
        let (parts, body) = req.into_parts();
        Self {
            chain,
            method: parts.method.clone(),
            parts,
            body: Some(body),
            buffered: None,
            target,
            locals: Locals::default(),
            give_up: None,
            holds: Vec::new(),
            diag: None,
            ran: 0,
        }
    }

    pub fn policy(&self) -> &str {
        &self.chain.policy
    }

    pub(crate) fn started(&mut self, i: usize) {
        self.ran = self.ran.max(i + 1);
    }

    /// Reads the whole request body into memory when it is at most `cap` bytes; returns
    /// `None` (and keeps the body whole, the part read put back in front) when it is
    /// larger. A body error is the client's: 400.
    pub async fn buffer(&mut self, cap: usize) -> Result<Option<&Bytes>, ProxyError> {
        if self.buffered.is_some() {
            return Ok(self.buffered.as_ref().filter(|b| b.len() <= cap));
        }
        let Some(mut body) = self.body.take() else {
            return Ok(None);
        };
        if body.is_end_stream() {
            self.buffered = Some(Bytes::new());
            return Ok(self.buffered.as_ref());
        }
        if body.size_hint().lower() > cap as u64 {
            self.body = Some(body);
            return Ok(None);
        }
        // A body that came in one frame (most) is kept as that frame: no copy.
        let mut got = Got::Nothing;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                ProxyError::BadRequest(format!("reading the request body failed: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                got = match got {
                    Got::Nothing => Got::One(data),
                    Got::One(first) => {
                        let mut all = BytesMut::with_capacity(first.len() + data.len());
                        all.extend_from_slice(&first);
                        all.extend_from_slice(&data);
                        Got::More(all)
                    }
                    Got::More(mut all) => {
                        all.extend_from_slice(&data);
                        Got::More(all)
                    }
                };
                if got.len() > cap {
                    // Too big to keep: send what was read, then the rest, once.
                    let head = futures_util::stream::once(std::future::ready(Ok::<
                        _,
                        crate::body::BoxError,
                    >(
                        http_body::Frame::data(got.freeze()),
                    )));
                    let rest = http_body_util::BodyStream::new(body);
                    self.body = Some(
                        http_body_util::StreamBody::new(futures_util::StreamExt::chain(head, rest))
                            .boxed_unsync(),
                    );
                    return Ok(None);
                }
            }
        }
        self.buffered = Some(got.freeze());
        Ok(self.buffered.as_ref())
    }

    /// The request for the next attempt: a copy when it is kept to be sent again, else
    /// the request itself.
    pub fn attempt_request(&mut self, keep: bool) -> Option<Request<Body>> {
        let body = match &self.buffered {
            Some(b) => full(b.clone()),
            None => self.body.take()?,
        };
        let parts = if keep {
            self.parts.clone()
        } else {
            std::mem::replace(&mut self.parts, Request::new(()).into_parts().0)
        };
        Some(Request::from_parts(parts, body))
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let chain = self.chain.clone();
        for r in &chain.remedies[..self.ran] {
            r.end(self);
        }
    }
}

/// What [`Exchange::buffer`] has read of a body.
enum Got {
    Nothing,
    /// One frame: kept as it came.
    One(Bytes),
    /// Several, copied together.
    More(BytesMut),
}

impl Got {
    fn len(&self) -> usize {
        match self {
            Got::Nothing => 0,
            Got::One(b) => b.len(),
            Got::More(b) => b.len(),
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            Got::Nothing => Bytes::new(),
            Got::One(b) => b,
            Got::More(b) => b.freeze(),
        }
    }
}
