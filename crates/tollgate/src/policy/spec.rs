//! A policy's validated definition: which remedies it applies, with their settings, and
//! the shared resources (rate limits, quotas, concurrency limits, breakers) it refers to
//! by name. Built by config validation; compiled into a chain by [`super::compile`].

use super::chain::Stage;
use super::limit::LimitSpec;
use super::queue::QueueSpec;
use super::remedies::breaker::BreakerSpec;
use super::remedies::cache::CacheSpec;
use super::remedies::concurrency::ConcurrencySpec;
use super::remedies::credentials::Credential;
use super::remedies::mock::Mock;
use super::remedies::retry::RetrySpec;
use super::remedies::throttle::ThrottleSpec;
use super::remedies::timeouts::Timeouts;
use super::remedies::transform::{RequestTransform, ResponseTransform};
use std::time::Duration;

/// A resource a policy uses: declared (shared by name) or its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource<T> {
    /// The declared name, or `policy NAME` for an inline definition.
    pub name: String,
    pub declared: bool,
    pub spec: T,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitSpec {
    pub limit: LimitSpec,
    pub queue: Option<QueueSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct QuotaSpec {
    pub limit: LimitSpec,
    /// The declared quota this one takes a share of.
    pub parent: Option<Box<Resource<QuotaSpec>>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyLimitSpec {
    pub limit: ConcurrencySpec,
    pub queue: Option<QueueSpec>,
}

#[derive(Debug, Clone, Default)]
pub struct PolicySpec {
    pub timeouts: Option<Timeouts>,
    pub mock: Option<Mock>,
    pub request: Option<RequestTransform>,
    pub cache: Option<CacheSpec>,
    pub breaker: Option<Resource<BreakerSpec>>,
    pub throttle: Option<ThrottleSpec>,
    pub quota: Option<Resource<QuotaSpec>>,
    pub rate_limit: Option<Resource<RateLimitSpec>>,
    pub concurrency: Option<Resource<ConcurrencyLimitSpec>>,
    pub response: Option<ResponseTransform>,
    pub credentials: Option<(Vec<Credential>, Duration)>,
    pub retry: Option<RetrySpec>,
}

impl PolicySpec {
    /// The remedies this policy applies, by stage name in chain order, for `/config`
    /// and `/policies`.
    pub fn remedies(&self) -> Vec<&'static str> {
        [
            (self.timeouts.is_some(), Stage::Timeouts),
            (self.mock.is_some(), Stage::Mock),
            (self.request.is_some(), Stage::RequestTransform),
            (self.cache.is_some(), Stage::Cache),
            (self.breaker.is_some(), Stage::Breaker),
            (self.throttle.is_some(), Stage::ProviderThrottle),
            (self.quota.is_some(), Stage::Quota),
            (self.rate_limit.is_some(), Stage::RateLimit),
            (self.concurrency.is_some(), Stage::Concurrency),
            (self.response.is_some(), Stage::ResponseTransform),
            (self.credentials.is_some(), Stage::Credentials),
            (self.retry.is_some(), Stage::Retry),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, stage)| stage.name())
        .collect()
    }
}
