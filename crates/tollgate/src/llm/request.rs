//! What an LLM request asks, read once from its JSON body on admission: the model, whether
//! it streams, its output cap, and an estimate of its prompt's tokens; and, for an OpenAI
//! chat stream that does not ask for its usage, `stream_options.include_usage` added.

use super::meter::{Meter, Metered};
use super::{Api, tokens};
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use tokio::time::Instant;

/// One LLM call, as its request phase found it (a per-request local of the exchange).
pub struct Call {
    pub api: Api,
    pub model: Option<Arc<str>>,
    pub stream: bool,
    /// `max_tokens`, `max_completion_tokens`, `max_output_tokens` or Gemini's
    /// `generationConfig.maxOutputTokens`.
    pub max_output: Option<u64>,
    /// Answers generated per call: OpenAI's `n` (or `best_of`, which generates that many
    /// and returns the best), Gemini's `generationConfig.candidateCount`; 1 when unset.
    /// Each is billed its own output, so the reservation holds the cap this many times.
    pub choices: u64,
    /// The prompt's tokens, estimated ([`tokens`]): approximated when read, counted
    /// exactly by [`Call::count_prompt`].
    pub input_estimate: u64,
    /// The policy counts prompts with the model's tokenizer where it has one.
    pub tokenizer: bool,
    /// The prompt as the request's read collected it, its text kept when the policy
    /// counts prompts (`Settings::keep_prompt`): counted without reading the body again.
    pub prompt: Option<tokens::Prompt>,
    /// [`Call::count_prompt`] ran.
    pub counted: bool,
    /// `include_usage` was added: the usage chunk is removed from what the client gets.
    pub strip_usage: bool,
    pub meter: Arc<Meter>,
    /// When the request phase read it (time to first byte counts from here).
    pub started: Instant,
    /// The answer's body is read for usage already (one reader whichever remedy set it).
    pub metering: bool,
    /// Output tokens reserved when the request sets no cap (`llm.output_estimate`).
    pub output_estimate: u64,
    /// The policy's price table.
    pub prices: Arc<super::prices::Prices>,
}

impl Call {
    /// Counts the prompt of the request's `body` with the model's tokenizer (loading it
    /// the first time), when the policy asks for it and the model has one: for a remedy
    /// that reserves the estimate; once per call. A call that only reads its usage never
    /// looks the tokenizer up.
    pub fn count_prompt(&mut self, body: Option<&Bytes>) -> super::counts::Strings {
        let mut strings = super::counts::Strings::default();
        if std::mem::replace(&mut self.counted, true) || !self.tokenizer {
            return strings;
        }
        let Some(encoding) = self.model.as_deref().and_then(tokens::Encoding::of) else {
            return strings;
        };
        let n = match self.prompt.take().filter(tokens::Prompt::kept) {
            Some(kept) => kept.count(encoding, &mut strings),
            None => match body {
                Some(body) => top(body, true).1.count(encoding, &mut strings),
                None => return strings,
            },
        };
        self.input_estimate = n;
        self.meter.update(|m| m.input_estimate = n);
        strings
    }

    /// The usage to reserve on admission: the prompt's estimate and the output cap (or
    /// `llm.output_estimate` when the request sets none) for each of its choices.
    pub fn reserve(&self) -> super::Usage {
        super::Usage {
            input: self.input_estimate,
            output: output_reserve(self.max_output, self.output_estimate, self.choices),
            ..Default::default()
        }
    }
}

/// The output a call reserves: its cap (or `estimate` when it sets none) for each of its
/// `choices`.
fn output_reserve(max_output: Option<u64>, estimate: u64, choices: u64) -> u64 {
    max_output.unwrap_or(estimate).saturating_mul(choices)
}

