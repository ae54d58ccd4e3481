//! A prompt's tokens, estimated on admission (the answer's usage corrects it): the text of
//! the request's JSON (every string but names, roles, ids and binary data) approximated
//! as one token per 4 bytes, plus 3 tokens per message for its framing, as OpenAI's
//! cookbook counts chat messages. Where a token limit or a budget reserves the estimate,
//! each string is counted exactly with the model's tokenizer where one is public
//! (OpenAI's, through `tiktoken-rs`), as the cookbook counts each message's content on
//! its own; a string counted before on this thread is found in [`counts`]' memory. Only
//! those remedies load the tokenizer's tables (some 50 MB, one copy that every worker
//! shares), so a policy that only reads usage never does.

use super::counts;
use serde_json::Value;

/// Keys whose string values are not prompt text.
const NOT_TEXT: &[&str] = &[
    "model",
    "role",
    "type",
    "id",
    "name",
    "tool_call_id",
    "tool_use_id",
    "url",
    "data",
    "mime_type",
    "mimeType",
    "media_type",
    "encoding_format",
    "user",
    "service_tier",
    "reasoning_effort",
];

/// Whether the values under key `k` are prompt text.
pub fn is_text(k: &[u8]) -> bool {
    !NOT_TEXT.iter().any(|n| n.as_bytes() == k)
}

/// Collects a JSON value's prompt text as it is parsed, as [`Prompt::collect`] does from
/// a `Value`, without building one.
pub struct Walk<'a>(pub &'a mut Prompt);

impl<'de> serde::de::DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_str<E>(self, s: &str) -> Result<(), E> {
        self.0.string(s);
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        while a.next_element_seed(Walk(&mut *self.0))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        // A number written exactly (serde_json's `arbitrary_precision`) comes as a map
        // of one private key: not text.
        while let Some(k) = a.next_key::<Key<'de>>()? {
            let k = k.as_bytes();
            if k == b"role" {
                self.0.count_message();
            }
            if k.starts_with(b"$serde_json::") || !is_text(k) {
                a.next_value::<serde::de::IgnoredAny>()?;
            } else {
                a.next_value_seed(Walk(&mut *self.0))?;
            }
        }
        Ok(())
    }
}

/// An object's key, borrowed from the JSON text unless it has escapes: its bytes, as
/// the keys looked for are ASCII (no UTF-8 check per key: the request's text is checked
/// where it is kept, and the provider parses the rest).
pub enum Key<'de> {
    Borrowed(&'de [u8]),
    Owned(Vec<u8>),
}

impl Key<'_> {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_bytes<E>(self, s: &'de [u8]) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_bytes<E>(self, s: &[u8]) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_vec()))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s.as_bytes()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.as_bytes().to_vec()))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// Tokens per message for its framing (role, separators).
const PER_MESSAGE: u64 = 3;

/// A prompt's text and messages, as collected from the request's JSON.
#[derive(Debug, Default, PartialEq)]
pub struct Prompt {
    /// The strings, one after the other, when kept for an exact count.
    text: String,
    /// Where each kept string ends in `text`.
    ends: Vec<usize>,
    keep: bool,
    /// The text's bytes (its strings and the line breaks between them).
    len: usize,
    messages: u64,
}

impl Prompt {
    /// The prompt of `v`; its text kept only when `keep` (an exact count may follow),
    /// else only measured.
    pub fn of(v: &Value, keep: bool) -> Self {
        let mut p = Prompt::new(keep);
        p.collect(v);
        p
    }

    /// An empty prompt to collect into ([`Prompt::collect`], [`Walk`]).
    pub fn new(keep: bool) -> Self {
        Prompt {
            keep,
            ..Prompt::default()
        }
    }

