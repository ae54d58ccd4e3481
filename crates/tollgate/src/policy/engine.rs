//! Runs a matched request through its policy's chain: the request stack in the registry's
//! order, then the attempts (sent by the chain's [`super::chain::Attempts`] layer, each
//! through the attempt stack), then the response phases in reverse. Only matched requests
//! come here; unmatched traffic never does. A chain with layers ([`run`]) runs on a boxed
//! future; a plain chain ([`super::chain::Chain::plain`]: one attempt, and no retry,
//! fallback or total timeout) runs in the request's own future ([`run_plain`]), whose
//! send is the same future an unmatched request's is. Both run the attempt stack the
//! same way (`ready`, `ready_retry`, `after_attempt`).

use super::chain::{Attempt, Chain, Exchange, Flow, Hook, Phase};
use crate::body::{Body, BoxError};
use crate::error::ProxyError;
use crate::upstream::deadline::ResponseTimer;
use crate::upstream::{AttemptSettings, Sender};
use http::{Request, Response};
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// What the engine produced: the response (its body owns the exchange, so the end hooks
/// run when it ends or is dropped) and the upstream time of the last attempt.
pub struct Done {
    pub response: Response<Ended>,
    pub upstream: Option<Duration>,
    /// The policy that applied, when the request's MCP call moved it from the one its
    /// head matched (`Some(None)`: none applied).
    pub moved: Option<Option<std::sync::Arc<str>>>,
}

/// Runs the exchange. `timer` is the client connection's response timer. The request's
/// diagnosis travels in the exchange and comes back in `diag`, whatever the outcome.
pub async fn run<S: Sender>(
    mut x: Box<Exchange>,
    client: &S,
    timer: &ResponseTimer,
    diag: &mut Option<Box<crate::diagnosis::RequestDiag>>,
) -> Result<Done, ProxyError> {
    let deadline = x.chain.total.map(|t| Instant::now() + t);
    let result = match deadline {
        Some(d) => match tokio::time::timeout_at(d, phases(&mut x, client, timer)).await {
            Ok(r) => r,
            Err(_) => Err(total_timeout(&x)),
        },
        None => phases(&mut x, client, timer).await,
    };
    finish(x, result, deadline, diag)
}

/// [`run`] for a plain chain ([`super::chain::Chain::plain`]): the same phases in the
/// same order, the one attempt sent here rather than through `attempt` and the attempts
/// layer. Its future is small enough to be awaited in the request's own future instead of
/// a box: what it holds across the send is the send's future and a few words (the
/// attempt stack's hooks run before and after the send, their state not held across
/// it).
///
/// A plain function returning an `async` block: an `async fn` keeps each argument twice
/// in its state (the argument, and the local it becomes: rust-lang/rust#62958).
#[allow(clippy::manual_async_fn)]
pub fn run_plain<'a, S: Sender>(
    mut x: Box<Exchange>,
    client: &'a S,
    timer: &'a ResponseTimer,
    diag: &'a mut Option<Box<crate::diagnosis::RequestDiag>>,
) -> impl Future<Output = Result<Done, ProxyError>> + Send + 'a {
    debug_assert!(x.chain.plain(), "a chain with layers runs through `run`");
    async move {
        // What this future holds across the send is the send's future and a few words: no
        // value of the steps before it is a local in scope there (a local's storage lives
        // to the end of its scope, moved or not: rust-lang/rust#59123).
        // The chain's reference, a temporary of this statement: gone before the send.
        match request_stack(&x.chain.clone(), &mut x).await {
            Ok(None) => {}
            Ok(Some((resp, ran))) => {
                let resp = respond(&mut x, resp, ran);
                return finish(x, Ok((resp, None)), None, diag);
            }
            Err(e) => return finish(x, Err(e), None, diag),
        }
        // The one attempt's hooks before it decide at once (`AttemptRemedy::before`);
        // without an attempt stack (a rate limit, a cache) the response is not moved
        // through the hooks after it either.
        let hooks = !x.chain.attempt.is_empty();
        let (result, upstream) = {
            let sent;
            let result = {
                let (request, settings, at) = match ready(&mut x, client, 0, false) {
                    Ok(ready) => ready,
                    Err(e) => return finish(x, Err(e), None, diag),
                };
                sent = at;
                client.send_attempt(request, &x.target, timer, at, settings)
            }
            .await;
            let upstream = answered(&mut x, &result, sent);
            (result, upstream)
        };
        let result = match hooks {
            false => result,
            true => after_attempt(&mut x, result).await,
        };
        let result = result.map(|resp| {
            let ran = x.chain.remedies.len();
            (respond(&mut x, resp, ran), upstream)
        });
        finish(x, result, None, diag)
    }
}