/// The top-level fields of a request that the shapes read, as serde_json reads them
/// (`Value::as_str`, `as_bool`, `as_u64` of each): a field that is absent or of another
/// type is `None`. The last of a key written twice counts, as in a parsed map.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Head {
    /// Shared with the call and its meter as it is (one allocation for the name).
    pub model: Option<Arc<str>>,
    pub stream: Option<bool>,
    /// `stream_options` is there, whatever its value.
    pub stream_options: bool,
    /// `stream_options.include_usage`.
    pub include_usage: Option<bool>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub n: Option<u64>,
    pub best_of: Option<u64>,
    /// Gemini's `generationConfig.maxOutputTokens`.
    pub max_output_tokens_gemini: Option<u64>,
    /// Gemini's `generationConfig.candidateCount`.
    pub candidate_count: Option<u64>,
}

impl Head {
    /// The head of a whole request `v` (nothing when it is not an object).
    fn of(v: &Value) -> Self {
        let mut h = Self::default();
        for k in HEAD {
            if let Some(v) = v.get(k) {
                h.set(k.as_bytes(), v.clone());
            }
        }
        h
    }

    /// Top-level field `key` (one of [`HEAD`]) is `v`.
    fn set(&mut self, key: &[u8], v: Value) {
        let n = v.as_u64();
        match key {
            b"model" => {
                self.model = match v {
                    Value::String(s) => Some(s.into()),
                    _ => None,
                }
            }
            b"stream" => self.stream = v.as_bool(),
            b"stream_options" => {
                self.stream_options = true;
                self.include_usage = v.get("include_usage").and_then(Value::as_bool);
            }
            b"max_tokens" => self.max_tokens = n,
            b"max_completion_tokens" => self.max_completion_tokens = n,
            b"max_output_tokens" => self.max_output_tokens = n,
            b"n" => self.n = n,
            b"best_of" => self.best_of = n,
            b"generationConfig" => {
                let field = |k| v.get(k).and_then(Value::as_u64);
                self.max_output_tokens_gemini = field("maxOutputTokens");
                self.candidate_count = field("candidateCount");
            }
            _ => {}
        }
    }

    /// Top-level field `key` (one of [`HEAD`]) is the scalar `v`, as [`Head::set`] reads
    /// its `Value`: no `Value` made (nor, for a number, the text `arbitrary_precision`
    /// keeps of it).
    fn set_scalar(&mut self, key: &[u8], v: Scalar) {
        match (key, v) {
            (b"model", Scalar::Str(s)) => self.model = Some(super::names::shared(s)),
            (b"stream", Scalar::Bool(b)) => self.stream = Some(b),
            (b"stream_options" | b"generationConfig", v) => self.set(key, v.value()),
            (b"max_tokens", Scalar::Whole(n)) => self.max_tokens = Some(n),
            (b"max_completion_tokens", Scalar::Whole(n)) => self.max_completion_tokens = Some(n),
            (b"max_output_tokens", Scalar::Whole(n)) => self.max_output_tokens = Some(n),
            (b"n", Scalar::Whole(n)) => self.n = Some(n),
            (b"best_of", Scalar::Whole(n)) => self.best_of = Some(n),
            // Of another type than the field's: none, as `Value::as_*` gives.
            (k, _) => self.set(k, Value::Null),
        }
    }
}

/// A head field's value of a common kind, read straight from the text.
enum Scalar<'a> {
    /// A string without escapes: its bytes are its text.
    Str(&'a str),
    Bool(bool),
    /// A whole number written as serde_json writes a `u64`.
    Whole(u64),
}

impl Scalar<'_> {
    fn value(self) -> Value {
        match self {
            Scalar::Str(s) => Value::String(s.to_owned()),
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Whole(n) => Value::from(n),
        }
    }
}

/// What reading a request gave: the call, and the body to send instead when
/// `include_usage` was added.
pub struct Read {
    pub call: Call,
    pub body: Option<Bytes>,
}

