//! Amounts reserved on admission and settled when the call ends (token limits, budgets):
//! a request is admitted when its estimate fits (counted atomically, on the shared store
//! too), and its end hook corrects the count to what the answer says it used. So the
//! count is exact once no call is in flight, and while calls are, usage can pass the
//! limit by at most what the calls in flight use beyond their reservations
//! (docs/llm.md#the-bound).

use super::chain::Exchange;
use super::clock;
use super::limit::{Limit, OverLimit};
use super::store::Key;
use crate::error::{ProxyError, Reject, Rejection};
use std::sync::Arc;

/// One reservation of a request.
struct Reserved {
    stage: &'static str,
    limit: Arc<Limit>,
    counted: Vec<Key>,
    amount: u64,
    expires_ms: u64,
}

/// The reservations of a request, by remedy.
#[derive(Default)]
pub struct Reservations(Vec<Reserved>);

/// Reserves `n` on `limit` for `stage`: the amount left in the window, or why it does
/// not fit.
pub async fn reserve(
    x: &mut Exchange,
    stage: &'static str,
    limit: &Arc<Limit>,
    n: u64,
) -> Result<u64, OverLimit> {
    let (_, expires_ms) = limit.spec.window.bounds(clock::now_ms());
    let t = limit.reserve(&x.parts.headers, n).await?;
    x.locals.get_or_default::<Reservations>().0.push(Reserved {
        stage,
        limit: limit.clone(),
        counted: t.counted,
        amount: n,
        expires_ms,
    });
    Ok(t.remaining)
}

/// Settles `stage`'s reservation to `actual`: what it had reserved, if it had.
pub fn settle(x: &Exchange, stage: &'static str, actual: u64) -> Option<u64> {
    let r = x
        .locals
        .get::<Reservations>()?
        .0
        .iter()
        .find(|r| r.stage == stage)?;
    let delta = actual as i128 - r.amount as i128;
    let delta = delta.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    r.limit.adjust(&r.counted, delta, r.expires_ms);
    Some(r.amount)
}

/// The refusal of an amount that does not fit: 429 with `Retry-After` to the next window,
/// or without one when the amount exceeds the whole limit (no window can take it).
pub fn refusal(
    kind: Reject,
    what: &str,
    n: u64,
    r: &OverLimit,
    unit: fn(u64) -> String,
) -> ProxyError {
    let secs = clock::secs_until(r.reset_ms);
    let (message, retry_after) = if r.blocked {
        (
            format!("{what}: this consumer group is not allowed (default_group: block)"),
            None,
        )
    } else if n > r.limit {
        (
            format!(
                "{what}: this request needs {} and the whole limit is {}: it can never fit (lower its max_tokens)",
                unit(n),
                unit(r.limit)
            ),
            None,
        )
    } else {
        (
            format!(
                "{what}: {} per window, and this request needs {}, more than is left; the next window starts in {secs}s",
                unit(r.limit),
                unit(n)
            ),
            Some(secs),
        )
    };
    ProxyError::Rejected(Rejection {
        kind,
        message,
        retry_after,
        rate: None,
    })
}