/// An attempt on its way out: its request (noted in the diagnosis), its settings, and
/// the moment it leaves.
type Outgoing = (Request<Body>, AttemptSettings, Instant);

/// Attempt `number` (0 the first), its request a copy when `keep` (kept for another
/// attempt).
#[inline]
fn attempt_of<S: Sender>(
    x: &mut Exchange,
    client: &S,
    number: u32,
    keep: bool,
) -> Result<Attempt, ProxyError> {
    Ok(Attempt {
        number,
        request: x.attempt_request(keep).ok_or_else(body_gone)?,
        settings: settings(x, client),
    })
}

/// Attempt `number` ready to leave, through the attempt stack's hooks that decide at
/// once ([`super::chain::AttemptRemedy::before`], in registry order): each may refuse
/// it, or change its request or settings. All a first attempt's hooks are these.
fn ready<S: Sender>(
    x: &mut Exchange,
    client: &S,
    number: u32,
    keep: bool,
) -> Result<Outgoing, ProxyError> {
    if x.chain.attempt.is_empty() {
        // No hook: the request is not moved through an `Attempt`.
        let mut request = x.attempt_request(keep).ok_or_else(body_gone)?;
        let sent = sending(x, &mut request, number);
        return Ok((request, settings(x, client), sent));
    }
    let mut a = attempt_of(x, client, number, keep)?;
    let chain = x.chain.clone();
    for r in &chain.attempt {
        r.before(x, &mut a)?;
    }
    Ok(leave(x, a))
}

/// [`ready`] for a retry: each remedy's hook before it, then its hook before a retry
/// ([`super::chain::AttemptRemedy::before_retry`]: a breaker or a provider's pause may
/// refuse it, waiting for a shared store). A plain function returning an `async` block,
/// for the reason [`run_plain`] is one.
#[allow(clippy::manual_async_fn)]
fn ready_retry<'a, S: Sender>(
    x: &'a mut Exchange,
    client: &'a S,
    number: u32,
    keep: bool,
) -> impl Future<Output = Result<Outgoing, ProxyError>> + Send + 'a {
    async move {
        let mut a = attempt_of(x, client, number, keep)?;
        let chain = x.chain.clone();
        for r in &chain.attempt {
            r.before(x, &mut a)?;
            match r.before_retry(x) {
                Hook::Now(decided) => decided?,
                Hook::Wait(f) => f.await?,
            }
        }
        Ok(leave(x, a))
    }
}

/// An attempt leaves: its request and settings, and the moment it is sent
/// ([`sending`]).
#[inline]
fn leave(x: &mut Exchange, mut a: Attempt) -> Outgoing {
    let sent = sending(x, &mut a.request, a.number);
    (a.request, a.settings, sent)
}

/// The attempt stack after an attempt, in registry order: each remedy sees the
/// provider's response head, or the error. Called only for a chain that has one: without,
/// the response is not moved through this future.
#[allow(clippy::manual_async_fn)]
fn after_attempt(
    x: &mut Exchange,
    outcome: Result<Response<Body>, ProxyError>,
) -> impl Future<Output = Result<Response<Body>, ProxyError>> + Send + '_ {
    async move {
        let chain = x.chain.clone();
        let (head, body) = match outcome {
            Ok(r) => {
                let (parts, body) = r.into_parts();
                (Ok(parts), Some(body))
            }
            Err(e) => (Err(e), None),
        };
        for r in &chain.attempt {
            if let Hook::Wait(f) = r.after(x, head.as_ref()) {
                f.await;
            }
        }
        match (head, body) {
            (Ok(parts), Some(body)) => Ok(Response::from_parts(parts, body)),
            (Err(e), _) => Err(e),
            (Ok(_), None) => unreachable!("a response always has its body"),
        }
    }
}

/// An attempt's settings before the attempt stack changes them: the upstream's response
/// timeout, its connect timeout, and whether the pool may resend a request a stale
/// connection lost (as the attempts layer says).
fn settings<S: Sender>(x: &Exchange, client: &S) -> AttemptSettings {
    AttemptSettings {
        response_timeout: client.response_timeout(),
        connect_timeout: None,
        resend_lost: x.chain.attempts.resend_lost(),
    }
}