/// How a policy reads its LLM requests.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Add `stream_options.include_usage` to an OpenAI chat stream lacking it.
    pub add_stream_usage: bool,
    /// Let [`Call::count_prompt`] count the prompt where the model has a public
    /// tokenizer (the estimate is a quarter of the text's bytes until then).
    pub tokenizer: bool,
    /// Keep the prompt's text for that count (a remedy of the policy counts it).
    pub keep_prompt: bool,
    /// Output tokens reserved when the request sets no cap (`llm.output_estimate`).
    pub output_estimate: u64,
    /// The policy's price table, given to the call and its meter as they are made.
    pub prices: Arc<super::prices::Prices>,
}

/// Reads the request `body` of a call to `api` at `path` as `reading` says.
pub fn read(api: Api, path: &str, body: Option<&Bytes>, reading: Reading) -> Read {
    let (add_usage, tokenizer) = (reading.add_stream_usage, reading.tokenizer);
    let keep = tokenizer && reading.keep_prompt && api.public_tokenizer();
    let (head, prompt) = body.map(|b| top(b, keep)).unwrap_or_default();
    // The body's model shared as it was read; a model from the path (Gemini) made here.
    let model: Option<Arc<str>> = api.model(path, &head).map(|m| match &head.model {
        Some(h) if **h == *m => h.clone(),
        _ => Arc::from(m),
    });
    let stream = api.streams(path, &head);
    let max_output = head
        .max_tokens
        .or(head.max_completion_tokens)
        .or(head.max_output_tokens)
        .or(head.max_output_tokens_gemini);
    let choices = api.choices(&head).unwrap_or(1).max(1);
    let input_estimate = prompt.approximate();
    let asks_usage = head.include_usage.unwrap_or(false);
    let add = add_usage && api.adds_stream_usage() && stream && !asks_usage;
    let new_body = add.then(|| with_usage(body?, &head)).flatten();
    let output_estimate = reading.output_estimate;
    let meter = Meter::new(
        api,
        Metered {
            requested: model.clone(),
            input_estimate,
            prices: reading.prices.clone(),
            output_reserve: output_reserve(max_output, output_estimate, choices),
            ..Metered::default()
        },
    );
    Read {
        call: Call {
            api,
            model,
            stream,
            max_output,
            choices,
            input_estimate,
            tokenizer,
            prompt: keep.then_some(prompt),
            counted: false,
            strip_usage: new_body.is_some(),
            meter,
            started: Instant::now(),
            metering: false,
            output_estimate,
            prices: reading.prices,
        },
        body: new_body,
    }
}

/// The top-level fields [`read`] looks at ([`Head`]) and the prompt of the whole body
/// (its text kept when `keep`), in one pass that builds no `Value` of the rest: by hand
/// ([`by_hand`]), else through serde_json ([`by_serde`]).
fn top(body: &[u8], keep: bool) -> (Head, tokens::Prompt) {
    by_hand(body, keep).unwrap_or_else(|| by_serde(body, keep))
}

/// [`top`] by one hand pass over the body ([`crate::json::walk`]): what [`by_serde`]
/// gives, or `None` where the pass is not sure (a key with an escape, a string that
/// serde_json would not decode, malformed text, anything past serde_json's nesting
/// limit). A test holds the two to the same on generated requests.
fn by_hand(body: &[u8], keep: bool) -> Option<(Head, tokens::Prompt)> {
    use crate::json::walk::{SERDE_DEPTH, Walk};
    // Checked once (stricter than serde_json, which checks only what it decodes: unsure,
    // not wrong), so a plain string's bytes are its text.
    let text = std::str::from_utf8(body).ok()?;
    let mut p = Walk::new(body, SERDE_DEPTH);
    let mut prompt = tokens::Prompt::new(keep);
    let mut head = Head::default();
    let mut role = false;
    p.ws();
    p.object(1, |p, k| {
        role |= k == b"role";
        if is_head(k) {
            let start = p.i;
            p.value(1)?;
            match head_value(text.get(start..p.i)?)? {
                Ok(v) => {
                    if let (true, Scalar::Str(s)) = (tokens::is_text(k), &v) {
                        prompt.string(s);
                    }
                    head.set_scalar(k, v);
                }
                Err(v) => {
                    if tokens::is_text(k) {
                        prompt.collect(&v);
                    }
                    head.set(k, v);
                }
            }
            Some(())
        } else if tokens::is_text(k) {
            prompt_text(p, text, &mut prompt, 1)
        } else {
            p.value(1)
        }
    })?;
    if role {
        prompt.count_message();
    }
    p.ends().then_some((head, prompt))
}

