//! `listen: ADDRESS` and `admin: ADDRESS`: the short form users write, accepted beside the
//! full mapping (which keeps rejecting unknown keys).

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de::value::MapAccessDeserializer};
use std::fmt;
use std::marker::PhantomData;

/// A section that is either a mapping or just its address.
pub trait HasAddress: for<'de> Deserialize<'de> + Default {
    fn with_address(address: String) -> Self;
}

struct AddressOrMap<T>(PhantomData<T>);

impl<'de, T: HasAddress> Visitor<'de> for AddressOrMap<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an address like `127.0.0.1:8000`, or `key: value` lines under it")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok(T::with_address(v.to_owned()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

/// `section: ADDRESS` or the section's mapping.
pub fn address_or_map<'de, D: Deserializer<'de>, T: HasAddress>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(AddressOrMap(PhantomData))
}

/// The schema of a section that is a mapping, or just its address.
pub fn either<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let full = generator.subschema_for::<T>();
    json_schema!({
        "anyOf": [
            full,
            { "type": "string", "description": "Short for `{ address: ADDRESS }`." }
        ]
    })
}
