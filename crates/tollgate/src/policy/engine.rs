//! Runs a matched request through its policy's chain: the request stack in the registry's
//! order, then the attempts (sent by the chain's [`super::chain::Attempts`] layer, each
//! through the attempt stack), then the response phases in reverse. Only matched requests come here, on a boxed
//! future; unmatched traffic never does.

use super::chain::{Attempt, Exchange, Flow};
use crate::body::{Body, BoxError};
use crate::error::ProxyError;
use crate::upstream::deadline::ResponseTimer;
use crate::upstream::{AttemptSettings, Sender};
use http::Response;
use http_body_util::BodyExt;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// What the engine produced: the response (its body owns the exchange, so the end hooks
/// run when it ends or is dropped) and the upstream time of the last attempt.
pub struct Done {
    pub response: Response<Body>,
    pub upstream: Option<Duration>,
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
    *diag = x.diag.take();
    let (response, upstream) = result.map_err(|e| x.chain.attempts.answer(&x, e))?;
    let (parts, body) = response.into_parts();
    let body = crate::body::Watched::new(
        body,
        Ending {
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            exchange: Some(x),
        },
    );
    Ok(Done {
        response: Response::from_parts(parts, body.boxed_unsync()),
        upstream,
    })
}

fn total_timeout(x: &Exchange) -> ProxyError {
    ProxyError::UpstreamTimeout {
        target: x.target.authority.to_string(),
        stage: crate::error::TimeoutStage::Total,
        limit: x.chain.total.unwrap_or_default(),
    }
}

async fn phases<S: Sender>(
    x: &mut Exchange,
    client: &S,
    timer: &ResponseTimer,
) -> Result<(Response<Body>, Option<Duration>), ProxyError> {
    let chain = x.chain.clone();
    for (i, r) in chain.remedies.iter().enumerate() {
        x.started(i);
        if let Flow::Answer(resp) = r.request(x).await? {
            return Ok((respond(x, resp, i + 1), None));
        }
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
    let chain = x.chain.clone();
    let keep = chain.attempts.keeps(x) || chain.fallback.is_some();
    let request = x.attempt_request(keep).ok_or(ProxyError::Internal(
        "the request body was already sent and cannot be replayed",
    ))?;
    let settings = AttemptSettings {
        response_timeout: client.response_timeout(),
        connect_timeout: None,
        resend_lost: chain.attempts.resend_lost(),
    };
    // Without an attempt stack the request goes straight to the send (not moved into an
    // `Attempt` held across the hooks' awaits and out again).
    let (mut request, settings) = if chain.attempt.is_empty() {
        (request, settings)
    } else {
        let mut a = Attempt {
            number,
            request,
            settings,
        };
        for r in &chain.attempt {
            r.before(x, &mut a).await?;
        }
        (a.request, a.settings)
    };
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
    let result = client
        .send_attempt(request, &x.target, timer, sent, settings)
        .await;
    if result.is_ok() {
        *upstream = Some(sent.elapsed());
    }
    if let Some(t) = x.diag.as_mut().and_then(|d| d.trace.as_mut()) {
        t.attempt_done(match &result {
            Ok(r) => Ok(r.status().as_u16()),
            Err(e) => Err(e.to_string()),
        });
    }
    if chain.attempt.is_empty() {
        // No remedy of the attempt stack to show the head to: the response is not taken
        // apart and put together again (each a move of it).
        return result;
    }
    let (result, body) = match result {
        Ok(r) => {
            let (parts, body) = r.into_parts();
            (Ok(parts), Some(body))
        }
        Err(e) => (Err(e), None),
    };
    for r in &chain.attempt {
        r.after(x, result.as_ref()).await;
    }
    match (result, body) {
        (Ok(parts), Some(body)) => Ok(Response::from_parts(parts, body)),
        (Err(e), _) => Err(e),
        (Ok(_), None) => unreachable!("a response always has its body"),
    }
}

/// Watches the response body of a matched request: it owns the exchange, dropped
/// (running the end hooks, releasing what the request held) when the body ends or the
/// client goes away; and it ends the body with an error at `timeouts.total`.
struct Ending {
    deadline: Option<Pin<Box<Sleep>>>,
    exchange: Option<Box<Exchange>>,
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
