//! How a policy names a declared definition: `rate_limit: NAME`, or an inline definition
//! ([`RawRef`], resolved by [`super::kind::resolve`]).

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::marker::PhantomData;

/// A shared resource by name, or an inline definition that belongs to this policy alone.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RawRef<T> {
    /// The name of a declared resource.
    Name(String),
    /// A definition of this policy's own.
    Inline(T),
}

/// `rate_limit: NAME` or `rate_limit: { ... }`: a name, or the definition with its own
/// field errors (an untagged enum would only say that neither form matched).
impl<'de, T: Deserialize<'de>> Deserialize<'de> for RawRef<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NameOrMap<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for NameOrMap<T> {
            type Value = RawRef<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the name of a declared entry, or `key: value` lines defining one")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawRef::Name(v.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(RawRef::Inline)
            }
        }
        d.deserialize_any(NameOrMap(PhantomData))
    }
}
