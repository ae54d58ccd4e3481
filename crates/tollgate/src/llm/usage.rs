//! The usage an answer reports, in one shape whatever the provider: OpenAI's
//! `prompt_tokens`/`completion_tokens` (chat, embeddings) or `input_tokens`/`output_tokens`
//! (Responses), Anthropic's `input_tokens` with its cache reads and writes counted
//! beside it, Gemini's `usageMetadata`.

use super::Api;
use serde::Serialize;
use serde_json::Value;

/// Tokens of one call. `input` counts every prompt token (the cached and cache-written
/// ones included); `output` every generated one (reasoning included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// Prompt tokens read from the provider's cache (part of `input`).
    pub cached: u64,
    /// Prompt tokens written to the provider's cache (Anthropic; part of `input`).
    pub cache_write: u64,
    /// Reasoning tokens (part of `output`).
    pub reasoning: u64,
}

impl Usage {
    /// Prompt and output together; a provider's absurd counts (2^63 each) saturate at
    /// `u64::MAX` rather than wrapping to a small number.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// What one usage object says; a field it lacks stays `None` (a stream's events each
/// tell part of it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cached: Option<u64>,
    pub cache_write: Option<u64>,
    pub reasoning: Option<u64>,
}

fn n(v: &Value, path: &[&str]) -> Option<u64> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_u64()
}

impl Reported {
    /// Reads `usage` (OpenAI, Anthropic) or `usageMetadata` (Gemini) as `api` writes it.
    pub fn read(api: Api, u: &Value) -> Option<Reported> {
        if !u.is_object() {
            return None;
        }
        let r = match api {
            Api::OpenAiChat | Api::OpenAiEmbeddings | Api::OpenAiResponses => Reported {
                input: n(u, &["prompt_tokens"]).or(n(u, &["input_tokens"])),
                output: n(u, &["completion_tokens"]).or(n(u, &["output_tokens"])),
                cached: n(u, &["prompt_tokens_details", "cached_tokens"])
                    .or(n(u, &["input_tokens_details", "cached_tokens"])),
                cache_write: None,
                reasoning: n(u, &["completion_tokens_details", "reasoning_tokens"])
                    .or(n(u, &["output_tokens_details", "reasoning_tokens"])),
            },
            Api::Anthropic => {
                let read = n(u, &["cache_read_input_tokens"]);
                let write = n(u, &["cache_creation_input_tokens"]);
                Reported {
                    // Anthropic's `input_tokens` leaves out the cache's reads and writes.
                    input: n(u, &["input_tokens"]).map(|i| {
                        i.saturating_add(read.unwrap_or(0))
                            .saturating_add(write.unwrap_or(0))
                    }),
                    output: n(u, &["output_tokens"]),
                    cached: read,
                    cache_write: write,
                    reasoning: None,
                }
            }
            Api::Gemini => {
                let thoughts = n(u, &["thoughtsTokenCount"]);
                let candidates = n(u, &["candidatesTokenCount"]);
                Reported {
                    input: n(u, &["promptTokenCount"]),
                    // Gemini counts thinking apart from the answer; both are billed as output.
                    output: match (candidates, thoughts) {
                        (None, None) => None,
                        (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
                    },
                    cached: n(u, &["cachedContentTokenCount"]),
                    cache_write: None,
                    reasoning: thoughts,
                }
            }
        };
        Some(r)
    }

    /// `later`'s fields over this one's (a later event of the same stream).
    pub fn merge(&mut self, later: Reported) {
        let take = |a: &mut Option<u64>, b: Option<u64>| {
            if b.is_some() {
                *a = b;
            }
        };
        take(&mut self.input, later.input);
        take(&mut self.output, later.output);
        take(&mut self.cached, later.cached);
        take(&mut self.cache_write, later.cache_write);
        take(&mut self.reasoning, later.reasoning);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_provider_reads_into_one_shape() {
        let chat = json!({"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 3},
            "completion_tokens_details": {"reasoning_tokens": 4}});
        let r = Reported::read(Api::OpenAiChat, &chat).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.reasoning),
            (Some(19), Some(10), Some(3), Some(4))
        );
        let responses = json!({"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0}});
        let r = Reported::read(Api::OpenAiResponses, &responses).unwrap();
        assert_eq!((r.input, r.output), (Some(36), Some(87)));
        let anthropic = json!({"input_tokens": 10, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 5, "output_tokens": 7});
        let r = Reported::read(Api::Anthropic, &anthropic).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.cache_write),
            (Some(115), Some(7), Some(100), Some(5))
        );
        let gemini = json!({"promptTokenCount": 8, "candidatesTokenCount": 20,
            "thoughtsTokenCount": 5, "cachedContentTokenCount": 2, "totalTokenCount": 33});
        let r = Reported::read(Api::Gemini, &gemini).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.reasoning),
            (Some(8), Some(25), Some(2), Some(5))
        );
        assert!(Reported::read(Api::OpenAiChat, &Value::Null).is_none());
    }

    #[test]
    fn absurd_counts_saturate_rather_than_wrap() {
        let huge = 1u64 << 63;
        let chat = json!({"prompt_tokens": huge, "completion_tokens": huge});
        let r = Reported::read(Api::OpenAiChat, &chat).unwrap();
        let u = Usage {
            input: r.input.unwrap(),
            output: r.output.unwrap(),
            ..Usage::default()
        };
        assert_eq!(u.total(), u64::MAX);
        let anthropic = json!({"input_tokens": huge, "cache_read_input_tokens": huge,
            "cache_creation_input_tokens": huge, "output_tokens": 1});
        let r = Reported::read(Api::Anthropic, &anthropic).unwrap();
        assert_eq!(r.input, Some(u64::MAX));
        let gemini = json!({"candidatesTokenCount": huge, "thoughtsTokenCount": huge});
        assert_eq!(
            Reported::read(Api::Gemini, &gemini).unwrap().output,
            Some(u64::MAX)
        );
    }
}
