//! The usage an answer reports, in one shape whatever the provider: OpenAI's
//! `prompt_tokens`/`completion_tokens` (chat, embeddings) or `input_tokens`/`output_tokens`
//! (Responses), Anthropic's `input_tokens` with its cache reads and writes counted
//! beside it, Gemini's `usageMetadata`.

use super::Api;
use serde::{Deserialize, Serialize};
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

/// Every count a usage object of any API may hold, read straight from its JSON (no
/// `Value` tree): a field that is absent, `null` or not a whole number is `None`, and any
/// other field is skipped.
#[derive(Default, serde::Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
#[serde(default)]
struct Fields {
    prompt_tokens: Count,
    completion_tokens: Count,
    input_tokens: Count,
    output_tokens: Count,
    prompt_tokens_details: Details,
    input_tokens_details: Details,
    completion_tokens_details: Details,
    output_tokens_details: Details,
    cache_read_input_tokens: Count,
    cache_creation_input_tokens: Count,
    #[serde(rename = "promptTokenCount")]
    prompt_token_count: Count,
    #[serde(rename = "candidatesTokenCount")]
    candidates_token_count: Count,
    #[serde(rename = "thoughtsTokenCount")]
    thoughts_token_count: Count,
    #[serde(rename = "cachedContentTokenCount")]
    cached_content_token_count: Count,
}

#[derive(Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Details {
    cached_tokens: Count,
    reasoning_tokens: Count,
}

/// A whole number of tokens, or `None` for anything else in its place.
#[derive(Default, Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Count(Option<u64>);