/// A head field's value (`json`, checked by the walk): the common scalars read at once (a
/// string without escapes, a boolean, a whole number written plainly), the rest parsed
/// by serde_json.
fn head_value(json: &str) -> Option<Result<Scalar<'_>, Value>> {
    let b = json.as_bytes();
    match b {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => {
            Some(Ok(Scalar::Str(json.get(1..json.len() - 1)?)))
        }
        b"true" => Some(Ok(Scalar::Bool(true))),
        b"false" => Some(Ok(Scalar::Bool(false))),
        // Written as `Number` writes it (no sign, fraction, exponent or leading zero), so
        // serde_json's `as_u64` of it is this.
        [b'1'..=b'9', rest @ ..] if rest.len() < 19 && rest.iter().all(u8::is_ascii_digit) => {
            json.parse::<u64>().ok().map(|n| Ok(Scalar::Whole(n)))
        }
        _ => serde_json::from_str(json).ok().map(Err),
    }
}

/// Whether top-level key `k` is one of [`HEAD`]: one `match` rather than a pass over the
/// list for each key (a test holds the two to the same).
fn is_head(k: &[u8]) -> bool {
    matches!(
        k,
        b"model"
            | b"stream"
            | b"stream_options"
            | b"max_tokens"
            | b"max_completion_tokens"
            | b"max_output_tokens"
            | b"n"
            | b"best_of"
            | b"generationConfig"
    )
}

/// A value's prompt text, as [`tokens::Walk`] collects it, by hand: the value is inside a
/// container at nesting `depth`.
fn prompt_text(
    p: &mut crate::json::walk::Walk,
    text: &str,
    prompt: &mut tokens::Prompt,
    depth: usize,
) -> Option<()> {
    match p.peek()? {
        b'"' => {
            let start = p.i;
            if p.string()? {
                // Decoded as serde_json decodes it (a lone surrogate is refused).
                let s: String = serde_json::from_str(text.get(start..p.i)?).ok()?;
                prompt.string(&s);
            } else {
                prompt.string(text.get(start + 1..p.i - 1)?);
            }
            Some(())
        }
        b'[' => p.array(depth + 1, |p| prompt_text(p, text, prompt, depth + 1)),
        b'{' => p.object(depth + 1, |p, k| {
            if k == b"role" {
                prompt.count_message();
            }
            // serde_json's private key of a number written exactly is no key of the
            // text's: one spelt so in the text is skipped as [`tokens::Walk`] skips it.
            if k.starts_with(b"$serde_json::") || !tokens::is_text(k) {
                p.value(depth + 1)
            } else {
                prompt_text(p, text, prompt, depth + 1)
            }
        }),
        _ => p.value(depth),
    }
}

/// [`top`] through serde_json: the top level as a map of [`Top`]; a body that is not a
/// JSON object is read whole as a `Value`.
fn by_serde(body: &[u8], keep: bool) -> (Head, tokens::Prompt) {
    let mut prompt = tokens::Prompt::new(keep);
    let mut head = serde_json::Map::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = serde::de::Deserializer::deserialize_map(
        &mut de,
        Top {
            prompt: &mut prompt,
            head: &mut head,
        },
    )
    .and_then(|()| de.end());
    match read {
        Ok(()) => (Head::of(&Value::Object(head)), prompt),
        Err(_) => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let prompt = tokens::Prompt::of(&v, keep);
            (Head::of(&v), prompt)
        }
    }
}

/// The top-level keys whose values [`read`] looks at.
const HEAD: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n",
    "best_of",
    "generationConfig",
];

