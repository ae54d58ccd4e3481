//! LLM calls: which APIs are recognised, what a request asks (model, streaming, output
//! cap, an estimate of its prompt's tokens), and the usage its answer reports, taken as
//! the answer streams past ([`body::Metered`]) without holding it back. The remedies that
//! count tokens and money (`token_limit`, `budget`), the fallback across models and
//! diagnosis all read the one [`Meter`] a call carries (docs/llm.md).

pub mod body;
pub mod decode;
pub mod meter;
pub mod prices;
pub mod request;
pub mod scan;
pub mod sse;
pub mod tokens;
pub mod usage;

pub use meter::{Meter, Metered, Saved};
pub use request::Call;
pub use usage::Usage;

/// An API whose answers report usage, recognised by the request's path (any host: the
/// many providers copying OpenAI's shape — vLLM, Ollama, Groq, Together, OpenRouter —
/// serve the same paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI's chat completions (`…/chat/completions`) and legacy completions.
    OpenAiChat,
    /// OpenAI's Responses API (`…/responses`).
    OpenAiResponses,
    /// OpenAI's embeddings (`…/embeddings`).
    OpenAiEmbeddings,
    /// Anthropic's Messages API (`…/messages`).
    Anthropic,
    /// Google's Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl Api {
    /// The API a `POST` to `path` calls, if any.
    pub fn of_path(path: &str) -> Option<Api> {
        let path = path.trim_end_matches('/');
        if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
            return Some(Api::Gemini);
        }
        let last = path.rsplit('/').next().unwrap_or("");
        Some(match last {
            "completions" => Api::OpenAiChat,
            "responses" => Api::OpenAiResponses,
            "embeddings" => Api::OpenAiEmbeddings,
            "messages" => Api::Anthropic,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai.chat",
            Api::OpenAiResponses => "openai.responses",
            Api::OpenAiEmbeddings => "openai.embeddings",
            Api::Anthropic => "anthropic.messages",
            Api::Gemini => "gemini",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Api;

    #[test]
    fn apis_are_known_by_their_paths() {
        let cases = [
            ("/v1/chat/completions", Some(Api::OpenAiChat)),
            ("/openai/v1/chat/completions", Some(Api::OpenAiChat)),
            ("/v1/completions", Some(Api::OpenAiChat)),
            ("/v1/responses", Some(Api::OpenAiResponses)),
            ("/v1/embeddings", Some(Api::OpenAiEmbeddings)),
            ("/v1/messages", Some(Api::Anthropic)),
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                Some(Api::Gemini),
            ),
            (
                "/v1beta/models/gemini-2.5-flash:generateContent",
                Some(Api::Gemini),
            ),
            ("/v1/models", None),
            ("/repos/a/b/issues", None),
        ];
        for (path, api) in cases {
            assert_eq!(Api::of_path(path), api, "{path}");
        }
    }
}
