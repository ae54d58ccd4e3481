//! The remedies, one module each, and the registry: the list below, in the order a
//! policy's chain runs them. It is the stage order: the policy's config keys, the
//! sections declaring shared definitions, their validation, the compiled chain, the
//! remedies' metric families and refusals, `/policies`, `/config`, the reload diff, the
//! schema, the docs' stage, key and error tables and the policy half of
//! `examples/full.yaml` all come from it. A new remedy is its module and its line here
//! (CONTRIBUTING.md).

pub mod breaker;
pub mod budget;
pub mod cache;
pub mod concurrency;
pub mod credentials;
pub mod header_guard;
pub mod llm;
pub mod mcp;
pub mod mock;
pub mod quota;
pub mod rate_limit;
pub mod retry;
pub mod throttle;
pub mod timeouts;
pub mod token_limit;
pub mod transform;

/// The registry: every remedy in chain order, its policy key, its doc (the schema's and
/// the docs'), and for one whose definitions may be declared by name, that section's key
/// and doc. [`super::kind::remedies`] makes the policy's types and the stage table of
/// it; the config module makes the file's declared sections of it (`raw_config!`).
macro_rules! registry {
    ($($then:ident)::+) => {
        $($then)::+! {
            /// Timeouts overriding the `upstream` ones for this policy's requests.
            timeouts: timeouts::Kind;
            /// Refuse requests lacking a required header (400 `bad_request`), before anything else runs.
            header_guard: header_guard::Kind;
            /// MCP calls: refuse tools (a JSON-RPC error carrying the call's id) and cut them from `tools/list` answers (docs/mcp.md).
            mcp: mcp::Kind;
            /// Answer without calling the provider.
            mock: mock::Kind;
            /// Change the request before it is sent: headers, path, JSON body fields.
            request: transform::RequestKind;
            /// Response cache.
            cache: cache::Kind;
            /// Circuit breaker: the name of one declared under `breakers`, or its definition.
            breaker: breaker::Kind,
                /// Circuit breakers shared by name (`breaker: NAME`).
                breakers;
            /// Stop sending while the provider says it is throttling (429/503 with `Retry-After`, or `RateLimit-Remaining: 0`).
            provider_throttling: throttle::Kind;
            /// A long-window quota: the name of one declared under `quotas`, or its definition.
            quota: quota::Kind,
                /// Quotas shared by name (`quota: NAME`), and the parents of child quotas.
                quotas;
            /// A fixed-window rate limit: the name of one declared under `rate_limits`, or its definition.
            rate_limit: rate_limit::Kind,
                /// Rate limits shared by name: `rate_limit: NAME` in any number of policies counts against one limit.
                rate_limits;
            /// LLM calls read: model, stream, prompt tokens estimated, and the answer's usage as it streams (docs/llm.md).
            llm: llm::Kind;
            /// Tokens per window for LLM calls: the name of one declared under `token_limits`, or its definition.
            token_limit: token_limit::Kind,
                /// Token limits shared by name (`token_limit: NAME`).
                token_limits;
            /// Money per day or month for LLM calls: the name of one declared under `budgets`, or its definition.
            budget: budget::Kind,
                /// Budgets shared by name (`budget: NAME`).
                budgets;
            /// A limit on requests in flight: the name of one declared under `concurrency_limits`, or its definition.
            concurrency: concurrency::Kind,
                /// Concurrency limits shared by name (`concurrency: NAME`).
                concurrency_limits;
            /// Change the provider's response headers.
            response: transform::ResponseKind;
            /// Credentials injected into the upstream request (never seen by cache keys, logs or metrics).
            credentials: credentials::Kind;
            /// Retries inside the proxy.
            retry: retry::Kind;
        }
    };
}
pub(crate) use registry;

registry!(super::kind::remedies);

#[cfg(test)]
mod tests {
    use super::STAGES;

    #[test]
    fn actions_are_counted_under_the_remedys_name() {
        for s in STAGES {
            let (remedy, actions) = (s.actions)();
            assert!(
                actions.is_empty() || remedy == s.name,
                "{}: actions counted as `{remedy}`",
                s.name
            );
        }
    }

    #[test]
    fn keys_and_names_are_unique() {
        for (i, s) in STAGES.iter().enumerate() {
            for t in &STAGES[..i] {
                assert!(s.key != t.key && s.name != t.name, "{} twice", s.name);
            }
        }
    }
}