    /// Adds the prompt text of `v`.
    pub fn collect(&mut self, v: &Value) {
        match v {
            Value::String(s) => self.string(s),
            Value::Array(a) => a.iter().for_each(|v| self.collect(v)),
            Value::Object(o) => {
                if o.contains_key("role") {
                    self.messages += 1;
                }
                for (k, v) in o {
                    if is_text(k.as_bytes()) {
                        self.collect(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// One message more (an object with a `role`).
    pub fn count_message(&mut self) {
        self.messages += 1;
    }

    /// One string of prompt text more.
    pub fn string(&mut self, s: &str) {
        if self.len > 0 {
            // The line break that would join it to the one before.
            self.len += 1;
        }
        self.len += s.len();
        if self.keep && !s.is_empty() {
            self.text.push_str(s);
            self.ends.push(self.text.len());
        }
    }

    /// The kept strings.
    fn strings(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .filter_map(|(a, b)| self.text.get(a..b))
    }

    /// Whether its text was kept (for [`Prompt::count`]).
    pub fn kept(&self) -> bool {
        self.keep
    }

    /// A quarter of the text's bytes, and the messages' framing.
    pub fn approximate(&self) -> u64 {
        (self.len as u64).div_ceil(4) + self.messages * PER_MESSAGE
    }

    /// Counted with `encoding`, string by string, where the text was kept (how each
    /// string was counted added to `strings`), else approximated.
    pub fn count(&self, encoding: Encoding, strings: &mut counts::Strings) -> u64 {
        match self.keep {
            true => {
                let text: u64 = self.strings().map(|s| encoding.count(s, strings)).sum();
                text + self.messages * PER_MESSAGE
            }
            false => self.approximate(),
        }
    }
}

/// A model's public tokenizer, named without loading its tables.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Encoding(tiktoken_rs::tokenizer::Tokenizer);

impl Encoding {
    /// `model`'s tokenizer, if it has a public one. The model named last on this thread
    /// is remembered: finding a name among tiktoken's prefixes takes some 400
    /// instructions, and a gateway's calls mostly name the same few models.
    pub fn of(model: &str) -> Option<Encoding> {
        thread_local! {
            static LAST: std::cell::RefCell<(String, Option<Encoding>)> =
                const { std::cell::RefCell::new((String::new(), None)) };
        }
        let look_up = || tiktoken_rs::tokenizer::get_tokenizer(model).map(Encoding);
        LAST.with(|last| match last.try_borrow_mut() {
            Ok(last) if last.0 == model => last.1,
            Ok(mut last) => {
                let e = look_up();
                last.0.clear();
                last.0.push_str(model);
                last.1 = e;
                e
            }
            Err(_) => look_up(),
        })
    }

    /// The tokens of `text`: from this thread's memory of counts, or counted (its tables
    /// loaded the first time), approximated if they cannot be loaded; which of the two,
    /// added to `strings`.
    pub fn count(self, text: &str, strings: &mut counts::Strings) -> u64 {
        let count = |t: &str| match tiktoken_rs::bpe_for_tokenizer(self.0) {
            Ok(bpe) => bpe.encode_ordinary(t).len() as u64,
            Err(_) => approximate(t),
        };
        counts::tokens(self.0, text, count, strings)
    }
}

/// One token per 4 bytes, rounded up: the rule of thumb OpenAI and Anthropic give for
/// English text.
pub fn approximate(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Loads the public tokenizers now (about 0.2 s each), so the first request does not
/// wait for them.
pub fn warm_up() {
    use tiktoken_rs::tokenizer::Tokenizer;
    for t in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
        let _ = tiktoken_rs::bpe_for_tokenizer(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_models_are_counted_with_their_tokenizer() {
        let body = json!({"model": "gpt-4o-mini", "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello world"}]});
        // o200k_base: "You are a helpful assistant." is 6 tokens, "Hello world" 2.
        let o200k = Encoding::of("gpt-4o-mini").unwrap();
        let mut strings = counts::Strings::default();
        let n = Prompt::of(&body, true).count(o200k, &mut strings);
        assert_eq!(n, 8 + 2 * PER_MESSAGE);
        // Claude's tokenizer is not public: a quarter of the bytes.
        assert_eq!(Encoding::of("claude-sonnet-4-5"), None);
        // The model named last is remembered, and another one looked up.
        assert_eq!(Encoding::of("claude-sonnet-4-5"), None);
        assert_eq!(Encoding::of("gpt-4-0613"), Encoding::of("gpt-4"));
        assert_ne!(Encoding::of("gpt-4o"), Encoding::of("gpt-4"));
        let text = "You are a helpful assistant.\nHello world";
        assert_eq!(
            Prompt::of(&body, true).approximate(),
            approximate(text) + 2 * PER_MESSAGE
        );
    }

    #[test]
    fn each_string_is_counted_on_its_own_and_once_per_thread() {
        let o200k = Encoding::of("gpt-4o").unwrap();
        let bpe = tiktoken_rs::o200k_base_singleton();
        let system = "You are a careful agent. Use the tools given; explain each step.";
        let turn = |n: usize| {
            let mut m = vec![json!({"role": "system", "content": system})];
            for i in 0..n {
                m.push(
                    json!({"role": "user", "content": format!("Question {i}: what is {i} + {i}?")}),
                );
            }
            json!({"model": "gpt-4o", "messages": m})
        };
        let exact = |n: usize| {
            let mut t = bpe.encode_ordinary(system).len() as u64;
            for i in 0..n {
                t += bpe
                    .encode_ordinary(&format!("Question {i}: what is {i} + {i}?"))
                    .len() as u64;
            }
            t + (n as u64 + 1) * PER_MESSAGE
        };
        let count = |n| {
            let mut strings = counts::Strings::default();
            let tokens = Prompt::of(&turn(n), true).count(o200k, &mut strings);
            (tokens, strings.remembered, strings.counted)
        };
        assert_eq!(count(3), (exact(3), 0, 4));
        // The next turn resends the four strings before: only the new one is counted.
        assert_eq!(count(4), (exact(4), 4, 1));
        // An empty string is no string.
        let empty = json!({"messages": [{"role": "user", "content": ""}]});
        let mut strings = counts::Strings::default();
        assert_eq!(
            Prompt::of(&empty, true).count(o200k, &mut strings),
            PER_MESSAGE
        );
        assert_eq!(strings, counts::Strings::default());
    }
}
