//! A prompt's tokens, estimated on admission (the answer's usage corrects it): the text of
//! the request's JSON (every string but names, roles, ids and binary data) approximated
//! as one token per 4 bytes, plus 3 tokens per message for its framing, as OpenAI's
//! cookbook counts chat messages. Where a token limit or a budget reserves the estimate,
//! the text is counted exactly with the model's tokenizer where one is public (OpenAI's,
//! through `tiktoken-rs`): only those remedies load its tables (some 50 MB, one copy
//! for every worker), so a policy that only reads usage never does.

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
    /// The text, when kept for an exact count.
    text: String,
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
            self.len += 1;
            if self.keep {
                self.text.push('\n');
            }
        }
        self.len += s.len();
        if self.keep {
            self.text.push_str(s);
        }
    }

    /// Whether its text was kept (for [`Prompt::count`]).
    pub fn kept(&self) -> bool {
        self.keep
    }

    /// A quarter of the text's bytes, and the messages' framing.
    pub fn approximate(&self) -> u64 {
        (self.len as u64).div_ceil(4) + self.messages * PER_MESSAGE
    }

    /// Counted with `model`'s tokenizer where it has a public one and the text was kept,
    /// else approximated.
    pub fn count(&self, model: Option<&str>) -> u64 {
        match self.keep {
            true => count(model, &self.text) + self.messages * PER_MESSAGE,
            false => self.approximate(),
        }
    }
}

/// Whether `model` has a public tokenizer (without loading it).
pub fn has_tokenizer(model: &str) -> bool {
    tiktoken_rs::tokenizer::get_tokenizer(model).is_some()
}

/// The tokens of `text` for `model`.
pub fn count(model: Option<&str>, text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    match model.and_then(|m| tiktoken_rs::bpe_for_model(m).ok()) {
        Some(bpe) => bpe.encode_ordinary(text).len() as u64,
        None => approximate(text),
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
    for m in ["gpt-4o", "gpt-4"] {
        let _ = tiktoken_rs::bpe_for_model(m);
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
        // o200k_base: "You are a helpful assistant.\nHello world" is 8 tokens.
        assert_eq!(
            Prompt::of(&body, true).count(Some("gpt-4o-mini")),
            8 + 2 * PER_MESSAGE
        );
        // Elsewhere, a quarter of the bytes.
        let text = "You are a helpful assistant.\nHello world";
        assert_eq!(
            Prompt::of(&body, true).count(Some("claude-sonnet-4-5")),
            approximate(text) + 2 * PER_MESSAGE
        );
    }
}
