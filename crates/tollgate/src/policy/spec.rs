//! A policy's validated definition: which remedies it applies, with their settings, and
//! the shared resources (rate limits, quotas, concurrency limits, breakers) it refers to
//! by name. Built by config validation; compiled into a chain by [`super::compile`].

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
    /// The remedies this policy applies, by stage name, for `/config` and `/policies`.
    pub fn remedies(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |on: bool, n| {
            if on {
                v.push(n)
            }
        };
        add(self.timeouts.is_some(), "timeouts");
        add(self.mock.is_some(), "mock");
        add(self.request.is_some(), "request_transform");
        add(self.cache.is_some(), "cache");
        add(self.breaker.is_some(), "breaker");
        add(self.throttle.is_some(), "provider_throttling");
        add(self.quota.is_some(), "quota");
        add(self.rate_limit.is_some(), "rate_limit");
        add(self.concurrency.is_some(), "concurrency");
        add(self.response.is_some(), "response_transform");
        add(self.credentials.is_some(), "credentials");
        add(self.retry.is_some(), "retry");
        v
    }
}
