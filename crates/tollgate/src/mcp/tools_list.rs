//! A `tools/list` answer without the tools a policy refuses, so the model is never offered
//! one it may not call. Only the refused entries of `result.tools` are cut out: every
//! other byte of the message stays as the server wrote it ([`super::rewrite`] applies it
//! to each message of an answer). A message larger than the rewrite's cap passes as it
//! is: the list is what the model is offered, and a call to a refused tool is still
//! refused whatever the list said.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// `message` (one JSON-RPC response, as text) without the tools `keep` refuses; `None`
/// when it has none of them (or is no `tools/list` result), so it goes on untouched.
pub fn filter(message: &str, keep: &dyn Fn(&str) -> bool) -> Option<String> {
    let r: Response<'_> = serde_json::from_str(message).ok()?;
    let l: ListResult<'_> = serde_json::from_str(r.result?.get()).ok()?;
    let tools = l.tools?;
    let refused = |t: &RawValue| {
        serde_json::from_str::<Tool<'_>>(t.get())
            .ok()
            .and_then(|t| t.name)
            .is_some_and(|n| !keep(&n))
    };
    if !tools.iter().any(|t| refused(t)) {
        return None;
    }
    // Every element borrows from `message`: where each lies in it is its address less
    // the message's.
    let at = |t: &RawValue| t.get().as_ptr() as usize - message.as_ptr() as usize;
    let (first, last) = (tools.first()?, tools.last()?);
    let (start, end) = (at(first), at(last) + last.get().len());
    let mut out = String::with_capacity(message.len());
    out.push_str(&message[..start]);
    let kept: Vec<&str> = tools
        .iter()
        .filter(|t| !refused(t))
        .map(|t| t.get())
        .collect();
    out.push_str(&kept.join(","));
    out.push_str(&message[end..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(n: &str) -> bool {
        !n.starts_with("delete")
    }

    pub(crate) const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","tools":[{"name":"add","inputSchema":{"type":"object"}}, {"description":"x","name":"delete_repository"} ,{"name":"echo"}],"ttlMs":0}}"#;

    #[test]
    fn refused_tools_are_cut_and_the_rest_kept_as_written() {
        assert_eq!(
            filter(LIST, &keep).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","tools":[{"name":"add","inputSchema":{"type":"object"}},{"name":"echo"}],"ttlMs":0}}"#
        );
        let only = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[ {"name":"delete_all"} ]}}"#;
        assert_eq!(
            filter(only, &keep).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[  ]}}"#
        );
        // Nothing refused, an error, another result: untouched.
        assert_eq!(
            filter(
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"add"}]}}"#,
                &keep
            ),
            None
        );
        assert_eq!(
            filter(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#,
                &keep
            ),
            None
        );
        assert_eq!(
            filter(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#, &keep),
            None
        );
    }
}