/// The end of an exchange, either way it ran: the diagnosis back to the request, an error
/// told as the attempts layer tells it, and the response's body given the exchange.
fn finish(
    mut x: Box<Exchange>,
    result: Result<(Response<Body>, Option<Duration>), ProxyError>,
    deadline: Option<Instant>,
    diag: &mut Option<Box<crate::diagnosis::RequestDiag>>,
) -> Result<Done, ProxyError> {
    *diag = x.diag.take();
    let result = match result {
        Err(e) => legacy_reply(&mut x, e),
        ok => ok,
    };
    let (response, upstream) = result.map_err(|e| {
        let e = x.chain.attempts.answer(&x, e);
        // On an MCP request, tollgate's own error is a JSON-RPC error with its id.
        match super::mcp_call::read_call(&x) {
            Some(c) if c.kind == crate::mcp::Kind::Request => e.on_call(c.id.clone()),
            Some(_) => e.on_call(None),
            None => e,
        }
    })?;
    let (parts, body) = response.into_parts();
    let body = crate::body::Watched::new(
        body,
        Ending {
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            exchange: Some(x),
        },
    );
    Ok(Done {
        response: Response::from_parts(parts, body),
        upstream,
        moved: None,
    })
}

/// On the older MCP HTTP+SSE transport, a refused message's error goes on its session's
/// stream, where the client waits for it, and the POST is answered `202 Accepted` as the
/// server would (policy::remedies::mcp); elsewhere, or with that stream's queue full, the
/// error answers the request.
fn legacy_reply(
    x: &mut Exchange,
    e: ProxyError,
) -> Result<(Response<Body>, Option<Duration>), ProxyError> {
    let Some(reply) = x.locals.take::<super::mcp_call::LegacyReply>() else {
        return Err(e);
    };
    let id = super::mcp_call::read_call(x).and_then(|c| c.id.as_deref());
    let event = format!("event: message\ndata: {}\n\n", e.json_rpc(id));
    if reply.0.try_send(bytes::Bytes::from(event)).is_err() {
        return Err(e);
    }
    let mut resp = Response::new(crate::body::full("Accepted"));
    *resp.status_mut() = http::StatusCode::ACCEPTED;
    resp.headers_mut().insert(
        crate::headers::X_TOLLGATE_ERROR,
        http::HeaderValue::from_static(e.code()),
    );
    Ok((resp, None))
}

fn total_timeout(x: &Exchange) -> ProxyError {
    ProxyError::UpstreamTimeout {
        target: x.target.authority.to_string(),
        stage: crate::error::TimeoutStage::Total,
        limit: x.chain.total.unwrap_or_default(),
    }
}

fn body_gone() -> ProxyError {
    ProxyError::Internal("the request body was already sent and cannot be replayed")
}

/// The request stack of `chain` (the exchange's): each remedy's request phase, in the
/// registry's order. `Some`: the response of the stage that answered, and how many
/// stages ran.
async fn request_stack(
    chain: &Chain,
    x: &mut Exchange,
) -> Result<Option<(Response<Body>, usize)>, ProxyError> {
    for (i, r) in chain.remedies.iter().enumerate() {
        x.started(i);
        let flow = match r.request(x) {
            Phase::Now(flow) => flow,
            Phase::Wait(f) => f.await,
        };
        if let Flow::Answer(resp) = flow? {
            return Ok(Some((resp, i + 1)));
        }
    }
    Ok(None)
}

async fn phases<S: Sender>(
    x: &mut Exchange,
    client: &S,
    timer: &ResponseTimer,
) -> Result<(Response<Body>, Option<Duration>), ProxyError> {
    let chain = x.chain.clone();
    if let Some((resp, ran)) = request_stack(&chain, x).await? {
        return Ok((respond(x, resp, ran), None));
    }
    // The attempts: sent by the chain's layer (once, or as retry decides), each
    // through the attempt stack.
    let (mut upstream, mut number) = (None, 0);
    let resp = loop {
        let mut attempt = attempt(x, client, timer, number, &mut upstream).await;
        let again = match chain.attempts.again(x, attempt.as_ref()).await {
            Some(wait) => Some(wait),
            // The attempts layer stopped: the fallback may send it elsewhere, at once.
            None => match &chain.fallback {
                Some(f) if f.next(x, &mut attempt).await => Some(Duration::ZERO),
                _ => None,
            },
        };
        match again {
            Some(wait) => {
                drop(attempt);
                number += 1;
                tokio::time::sleep(wait).await;
            }
            None => break attempt?,
        }
    };
    Ok((respond(x, resp, chain.remedies.len()), upstream))
}