struct Top<'a> {
    prompt: &'a mut tokens::Prompt,
    head: &'a mut serde_json::Map<String, Value>,
}

impl<'de> serde::de::Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let mut role = false;
        while let Some(k) = a.next_key::<tokens::Key<'de>>()? {
            let k = k.as_bytes();
            role |= k == b"role";
            if let Some(head) = HEAD.iter().find(|h| h.as_bytes() == k) {
                let v: Value = a.next_value()?;
                if tokens::is_text(k) {
                    self.prompt.collect(&v);
                }
                self.head.insert((*head).to_owned(), v);
            } else if tokens::is_text(k) {
                a.next_value_seed(tokens::Walk(&mut *self.prompt))?;
            } else {
                a.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        if role {
            self.prompt.count_message();
        }
        Ok(())
    }
}

/// The body with `"stream_options":{"include_usage":true}`: written in front of the
/// object's first key when the request has no `stream_options` (every other byte kept as
/// sent), else the object written again with the option set.
fn with_usage(body: &Bytes, head: &Head) -> Option<Bytes> {
    if !head.stream_options {
        let open = body.iter().position(|&c| c == b'{')?;
        let empty = body[open + 1..]
            .iter()
            .find(|c| !c.is_ascii_whitespace())
            .is_some_and(|&c| c == b'}');
        let mut out = Vec::with_capacity(body.len() + 40);
        out.extend_from_slice(&body[..=open]);
        out.extend_from_slice(br#""stream_options":{"include_usage":true}"#);
        if !empty {
            out.push(b',');
        }
        out.extend_from_slice(&body[open + 1..]);
        return Some(out.into());
    }
    // Written again whole: read it whole (a rare request: it sets `stream_options`
    // without `include_usage`).
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let opts = v.get_mut("stream_options")?.as_object_mut()?;
    opts.insert("include_usage".into(), Value::Bool(true));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(add_stream_usage: bool, tokenizer: bool) -> Reading {
        Reading {
            add_stream_usage,
            tokenizer,
            ..Reading::default()
        }
    }

    #[test]
    fn one_pass_reads_what_the_whole_value_gives() {
        let body = br#"{"messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi \"there\""},
              {"type": "image_url", "image_url": {"url": "data:xx"}}]},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}],
          "model": "gpt-4o", "stream": true, "max_tokens": 12345678901234567890,
          "n": 2.0, "temperature": 0.7, "user": "u-1", "metadata": {"k": "v"},
          "stream_options": {"include_usage": false}, "r\u006fle": "x"}"#;
        let v: Value = serde_json::from_slice(body).unwrap();
        for keep in [false, true] {
            let (head, prompt) = top(body, keep);
            let whole = tokens::Prompt::of(&v, keep);
            assert_eq!(prompt.approximate(), whole.approximate());
            let o200k = tokens::Encoding::of("gpt-4o").unwrap();
            let mut strings = crate::llm::counts::Strings::default();
            assert_eq!(
                prompt.count(o200k, &mut strings),
                whole.count(o200k, &mut strings)
            );
            assert_eq!(head, Head::of(&v));
            assert_eq!(
                head,
                Head {
                    model: Some("gpt-4o".into()),
                    stream: Some(true),
                    stream_options: true,
                    include_usage: Some(false),
                    max_tokens: Some(12_345_678_901_234_567_890),
                    // A fraction is no count.
                    n: None,
                    ..Head::default()
                }
            );
        }
        // Not an object: read whole.
        let (head, prompt) = top(br#"["a", "bc"]"#, false);
        assert_eq!(head, Head::default());
        assert_eq!(prompt.approximate(), 1);
    }

    #[test]
    fn the_head_keys_are_the_list() {
        for k in HEAD {
            assert!(is_head(k.as_bytes()), "{k}");
        }
        for k in ["", "models", "mode", "messages", "N", "stream_option"] {
            assert!(!is_head(k.as_bytes()), "{k}");
        }
    }

    #[test]
    fn each_head_field_is_read_as_its_type_or_not_at_all() {
        let (head, _) = top(
            br#"{"model": 4, "stream": "yes", "stream_options": null, "max_tokens": 7,
              "max_completion_tokens": -1, "best_of": 3, "n": 2,
              "generationConfig": {"maxOutputTokens": 9, "candidateCount": 2.5}}"#,
            false,
        );
        assert_eq!(
            head,
            Head {
                stream_options: true,
                max_tokens: Some(7),
                best_of: Some(3),
                n: Some(2),
                max_output_tokens_gemini: Some(9),
                ..Head::default()
            }
        );
        // The last of a key written twice.
        let (head, _) = top(br#"{"model": "a", "model": "b\u0063"}"#, false);
        assert_eq!(head.model.as_deref(), Some("bc"));
    }

    /// Whether the hand read `body`; when it did, serde_json reads the same.
    fn agrees(body: &[u8]) -> bool {
        let Some(hand) = by_hand(body, true) else {
            return false;
        };
        assert_eq!(
            hand,
            by_serde(body, true),
            "{}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(by_hand(body, false), Some(by_serde(body, false)));
        true
    }

    #[test]
    fn what_the_hand_reads_serde_reads_the_same_on_generated_requests() {
        const BASES: &[&str] = &[
            r#"{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Hello world"}],"max_tokens":64,"stream":true}"#,
            r#" { "model" : "gpt-4o" , "messages" : [ { "role" : "user" , "content" : [ { "type" : "text" , "text" : "Hi \"there\" \u00e9" } , { "type" : "image_url" , "image_url" : { "url" : "data:xx" } } ] } ] , "n" : 2.0 , "stream_options" : { "include_usage" : false } , "temperature" : 0.7 } "#,
            r#"{"model":"claude-sonnet-4-5","system":"Be brief.","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":[1,-2.5e3,null,true,false]}}]}],"max_tokens":1024,"metadata":{"user_id":"u"}}"#,
            r#"{"contents":[{"role":"user","parts":[{"text":"Why is the sky blue?"}]}],"generationConfig":{"maxOutputTokens":100,"candidateCount":1},"role":"x"}"#,
            r#"{"input":"Say hi","model":"gpt-4.1","max_output_tokens":12345678901234567890,"reasoning":{"effort":"low"},"best_of":3}"#,
        ];
        const SNIPPETS: &[&str] = &[
            r#""role":"user","#,
            r#""content":"more text","#,
            r#""model":"m","#,
            r#""stream":false,"#,
            r#""r\u006fle":"x","#,
            r#""$serde_json::private::Number":"1","#,
        ];
        crate::json::mutants::check_mutants(BASES, SNIPPETS, 40_000, agrees);
    }

    #[test]
    fn the_prompt_is_approximated_until_a_reserving_remedy_counts_it() {
        let body = Bytes::from_static(
            br#"{"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello world"}]}"#,
        );
        let path = "/v1/chat/completions";
        let chat = |r: Reading| read(crate::protocol::openai_chat::API, path, Some(&body), r).call;
        let mut call = chat(reading(false, true));
        // A quarter of "You are a helpful assistant.\nHello world" (40 bytes), and 3 a
        // message: what usage-only policies keep, no tokenizer loaded.
        assert_eq!(call.input_estimate, 10 + 6);
        call.count_prompt(Some(&body));
        // o200k_base: 8 tokens.
        assert_eq!(call.input_estimate, 8 + 6);
        assert_eq!(call.meter.read().input_estimate, 8 + 6);
        // Once a call.
        let longer = Bytes::from_static(
            br#"{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello world, hello world, hello world"}]}"#,
        );
        call.count_prompt(Some(&longer));
        assert_eq!(call.input_estimate, 8 + 6);
        // A policy that counts prompts keeps the text from the first read: the count
        // needs no body.
        let keeping = Reading {
            keep_prompt: true,
            ..reading(false, true)
        };
        let mut kept = chat(keeping.clone());
        assert_eq!(kept.input_estimate, 10 + 6);
        kept.count_prompt(None);
        assert_eq!(kept.input_estimate, 8 + 6);
        // Without the tokenizer, or for a model without a public one, the estimate stays.
        let mut off = chat(reading(false, false));
        off.count_prompt(Some(&body));
        assert_eq!(off.input_estimate, 10 + 6);
        let other = Bytes::from_static(
            br#"{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello world"}]}"#,
        );
        let mut claude = read(
            crate::protocol::anthropic_messages::API,
            "/v1/messages",
            Some(&other),
            keeping,
        )
        .call;
        // An API whose models have no public tokenizer keeps no text to count.
        assert!(claude.prompt.is_none());
        let estimate = claude.input_estimate;
        claude.count_prompt(Some(&other));
        assert_eq!(claude.input_estimate, estimate);
    }

    #[test]
    fn a_chat_stream_gets_include_usage_and_keeps_its_bytes() {
        let body = Bytes::from_static(
            br#"{ "model" : "gpt-4o-mini", "stream": true, "max_tokens": 50, "n": 1.50}"#,
        );
        let r = read(
            crate::protocol::openai_chat::API,
            "/v1/chat/completions",
            Some(&body),
            reading(true, false),
        );
        assert_eq!(r.call.model.as_deref(), Some("gpt-4o-mini"));
        assert!(r.call.stream && r.call.strip_usage);
        assert_eq!(r.call.max_output, Some(50));
        assert_eq!(
            &r.body.unwrap()[..],
            br#"{"stream_options":{"include_usage":true}, "model" : "gpt-4o-mini", "stream": true, "max_tokens": 50, "n": 1.50}"#
        );
        // Asked already, or not a stream: left alone.
        let asks = Bytes::from_static(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
        );
        let r = read(
            crate::protocol::openai_chat::API,
            "/v1/chat/completions",
            Some(&asks),
            reading(true, false),
        );
        assert!(r.body.is_none() && !r.call.strip_usage);
        let whole = Bytes::from_static(br#"{"model":"m"}"#);
        assert!(
            read(
                crate::protocol::openai_chat::API,
                "/",
                Some(&whole),
                reading(true, false),
            )
            .body
            .is_none()
        );
    }

    #[test]
    fn gemini_names_its_model_and_stream_in_the_path() {
        let body = Bytes::from_static(br#"{"generationConfig":{"maxOutputTokens":64}}"#);
        let r = read(
            crate::protocol::gemini::API,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            Some(&body),
            reading(true, false),
        );
        assert_eq!(r.call.model.as_deref(), Some("gemini-2.5-flash"));
        assert!(r.call.stream && !r.call.strip_usage);
        assert_eq!(r.call.max_output, Some(64));
    }

    #[test]
    fn every_choice_reserves_its_output_cap() {
        let read_one = |api, path, body: &'static [u8]| {
            read(
                api,
                path,
                Some(&Bytes::from_static(body)),
                reading(true, false),
            )
            .call
        };
        let c = read_one(
            crate::protocol::openai_chat::API,
            "/v1/chat/completions",
            br#"{"model":"m","n":50,"max_tokens":20}"#,
        );
        assert_eq!((c.choices, c.reserve().output), (50, 1000));
        let c = read_one(
            crate::protocol::openai_chat::API,
            "/v1/completions",
            br#"{"model":"m","n":2,"best_of":5,"max_tokens":10}"#,
        );
        assert_eq!(c.reserve().output, 50, "best_of generates 5");
        let c = read_one(
            crate::protocol::gemini::API,
            "/v1beta/models/g:generateContent",
            br#"{"generationConfig":{"candidateCount":3,"maxOutputTokens":7}}"#,
        );
        assert_eq!(c.reserve().output, 21);
        let c = read_one(
            crate::protocol::openai_chat::API,
            "/v1/chat/completions",
            br#"{"n":0}"#,
        );
        assert_eq!(c.choices, 1, "n: 0 is still one answer");
    }
}
