//! The remedies, one module each, all behind [`super::chain::Remedy`].

pub mod breaker;
pub mod cache;
pub mod concurrency;
pub mod credentials;
pub mod mock;
pub mod quota;
pub mod rate_limit;
pub mod retry;
pub mod throttle;
pub mod timeouts;
pub mod transform;