/// The response phases of the first `ran` remedies, last first.
fn respond(x: &mut Exchange, mut resp: Response<Body>, ran: usize) -> Response<Body> {
    let chain = x.chain.clone();
    for r in chain.remedies[..ran].iter().rev() {
        resp = r.response(x, resp);
    }
    resp
}

/// One attempt (`number` 0 the first): the attempt stack before, the send, the attempt
/// stack after.
async fn attempt<S: Sender>(
    x: &mut Exchange,
    client: &S,
    timer: &ResponseTimer,
    number: u32,
    upstream: &mut Option<Duration>,
) -> Result<Response<Body>, ProxyError> {
    let keep = x.chain.attempts.keeps(x) || x.chain.fallback.is_some();
    // The first attempt's hooks decide at once; a retry's may wait. Without an attempt
    // stack the response comes straight back (not moved through a hook's future).
    let hooks = !x.chain.attempt.is_empty();
    let (request, settings, sent) = match number {
        0 => ready(x, client, number, keep)?,
        _ => ready_retry(x, client, number, keep).await?,
    };
    let result = client
        .send_attempt(request, &x.target, timer, sent, settings)
        .await;
    if let Some(took) = answered(x, &result, sent) {
        *upstream = Some(took);
    }
    match hooks {
        false => result,
        true => after_attempt(x, result).await,
    }
}

/// An attempt leaves: the moment it is sent, and its diagnosis (its span named in the
/// request, the HAR capture's copy of the request as the provider gets it).
fn sending(x: &mut Exchange, request: &mut Request<Body>, number: u32) -> Instant {
    let sent = Instant::now();
    if let Some(d) = &mut x.diag {
        // Each attempt its own span, named in the `traceparent` the provider gets.
        if let Some(t) = &mut d.trace {
            request
                .headers_mut()
                .insert(crate::diagnosis::trace::TRACEPARENT, t.attempt());
        }
        // The capture shows the request as the provider got it (redacted when written).
        if let Some(h) = &mut d.har {
            h.url = crate::target::url(&x.target, request.uri());
            h.request_headers = request.headers().clone();
        }
        d.sent_at = Some(sent);
        d.retries = number;
    }
    sent
}

/// An attempt answered (its response head, or the error), told to its span; the time it
/// waited for a response head when it got one.
fn answered(
    x: &mut Exchange,
    result: &Result<Response<Body>, ProxyError>,
    sent: Instant,
) -> Option<Duration> {
    if let Some(t) = x.diag.as_mut().and_then(|d| d.trace.as_mut()) {
        t.attempt_done(match result {
            Ok(r) => Ok(r.status().as_u16()),
            Err(e) => Err(e.to_string()),
        });
    }
    result.is_ok().then(|| sent.elapsed())
}

/// A matched request's response body, watched by its [`Ending`]: not boxed here, so the
/// relay's own watcher wraps it in the one box the response body gets.
pub type Ended = crate::body::Watched<Body, Ending>;

/// Watches the response body of a matched request: it owns the exchange, dropped
/// (running the end hooks, releasing what the request held) when the body ends or the
/// client goes away; and it ends the body with an error at `timeouts.total`.
pub struct Ending {
    deadline: Option<Pin<Box<Sleep>>>,
    exchange: Option<Box<Exchange>>,
}

impl Ending {
    /// For a response no exchange ended in (a request sent plainly after all).
    pub fn none() -> Self {
        Self {
            deadline: None,
            exchange: None,
        }
    }
}

impl crate::body::Watch for Ending {
    fn interrupt(&mut self, cx: &mut Context<'_>) -> Option<BoxError> {
        let d = self.deadline.as_mut()?;
        if d.as_mut().poll(cx).is_pending() {
            return None;
        }
        let err = self.exchange.as_ref().map(|x| total_timeout(x).to_string());
        self.exchange.take();
        Some(err.unwrap_or_default().into())
    }

