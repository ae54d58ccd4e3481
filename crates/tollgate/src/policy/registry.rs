//! The remedies, in the order a policy's chain runs them. This list is the stage order:
//! the policy's config keys, its validation, the compiled chain, `/policies`, `/config`,
//! the schema and the docs' stage table all come from it. A new remedy is its module and
//! one line here.

use super::remedies::*;

super::kind::remedies! {
    /// Timeouts overriding the `upstream` ones for this policy's requests.
    timeouts: timeouts::Kind,
    /// Answer without calling the provider.
    mock: mock::Kind,
    /// Change the request before it is sent: headers, path, JSON body fields.
    request: transform::RequestKind,
    /// Response cache.
    cache: cache::Kind,
    /// Circuit breaker: the name of one declared under `breakers`, or its definition.
    breaker: breaker::Kind,
    /// Stop sending while the provider says it is throttling (429/503 with `Retry-After`, or `RateLimit-Remaining: 0`).
    provider_throttling: throttle::Kind,
    /// A long-window quota: the name of one declared under `quotas`, or its definition.
    quota: quota::Kind,
    /// A fixed-window rate limit: the name of one declared under `rate_limits`, or its definition.
    rate_limit: rate_limit::Kind,
    /// A limit on requests in flight: the name of one declared under `concurrency_limits`, or its definition.
    concurrency: concurrency::Kind,
    /// Change the provider's response headers.
    response: transform::ResponseKind,
    /// Credentials injected into the upstream request (never seen by cache keys, logs or metrics).
    credentials: credentials::Kind,
    /// Retries inside the proxy.
    retry: retry::Kind,
}
