//! The words a key takes (`log.format: text | json`), as types: read leniently like the
//! units (every wrong word in a file is reported at once, at its path and line, instead
//! of the parser stopping at the first), written back as the word, and listed in the
//! schema. [`words!`] declares the enum and its words in one place.

use super::units::{RANGE_KEYWORD, Read, read};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;

/// An enum a key is written as one word of.
pub trait Words: Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// Each word and its value; an invalid word reads as the first (validation has
    /// reported it).
    const ALL: &'static [(&'static str, Self)];
}

/// A key written as one of `W`'s words.
pub struct Word<W: Words>(Read<W>);

impl<W: Words> Word<W> {
    /// A default.
    pub fn of(w: W) -> Self {
        Self(Ok(w))
    }

    pub fn get(&self) -> W {
        self.0.clone().unwrap_or(W::ALL[0].1)
    }

    fn word(&self) -> &'static str {
        let w = self.get();
        W::ALL.iter().find(|(_, v)| *v == w).map_or("", |(n, _)| n)
    }

    fn listed() -> String {
        W::ALL
            .iter()
            .map(|(n, _)| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl<'de, W: Words> Deserialize<'de> for Word<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self(read(d, |text| {
            W::ALL
                .iter()
                .find(|(n, _)| *n == text.trim())
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("`{text}` is not one of {}", Self::listed()))
        })?))
    }
}

impl<W: Words> Serialize for Word<W> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.word())
    }
}

impl<W: Words> JsonSchema for Word<W> {
    fn schema_name() -> Cow<'static, str> {
        "a word".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let words: Vec<&str> = W::ALL.iter().map(|(n, _)| *n).collect();
        // The words in the description too, as a unit's range is.
        schemars::json_schema!({
            "type": "string",
            "enum": words,
            (RANGE_KEYWORD): format!("one of {}", Self::listed()),
        })
    }
}

impl<W: Words> Clone for Word<W> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<W: Words> PartialEq for Word<W> {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl<W: Words> std::fmt::Debug for Word<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// Declares an enum written as words: `words! { pub enum LogFormat { Text = "text", Json
/// = "json" } }` (the first is what an invalid word reads as).
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $crate::fields::words::Words for $name {
            const ALL: &'static [(&'static str, Self)] = &[$(($word, Self::$variant)),+];
        }
    };
}
pub(crate) use words;