    fn end(&mut self, _complete: bool) {
        self.exchange.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::chain::Phase;
    use std::sync::Arc;

    /// The first policy's chain of `yaml`, as a worker runs it.
    fn chain(yaml: &str) -> Arc<Chain> {
        let config = crate::config::Config::from_yaml(yaml).expect("a valid config");
        let metrics = crate::metrics::Metrics::default();
        let store = crate::policy::store::build(&config.store, &metrics).expect("a store");
        let engine = crate::policy::Engine::build(&config.policies, None, &store, &metrics);
        engine.for_worker().chains[0].clone()
    }

    /// An exchange of `chain` for one request (`GET`, with an `x-team` field).
    fn exchange(chain: &Arc<Chain>) -> Exchange {
        let req = http::Request::get("http://api.example.com/v1/items")
            .header("x-team", "a")
            .body(crate::body::empty())
            .unwrap();
        let target =
            crate::target::Target::parse(crate::target::Scheme::Http, "api.example.com").unwrap();
        Exchange::new(chain.clone(), req, target)
    }

    /// How each request phase of `chain` went for one request: `now` (decided at once),
    /// `refused` (decided at once, with an error), `wait` (a future to wait on).
    fn phases(chain: &Arc<Chain>) -> Vec<&'static str> {
        let mut x = exchange(chain);
        chain
            .remedies
            .iter()
            .enumerate()
            .map(|(i, r)| {
                x.started(i);
                match r.request(&mut x) {
                    Phase::Now(Ok(_)) => "now",
                    Phase::Now(Err(_)) => "refused",
                    Phase::Wait(_) => "wait",
                }
            })
            .collect()
    }

    #[tokio::test]
    async fn remedies_counting_in_memory_decide_without_waiting() {
        let c = chain(
            "policies:
  - name: p
    timeouts: {total: 30s}
    header_guard: {require: [x-team]}
    request: {set_headers: {x-a: b}}
    provider_throttling: {}
    quota: {limit: 10, per: day}
    rate_limit: {limit: 2, window: hour, refund_on: [304]}
    response: {set_headers: {x-b: c}}
",
        );
        let all_now = vec!["now"; c.remedies.len()];
        assert_eq!(phases(&c), all_now);
        assert_eq!(phases(&c), all_now);
        let third = phases(&c);
        let limit = c.names.iter().position(|n| *n == "rate_limit").unwrap();
        assert_eq!(
            third[limit], "refused",
            "over the rate limit: refused at once, {third:?}"
        );
    }

    /// How each hook after a first attempt of `chain` went, its answer `head`: `now`
    /// (decided at once) or `wait` (a future to wait on). The hooks before it run first,
    /// and refuse nothing.
    fn hooks(chain: &Arc<Chain>, head: http::response::Parts) -> Vec<&'static str> {
        let mut x = exchange(chain);
        let mut a = Attempt {
            number: 0,
            request: x.attempt_request(true).unwrap(),
            settings: crate::upstream::AttemptSettings {
                response_timeout: Duration::from_secs(1),
                connect_timeout: None,
                resend_lost: false,
            },
        };
        let mut seen = Vec::new();
        for r in &chain.attempt {
            r.before(&mut x, &mut a)
                .expect("a first attempt is not refused");
        }
        for r in &chain.attempt {
            seen.push(match r.after(&mut x, Ok(&head)) {
                Hook::Now(()) => "now",
                Hook::Wait(_) => "wait",
            });
        }
        seen
    }

    #[tokio::test]
    async fn attempt_hooks_that_decide_at_once_are_no_futures() {
        let c = chain(
            "policies:
  - name: p
    timeouts: {response: 30s}
    provider_throttling: {}
    credentials: {header: {name: x-api-key, value: k}}
",
        );
        let ok = http::Response::new(()).into_parts().0;
        assert_eq!(hooks(&c, ok), ["now"; 3], "{:?}", c.names);
        // A pause the provider asks for is raised in the store: that hook waits.
        let mut paused = http::Response::new(()).into_parts().0;
        paused.status = http::StatusCode::TOO_MANY_REQUESTS;
        paused.headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("5"),
        );
        assert!(hooks(&c, paused).contains(&"wait"));
        // A breaker counts every outcome in its store.
        let breaker = chain(
            "policies:
  - name: p
    breaker: {consecutive_failures: 2, open_for: 30s}
",
        );
        let ok = http::Response::new(()).into_parts().0;
        assert_eq!(hooks(&breaker, ok), ["wait"]);
    }

    #[tokio::test]
    async fn a_phase_that_must_wait_is_a_future() {
        // Over the limit with a queue: the request waits in it.
        let queued = chain(
            "policies:
  - name: p
    rate_limit: {limit: 1, window: hour, queue: {size: 10, max_wait: 1h}}
",
        );
        assert_eq!(phases(&queued), ["now"]);
        assert_eq!(phases(&queued), ["wait"]);
        // A JSON edit reads the body; a cache looks at its store for a key this worker's
        // copy does not answer.
        let reading = chain(
            "policies:
  - name: p
    request: {json_set: {/stream: false}}
    cache: {ttl: 1m}
",
        );
        assert_eq!(phases(&reading), ["wait", "wait"]);
    }
}
