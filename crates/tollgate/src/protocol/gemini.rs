//! Google's Gemini `generateContent` / `streamGenerateContent`: the model named in the
//! path, the usage in `usageMetadata`, each chunk of a stream telling the count so far.

use super::{Kind, Unit};
use crate::llm::body::{CAP, json_value};
use crate::llm::request::Head;
use crate::llm::scan::Scan;
use crate::llm::sse::Event;
use crate::llm::usage::{Counts, Reported};
use crate::llm::{Api, Meter, Shape};

pub const API: Api = Api::new("gemini", &Gemini);

pub const UNIT: Unit = Unit {
    name: API.name(),
    title: "Gemini",
    recognised_by: "`POST`, path ending `:generateContent` or `:streamGenerateContent`",
    answer: "`usageMetadata` and `modelVersion` (each chunk of a stream carries the count so far)",
    policies: super::LLM_POLICIES,
    kind: Kind::Llm(API),
};

pub struct Gemini;

const KEYS: &[&str] = &["usageMetadata", "modelVersion"];

impl Shape for Gemini {
    fn recognises(&self, path: &str) -> bool {
        path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent")
    }

    /// Its models' tokenizers are not public: prompts are estimated.
    fn public_tokenizer(&self) -> bool {
        false
    }

    /// `/v1beta/models/{model}:generateContent`.
    fn model<'a>(&self, path: &'a str, _head: &'a Head) -> Option<&'a str> {
        path.rsplit('/').next()?.split(':').next()
    }

    fn streams(&self, path: &str, _head: &Head) -> bool {
        path.ends_with(":streamGenerateContent")
    }

    fn choices(&self, head: &Head) -> Option<u64> {
        head.candidate_count
    }

    fn answer_keys(&self) -> &'static [&'static str] {
        KEYS
    }

    /// A chunk's count is the count so far, never the final word by itself (the
    /// answer's end says it was whole).
    fn final_usage(&self, _event: Option<&[u8]>) -> bool {
        false
    }

    fn event(&self, meter: &Meter, e: &Event) -> bool {
        let mut scan = Scan::new(KEYS, CAP);
        scan.feed(&e.data);
        let mut told = false;
        for (k, v) in scan.found.drain(..) {
            told |= k == 0;
            json_value(meter, k, &v);
        }
        if !told {
            meter.update(|m| m.chunks += 1);
        }
        false
    }

    fn reported(&self, c: &Counts) -> Reported {
        let thoughts = c.thoughts_token_count;
        let candidates = c.candidates_token_count;
        Reported {
            input: c.prompt_token_count,
            // Gemini counts thinking apart from the answer; both are billed as output.
            output: match (candidates, thoughts) {
                (None, None) => None,
                (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
            },
            cached: c.cached_content_token_count,
            cache_write: None,
            reasoning: thoughts,
        }
    }

    fn path_with_model(&self, pq: &str, model: &str) -> Option<String> {
        let Some(i) = pq.find("/models/") else {
            return Some(pq.to_owned());
        };
        let start = i + "/models/".len();
        Some(match pq[start..].find(':') {
            Some(j) => format!("{}{model}{}", &pq[..start], &pq[start + j..]),
            None => pq.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_in_the_path() {
        let path = "/v1beta/models/gemini-2.5-pro:generateContent";
        assert_eq!(Gemini.model(path, &Head::default()), Some("gemini-2.5-pro"));
        assert_eq!(
            Gemini.path_with_model(
                "/v1beta/models/gemini-2.5-pro:generateContent?alt=sse",
                "gemini-2.5-flash"
            ),
            Some("/v1beta/models/gemini-2.5-flash:generateContent?alt=sse".to_owned())
        );
    }
}
