//! What the remedies' configs share: `rate_limit: NAME` or an inline definition
//! ([`RawRef`], resolved against [`Declared`]), and the shared definitions themselves,
//! validated once for every policy naming them.

use super::remedies::breaker::BreakerSpec;
use super::remedies::concurrency::ConcurrencyLimitSpec;
use super::remedies::quota::{QuotaSpec, RawQuota};
use super::remedies::rate_limit::RateLimitSpec;
use super::spec::Resource;
use crate::fields::Errors;
use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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

/// The shared definitions (`rate_limits`, `quotas`, `concurrency_limits`, `breakers`),
/// validated, by name.
#[derive(Debug, Default)]
pub struct Declared {
    pub rate_limits: BTreeMap<String, RateLimitSpec>,
    pub quotas: BTreeMap<String, QuotaSpec>,
    /// The quotas as written: an inline quota may name one as its parent.
    pub raw_quotas: BTreeMap<String, RawQuota>,
    pub concurrency_limits: BTreeMap<String, ConcurrencyLimitSpec>,
    pub breakers: BTreeMap<String, BreakerSpec>,
}

/// A `name | definition` field: the declared resource (from `section`), or the policy's
/// own, checked by `build`.
pub fn resolve<R, T: Clone>(
    e: &mut Errors,
    path: &str,
    policy: &str,
    r: &RawRef<R>,
    section: &str,
    declared: &BTreeMap<String, T>,
    build: impl FnOnce(&mut Errors, &str, &R) -> T,
) -> Option<Resource<T>> {
    match r {
        RawRef::Name(n) => match declared.get(n) {
            Some(spec) => Some(Resource {
                name: n.clone(),
                declared: true,
                spec: spec.clone(),
            }),
            None => {
                let known: Vec<_> = declared.keys().map(String::as_str).collect();
                e.fail(
                    path,
                    format!(
                        "no {section} entry named `{n}`; declare it under `{section}:`{}",
                        if known.is_empty() {
                            String::new()
                        } else {
                            format!(" (declared: {})", known.join(", "))
                        }
                    ),
                );
                None
            }
        },
        RawRef::Inline(raw) => Some(Resource {
            name: format!("policy {policy}"),
            declared: false,
            spec: build(e, path, raw),
        }),
    }
}