impl<'de> serde::Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E>(self, n: u64) -> Result<Count, E> {
                Ok(Count(Some(n)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(n).ok()))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_unit<E>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_none<E>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Count, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Count(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Count, A::Error> {
                while a
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Count(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for Details {
    /// The two counts of a `…_details` object; anything else in its place counts none.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum Key {
            CachedTokens,
            ReasoningTokens,
            #[serde(other)]
            Other,
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Details;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("token details")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Details, A::Error> {
                let mut d = Details::default();
                while let Some(k) = a.next_key::<Key>()? {
                    match k {
                        Key::CachedTokens => d.cached_tokens = a.next_value()?,
                        Key::ReasoningTokens => d.reasoning_tokens = a.next_value()?,
                        Key::Other => {
                            a.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(d)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Details, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Details::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Details, E> {
                Ok(Details::default())
            }
            fn visit_unit<E>(self) -> Result<Details, E> {
                Ok(Details::default())
            }
        }
        d.deserialize_any(V)
    }
}

impl Reported {
    /// Reads `usage` (OpenAI, Anthropic) or `usageMetadata` (Gemini) as `api` writes it.
    pub fn read(api: Api, u: &Value) -> Option<Reported> {
        if !u.is_object() {
            return None;
        }
        Some(Fields::deserialize(u).ok()?.reported(api))
    }

    /// [`Reported::read`] of the JSON text of a usage object, parsed straight into the
    /// counts.
    pub fn parse(api: Api, json: &[u8]) -> Option<Reported> {
        // An object only: a struct would also take an array, field by field.
        if json.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        let fields = match by_hand(json) {
            Some(f) => f,
            None => serde_json::from_slice::<Fields>(json).ok()?,
        };
        Some(fields.reported(api))
    }

    /// [`Reported::parse`] of the usage object at the start of `b` (JSON text that goes
    /// on after it), read by hand where it reads it; with the object's length. `None`
    /// where the hand pass is not sure (see [`by_hand`]): the caller then delimits the
    /// object and parses it with [`Reported::parse`].
    pub fn parse_prefix(api: Api, b: &[u8]) -> Option<(Reported, usize)> {
        if b.first() != Some(&b'{') {
            return None;
        }
        let (fields, end) = hand_fields(b)?;
        Some((fields.reported(api), end))
    }
}

/// [`Fields`] of the object at the start of `b` by hand, and where it ends.
fn hand_fields(b: &[u8]) -> Option<(Fields, usize)> {
    use crate::json::walk::{SERDE_DEPTH, Walk};
    let mut p = Walk::new(b, SERDE_DEPTH);
    let f = hand_object(&mut p)?;
    // Stricter than serde_json, which checks only the strings it decodes: unsure, not
    // wrong.
    std::str::from_utf8(&b[..p.i]).ok()?;
    Some((f, p.i))
}

/// [`Fields`] of a usage object read in one pass by hand ([`crate::json::walk`]): what
/// serde_json would make of it, or `None` where the pass is not sure (a key or a watched
/// string with an escape, a count written twice, malformed text, anything past
/// serde_json's nesting limit), and serde_json reads it instead. A test holds the two to
/// the same counts on generated objects.
fn by_hand(json: &[u8]) -> Option<Fields> {
    use crate::json::walk::{SERDE_DEPTH, Walk};
    // Stricter than serde_json, which checks only the strings it decodes: unsure, not wrong.
    std::str::from_utf8(json).ok()?;
    let mut p = Walk::new(json, SERDE_DEPTH);
    p.ws();
    let f = hand_object(&mut p)?;
    p.ends().then_some(f)
}

/// The usage object at the walk's position, by hand.
fn hand_object(p: &mut crate::json::walk::Walk) -> Option<Fields> {
    let mut f = Fields::default();
    // The fields seen: serde refuses one written twice.
    let mut seen = 0u16;
    p.object(1, |p, key| {
        let (bit, count) = match key {
            b"prompt_tokens" => (0, &mut f.prompt_tokens),
            b"completion_tokens" => (1, &mut f.completion_tokens),
            b"input_tokens" => (2, &mut f.input_tokens),
            b"output_tokens" => (3, &mut f.output_tokens),
            b"cache_read_input_tokens" => (4, &mut f.cache_read_input_tokens),
            b"cache_creation_input_tokens" => (5, &mut f.cache_creation_input_tokens),
            b"promptTokenCount" => (6, &mut f.prompt_token_count),
            b"candidatesTokenCount" => (7, &mut f.candidates_token_count),
            b"thoughtsTokenCount" => (8, &mut f.thoughts_token_count),
            b"cachedContentTokenCount" => (9, &mut f.cached_content_token_count),
            _ => {
                let (bit, details) = match key {
                    b"prompt_tokens_details" => (10, &mut f.prompt_tokens_details),
                    b"input_tokens_details" => (11, &mut f.input_tokens_details),
                    b"completion_tokens_details" => (12, &mut f.completion_tokens_details),
                    b"output_tokens_details" => (13, &mut f.output_tokens_details),
                    _ => return p.value(1),
                };
                seen = once(seen, bit)?;
                return hand_details(p, details);
            }
        };
        seen = once(seen, bit)?;
        *count = hand_count(p, 1)?;
        Some(())
    })?;
    Some(f)
}

/// `seen` with field `bit` added; `None` when it was there already.
fn once(seen: u16, bit: u8) -> Option<u16> {
    (seen & 1 << bit == 0).then_some(seen | 1 << bit)
}

/// A [`Count`] by hand, inside a container at nesting `depth`.
fn hand_count(p: &mut crate::json::walk::Walk, depth: usize) -> Option<Count> {
    match p.peek()? {
        b'-' | b'0'..=b'9' => {
            let start = p.i;
            p.number()?;
            // serde_json (`arbitrary_precision`) gives a whole number that fits a `u64`
            // as one; a negative one, a fraction, an exponent or a larger one is none.
            let n = p.b[start..p.i].iter().try_fold(0u64, |n, &c| {
                let d = c.wrapping_sub(b'0');
                (d < 10).then(|| n.checked_mul(10)?.checked_add(d.into()))?
            });
            Some(Count(n))
        }
        // serde_json decodes a string in this place: one with an escape may be refused.
        b'"' => (!p.string()?).then_some(Count(None)),
        _ => p.value(depth).map(|()| Count(None)),
    }
}

/// [`Details`] by hand: an object's two counts (the last of each written), anything else
/// none.
fn hand_details(p: &mut crate::json::walk::Walk, d: &mut Details) -> Option<()> {
    match p.peek()? {
        b'{' => {
            let mut read = Details::default();
            p.object(2, |p, key| match key {
                b"cached_tokens" => hand_count(p, 2).map(|c| read.cached_tokens = c),
                b"reasoning_tokens" => hand_count(p, 2).map(|c| read.reasoning_tokens = c),
                _ => p.value(2),
            })?;
            *d = read;
            Some(())
        }
        b'"' => (!p.string()?).then_some(()),
        _ => p.value(1),
    }
}

/// Every count a usage object of any API may hold, by its key (a `…_details` count by
/// its path): what a [`super::Shape`] makes its [`Reported`] of.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens`
    pub prompt_cached: Option<u64>,
    /// `input_tokens_details.cached_tokens`
    pub input_cached: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens`
    pub completion_reasoning: Option<u64>,
    /// `output_tokens_details.reasoning_tokens`
    pub output_reasoning: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
    /// Gemini's `promptTokenCount`
    pub prompt_token_count: Option<u64>,
    /// Gemini's `candidatesTokenCount`
    pub candidates_token_count: Option<u64>,
    /// Gemini's `thoughtsTokenCount`
    pub thoughts_token_count: Option<u64>,
    /// Gemini's `cachedContentTokenCount`
    pub cached_content_token_count: Option<u64>,
}

impl Fields {
    fn reported(self, api: Api) -> Reported {
        let f = self;
        api.reported(&Counts {
            prompt_tokens: f.prompt_tokens.0,
            completion_tokens: f.completion_tokens.0,
            input_tokens: f.input_tokens.0,
            output_tokens: f.output_tokens.0,
            prompt_cached: f.prompt_tokens_details.cached_tokens.0,
            input_cached: f.input_tokens_details.cached_tokens.0,
            completion_reasoning: f.completion_tokens_details.reasoning_tokens.0,
            output_reasoning: f.output_tokens_details.reasoning_tokens.0,
            cache_read_input_tokens: f.cache_read_input_tokens.0,
            cache_creation_input_tokens: f.cache_creation_input_tokens.0,
            prompt_token_count: f.prompt_token_count.0,
            candidates_token_count: f.candidates_token_count.0,
            thoughts_token_count: f.thoughts_token_count.0,
            cached_content_token_count: f.cached_content_token_count.0,
        })
    }
}

impl Reported {
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
        let r = Reported::read(crate::protocol::openai_chat::API, &chat).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.reasoning),
            (Some(19), Some(10), Some(3), Some(4))
        );
        let responses = json!({"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0}});
        let r = Reported::read(crate::protocol::openai_responses::API, &responses).unwrap();
        assert_eq!((r.input, r.output), (Some(36), Some(87)));
        let anthropic = json!({"input_tokens": 10, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 5, "output_tokens": 7});
        let r = Reported::read(crate::protocol::anthropic_messages::API, &anthropic).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.cache_write),
            (Some(115), Some(7), Some(100), Some(5))
        );
        let gemini = json!({"promptTokenCount": 8, "candidatesTokenCount": 20,
            "thoughtsTokenCount": 5, "cachedContentTokenCount": 2, "totalTokenCount": 33});
        let r = Reported::read(crate::protocol::gemini::API, &gemini).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.reasoning),
            (Some(8), Some(25), Some(2), Some(5))
        );
        assert!(Reported::read(crate::protocol::openai_chat::API, &Value::Null).is_none());
        // The text read straight gives what its `Value` gives.
        for (api, v) in [
            (crate::protocol::openai_chat::API, &chat),
            (crate::protocol::openai_responses::API, &responses),
            (crate::protocol::anthropic_messages::API, &anthropic),
            (crate::protocol::gemini::API, &gemini),
        ] {
            let text = v.to_string();
            assert_eq!(
                Reported::parse(api, text.as_bytes()),
                Reported::read(api, v)
            );
        }
    }

    /// Whether the hand read `json`; when it did, serde_json reads the same.
    fn agrees(json: &[u8]) -> bool {
        match by_hand(json) {
            Some(f) => {
                let by_serde = serde_json::from_slice::<Fields>(json);
                let text = String::from_utf8_lossy(json);
                assert_eq!(Some(f), by_serde.ok(), "{text}");
                true
            }
            None => false,
        }
    }

    #[test]
    fn what_the_hand_reads_serde_reads_the_same_on_generated_usage() {
        const BASES: &[&str] = &[
            r#"{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":4,"audio_tokens":0,"accepted_prediction_tokens":0}}"#,
            r#" { "input_tokens" : 36 , "input_tokens_details" : { "cached_tokens" : 0 } , "output_tokens" : 87 , "output_tokens_details" : { "reasoning_tokens" : 0 } } "#,
            r#"{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":7,"server_tool_use":{"web_search_requests":[1,"x",null,true]}}"#,
            r#"{"promptTokenCount":8,"candidatesTokenCount":20,"thoughtsTokenCount":5,"cachedContentTokenCount":2,"totalTokenCount":33,"promptTokensDetails":[{"modality":"TEXT","tokenCount":8}]}"#,
            r#"{"prompt_tokens":null,"completion_tokens":2.5,"input_tokens":"7","output_tokens":-1,"prompt_tokens_details":[1],"completion_tokens_details":{"reasoning_tokens":4,"reasoning_tokens":5}}"#,
        ];
        const SNIPPETS: &[&str] = &[
            r#""prompt_tokens":1,"#,
            r#""cached_tokens":2,"#,
            r#""input_tokens_details":{},"#,
            r#""pr\u006fmpt_tokens":3,"#,
            "1e2",
        ];
        crate::json::mutants::check_mutants(BASES, SNIPPETS, 40_000, agrees);
    }

    #[test]
    fn what_is_not_a_count_counts_none_and_the_rest_is_read() {
        let odd = br#" {"prompt_tokens": null, "completion_tokens": 2.5, "input_tokens": "7",
            "output_tokens": -1, "prompt_tokens_details": [1], "x": {"y": [{"z": 1}]},
            "completion_tokens_details": {"reasoning_tokens": 4, "other": {"a": 1}},
            "total_tokens": 9}"#;
        let r = Reported::parse(crate::protocol::openai_chat::API, odd).unwrap();
        assert_eq!(
            (r.input, r.output, r.cached, r.reasoning),
            (None, None, None, Some(4))
        );
        assert!(Reported::parse(crate::protocol::openai_chat::API, b"[19, 10]").is_none());
        assert!(
            Reported::parse(crate::protocol::openai_chat::API, b"{\"prompt_tokens\": 1").is_none()
        );
    }

    #[test]
    fn absurd_counts_saturate_rather_than_wrap() {
        let huge = 1u64 << 63;
        let chat = json!({"prompt_tokens": huge, "completion_tokens": huge});
        let r = Reported::read(crate::protocol::openai_chat::API, &chat).unwrap();
        let u = Usage {
            input: r.input.unwrap(),
            output: r.output.unwrap(),
            ..Usage::default()
        };
        assert_eq!(u.total(), u64::MAX);
        let anthropic = json!({"input_tokens": huge, "cache_read_input_tokens": huge,
            "cache_creation_input_tokens": huge, "output_tokens": 1});
        let r = Reported::read(crate::protocol::anthropic_messages::API, &anthropic).unwrap();
        assert_eq!(r.input, Some(u64::MAX));
        let gemini = json!({"candidatesTokenCount": huge, "thoughtsTokenCount": huge});
        assert_eq!(
            Reported::read(crate::protocol::gemini::API, &gemini)
                .unwrap()
                .output,
            Some(u64::MAX)
        );
    }
}
