//! The protocols tollgate recognises on the wire, one module each, and the registry: the
//! list below. What a protocol is read for is the same steps for each — recognised by
//! method, path and body; its request read once, bounded; its answer watched as it
//! passes; what a policy matches and diagnosis shows of it — and a module says how its
//! protocol differs: an LLM API implements [`crate::llm::Shape`] (the reading is
//! `crate::llm`'s), MCP points at `crate::mcp`. The docs' table of recognised protocols
//! (docs/llm.md, docs/architecture.md) comes from the registry. A new provider's API is
//! its module and its line here (CONTRIBUTING.md).

pub mod anthropic_messages;
pub mod gemini;
pub mod mcp;
pub mod openai_chat;
pub mod openai_embeddings;
pub mod openai_responses;

use crate::llm::Api;

/// One recognised protocol: its name and what the docs say of it.
pub struct Unit {
    /// As diagnosis names it (`openai.chat`; HAR's `_tollgateUsage.api`).
    pub name: &'static str,
    /// What it is, for the docs.
    pub title: &'static str,
    /// How a request is recognised (any host).
    pub recognised_by: &'static str,
    /// What is read of its answers.
    pub answer: &'static str,
    /// What a policy matches and which remedies act on it.
    pub policies: &'static str,
    pub kind: Kind,
}

/// What a policy does with an LLM API's calls, whichever API.
pub const LLM_POLICIES: &str =
    "`match` by host and path; `llm`, `token_limit`, `budget`, `llm.fallback`";

/// How a protocol's calls are read.
pub enum Kind {
    /// An LLM API: read by `crate::llm` as its [`crate::llm::Shape`] says.
    Llm(Api),
    /// MCP: read by `crate::mcp` when a policy asks for it.
    Mcp,
}

/// The registry: every recognised protocol. An LLM request is recognised by the first
/// line whose API claims its path.
pub static REGISTRY: &[&Unit] = &[
    &openai_chat::UNIT,
    &openai_responses::UNIT,
    &openai_embeddings::UNIT,
    &anthropic_messages::UNIT,
    &gemini::UNIT,
    &mcp::UNIT,
];

/// The LLM APIs of the registry, in its order.
pub fn llm_apis() -> impl Iterator<Item = Api> {
    REGISTRY.iter().filter_map(|u| match u.kind {
        Kind::Llm(api) => Some(api),
        Kind::Mcp => None,
    })
}

/// The LLM API a `POST` to `path` calls, if any (on any host: the many providers copying
/// OpenAI's shape — vLLM, Ollama, Groq, Together, OpenRouter — serve the same paths).
pub fn llm_api(path: &str) -> Option<Api> {
    let path = path.trim_end_matches('/');
    llm_apis().find(|api| api.recognises(path))
}

/// The docs' table of the registry (docs/llm.md, docs/architecture.md).
pub fn table() -> String {
    let mut out = String::from(
        "| protocol | named | recognised by (any host) | read from the answer | policies |\n|---|---|---|---|---|\n",
    );
    for u in REGISTRY {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} |\n",
            u.title, u.name, u.recognised_by, u.answer, u.policies
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apis_are_known_by_their_paths() {
        let cases = [
            ("/v1/chat/completions", Some(openai_chat::API)),
            ("/openai/v1/chat/completions", Some(openai_chat::API)),
            ("/v1/completions", Some(openai_chat::API)),
            ("/v1/chat/completions/", Some(openai_chat::API)),
            ("/v1/responses", Some(openai_responses::API)),
            ("/v1/embeddings", Some(openai_embeddings::API)),
            ("/v1/messages", Some(anthropic_messages::API)),
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                Some(gemini::API),
            ),
            (
                "/v1beta/models/gemini-2.5-flash:generateContent",
                Some(gemini::API),
            ),
            ("/v1/models", None),
            ("/repos/a/b/issues", None),
            ("/v1/models/x:countTokens", None),
        ];
        for (path, api) in cases {
            assert_eq!(llm_api(path), api, "{path}");
        }
    }

    #[test]
    fn each_protocol_has_its_own_name_and_at_most_one_api_claims_a_path() {
        let mut names: Vec<_> = REGISTRY.iter().map(|u| u.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len());
        for u in REGISTRY {
            if let Kind::Llm(api) = u.kind {
                assert_eq!(api.name(), u.name, "the API is named as its line");
            }
        }
        for path in [
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/embeddings",
            "/v1/messages",
            "/v1beta/models/m:generateContent",
        ] {
            assert_eq!(
                llm_apis().filter(|a| a.recognises(path)).count(),
                1,
                "{path}"
            );
        }
    }
}
