//! A config string that may hold a secret: read as written, shown (serialised, debug
//! printed) as `MASKED` unless written as a `${VAR}` reference, which names the secret
//! without holding it. `/config`, the reload diff and logs of the raw config never carry
//! one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

thread_local! {
    /// Set while [`fingerprinting`]: secrets are shown with a fingerprint.
    static FINGERPRINTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The key of the fingerprints: this process's own, so a fingerprint says nothing of the
/// value outside the comparison it was made for.
static KEY: std::sync::LazyLock<std::collections::hash_map::RandomState> =
    std::sync::LazyLock::new(Default::default);

/// Runs `f` (a serialisation of configs) with every secret shown as `MASKED#` and a keyed
/// fingerprint of its value instead of `MASKED`: the reload diff compares two configs so,
/// and names the path of a rotated secret (`admin.token`) without its value.
pub fn fingerprinting<T>(f: impl FnOnce() -> T) -> T {
    let before = FINGERPRINTING.replace(true);
    let out = f();
    FINGERPRINTING.set(before);
    out
}

/// How a secret's value is shown: `MASKED`, or while [`fingerprinting`], `MASKED#` and a
/// keyed hash of it.
pub fn masked(value: &str) -> std::borrow::Cow<'static, str> {
    if !FINGERPRINTING.get() {
        return "MASKED".into();
    }
    use std::hash::BuildHasher;
    format!("MASKED#{:016x}", KEY.hash_one(value)).into()
}

#[derive(Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SecretText(pub String);

impl SecretText {
    /// What may be shown: the `${VAR}` reference as written, `MASKED` for a literal,
    /// the empty string as it is.
    pub fn shown(&self) -> &str {
        if self.0.is_empty() || is_env_reference(&self.0) {
            &self.0
        } else {
            "MASKED"
        }
    }
}

/// `${NAME}` and nothing else.
pub fn is_env_reference(s: &str) -> bool {
    s.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

impl std::ops::Deref for SecretText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Serialize for SecretText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.shown() {
            "MASKED" => s.serialize_str(&masked(&self.0)),
            shown => s.serialize_str(shown),
        }
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.shown())
    }
}

#[cfg(test)]
mod tests {
    use super::SecretText;

    #[test]
    fn a_literal_is_masked_a_reference_shown() {
        let json = |s: &str| serde_json::to_string(&SecretText(s.into())).unwrap();
        assert_eq!(json("sk-live-123"), "\"MASKED\"");
        assert_eq!(json("${STRIPE_KEY}"), "\"${STRIPE_KEY}\"");
        assert_eq!(json("${A} and more"), "\"MASKED\"");
        assert_eq!(json(""), "\"\"");
        assert_eq!(format!("{:?}", SecretText("sk".into())), "\"MASKED\"");
    }
}
