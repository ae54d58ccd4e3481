//! What an attempt's outcome was, as breakers and retries judge it: a status in a set of
//! ranges, or an error that never reached the provider (DNS, connect, TLS, connect
//! timeout), a timeout waiting for the response, or a failure after sending.

use crate::error::ProxyError;

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

pub use crate::error::Failure;

/// How an attempt failed: its error's kind says ([`crate::error::ErrorKind`]).
pub fn classify(e: &ProxyError) -> Failure {
    e.kind().failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TimeoutStage;
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
