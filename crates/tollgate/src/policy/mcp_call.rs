//! The MCP call a request carries (crate::mcp), read once — by the policy selection
//! (`match.mcp`) or the first remedy that needs it — into the exchange's locals, where the
//! remedies, diagnosis and tollgate's own errors (a JSON-RPC error with its id) find it.

use crate::error::ProxyError;
use crate::mcp::Call;
use crate::policy::chain::Exchange;
use std::sync::Arc;

/// The MCP message `x` carries, read once (by the policy selection or the first remedy
/// that needs it) into its locals: `None` when it is not one. A body larger than
/// `max_body`, a malformed message, or headers that say another method or name than the
/// body are refused (400 `mcp_invalid`): a server could read them otherwise than
/// tollgate did.
pub async fn call(x: &mut Exchange, max_body: usize) -> Result<Option<&Call>, ProxyError> {
    if x.locals.get::<Read>().is_none() {
        let read = match crate::mcp::candidate(&x.method, &x.parts.headers) {
            false => Read(None),
            true => {
                let body = x.buffer(max_body).await?.cloned();
                let Some(body) = body else {
                    return Err(crate::mcp::invalid(
                        None,
                        format!(
                            "the request body is larger than {max_body} bytes, the most read to judge an MCP call (the `mcp` remedy's `max_body`)"
                        ),
                    ));
                };
                let read = crate::mcp::judge(&x.parts.headers, &body)?.map(Arc::new);
                if let Some(d) = &mut x.diag {
                    d.mcp = read.clone();
                }
                Read(read)
            }
        };
        x.locals.insert(read);
    }
    Ok(x.locals.get::<Read>().and_then(|r| r.0.as_deref()))
}

/// The call `x` carries, when it was read.
pub fn read_call(x: &Exchange) -> Option<&Call> {
    x.locals.get::<Read>().and_then(|r| r.0.as_deref())
}

/// The call `x` carries, shared (the remedies' answer watchers write its outcome).
pub fn shared_call(x: &Exchange) -> Option<Arc<Call>> {
    x.locals.get::<Read>().and_then(|r| r.0.clone())
}

/// Where a refusal of this request goes on the older HTTP+SSE transport: the stream of
/// the session the message was POSTed to (its JSON-RPC error sent there, the POST
/// answered `202`).
pub struct LegacyReply(pub tokio::sync::mpsc::Sender<bytes::Bytes>);

/// What was read of a request: its call, or `None` when it is not MCP.
pub struct Read(pub Option<Arc<Call>>);
