//! A config string that may hold a secret: read as written, shown (serialised, debug
//! printed) as `MASKED` unless written as a `${VAR}` reference, which names the secret
//! without holding it. `/config`, the reload diff and logs of the raw config never carry
//! one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

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
        s.serialize_str(self.shown())
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
