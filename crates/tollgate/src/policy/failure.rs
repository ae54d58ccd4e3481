//! What an attempt's outcome was, as breakers and retries judge it: a status in a set of
//! ranges, or an error that never reached the provider (DNS, connect, TLS, connect
//! timeout), a timeout waiting for the response, or a failure after sending.

use crate::error::{ProxyError, TimeoutStage};

/// Status ranges, inclusive.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Statuses(pub Vec<(u16, u16)>);

impl Statuses {
    pub fn contains(&self, s: u16) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&s))
    }

    /// `503` or `"500-599"`.
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let one = |t: &str| {
            t.trim()
                .parse::<u16>()
                .ok()
                .filter(|s| (100..=599).contains(s))
        };
        items
            .iter()
            .map(|i| match i.split_once('-') {
                Some((a, b)) => match (one(a), one(b)) {
                    (Some(a), Some(b)) if a <= b => Ok((a, b)),
                    _ => Err(format!("`{i}`: write a status (503) or a range (\"500-599\") of statuses 100 to 599")),
                },
                None => one(i)
                    .map(|s| (s, s))
                    .ok_or_else(|| format!("`{i}`: write a status (503) or a range (\"500-599\") of statuses 100 to 599")),
            })
            .collect::<Result<_, _>>()
            .map(Statuses)
    }
}

/// How an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request never reached the provider: safe to send again, whatever the method.
    NotSent,
    /// No response head in time; the provider may have acted on the request.
    Timeout,
    /// Failed after it was sent (connection reset, protocol error).
    AfterSending,
    /// Refused by tollgate itself (a rule, the client's request): not the provider's fault.
    Ours,
}

pub fn classify(e: &ProxyError) -> Failure {
    match e {
        ProxyError::Dns { .. } | ProxyError::Tls { .. } => Failure::NotSent,
        ProxyError::UpstreamTimeout {
            stage: TimeoutStage::Connect,
            ..
        } => Failure::NotSent,
        ProxyError::UpstreamTimeout { .. } => Failure::Timeout,
        // A connection that could not be made never carried the request; a reset on an
        // open one may have.
        ProxyError::Connect { sent: false, .. } => Failure::NotSent,
        ProxyError::Connect { .. } | ProxyError::Upstream(_) => Failure::AfterSending,
        _ => Failure::Ours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_connect_timeout_never_left_and_a_response_timeout_may_have() {
        let timeout = |stage| ProxyError::UpstreamTimeout {
            target: "api.example.com".into(),
            stage,
            limit: Duration::from_secs(1),
        };
        assert_eq!(classify(&timeout(TimeoutStage::Connect)), Failure::NotSent);
        assert_eq!(classify(&timeout(TimeoutStage::Respond)), Failure::Timeout);
        assert_eq!(classify(&timeout(TimeoutStage::Total)), Failure::Timeout);
        assert_eq!(classify(&ProxyError::Internal("x")), Failure::Ours);
        assert_eq!(
            timeout(TimeoutStage::Connect).to_string(),
            "`api.example.com` did not connect within 1s"
        );
    }
}
