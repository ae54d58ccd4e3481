//! What a remedy is to the rest of tollgate: [`RemedyKind`] ties its config as written
//! (serde + schema), its validation, and the [`Remedy`] it builds; [`remedies!`] turns
//! the one ordered list in [`super::remedies`] into the policy's config type, its
//! validated spec, the compiled chain and the docs' stage table. A remedy exists nowhere
//! else: adding one is its module and one registry line.

use super::actions::Action;
use super::chain::Remedy;
use super::compile::Build;
use super::config::Declared;
use super::matcher::PathTemplate;
use crate::fields::Errors;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// One remedy: its config, how it is checked, and what it builds.
pub trait RemedyKind: 'static {
    /// Its name in the chain: `/policies`, `/config`, metrics, HAR, the docs.
    const NAME: &'static str;
    /// What it does in each phase, for docs/architecture.md's stage table: the request
    /// phase, each attempt, the response phase (reverse order); empty where it does
    /// nothing.
    const PHASES: [&'static str; 3];
    /// The config as written under the policy's key (unknown keys rejected, defaults
    /// filled in; its doc comment and fields are the schema's).
    type Raw: DeserializeOwned + Serialize + JsonSchema + std::fmt::Debug + Clone;
    /// The validated config the remedy is built from.
    type Spec: std::fmt::Debug + Clone + Send + Sync + 'static;
    /// What it counts in `tollgate_remedy_actions_total` ([`NoActions`] when nothing).
    type Action: Action;

    /// Checks the config as written, reporting each problem at its field path through
    /// `cx`; `None` when it cannot be built.
    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec>;

    /// Builds the remedy for one policy's chain (its resources shared through `b`).
    fn build(spec: &Self::Spec, b: &mut Build<'_>) -> Arc<dyn Remedy>;
}

/// What a remedy's validation sees: where its key is, the policy, and what is declared
/// for sharing.
pub struct Check<'a> {
    pub errors: &'a mut Errors,
    /// The remedy's key, `policies[2].cache`.
    pub path: String,
    /// The policy's name.
    pub policy: &'a str,
    /// The policy's `match.path`, whose parameters a rewrite may name.
    pub template: Option<&'a PathTemplate>,
    /// The shared rate limits, quotas, concurrency limits and breakers, validated.
    pub declared: &'a Declared,
}

impl Check<'_> {
    /// The path of a field under the remedy's key.
    pub fn at(&self, field: &str) -> String {
        format!("{}.{field}", self.path)
    }
}

/// A row of the stage table: a remedy's policy key, name, phases and actions.
#[derive(Debug, Clone, Copy)]
pub struct Stage {
    pub key: &'static str,
    pub name: &'static str,
    pub phases: [&'static str; 3],
    /// The name its actions are counted under, and the actions.
    pub actions: fn() -> (&'static str, Vec<&'static str>),
}

/// The actions of a remedy that counts none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoActions {}

impl Action for NoActions {
    const REMEDY: &'static str = "";
    const ALL: &'static [Self] = &[];
    fn as_str(self) -> &'static str {
        match self {}
    }
    fn index(self) -> usize {
        match self {}
    }
}

/// `A`'s remedy name and actions, for [`Stage::actions`].
pub fn actions_of<A: Action>() -> (&'static str, Vec<&'static str>) {
    (A::REMEDY, A::ALL.iter().map(|a| a.as_str()).collect())
}

/// Generates, from the ordered list of remedies: the policy as written (`RawPolicy`,
/// one optional key per remedy), the validated policy (`PolicySpec`), its validation,
/// its compilation into a chain, and [`Stage`]s in order.
macro_rules! remedies {
    ($($(#[$doc:meta])* $key:ident: $kind:ty,)+) => {
        /// A policy as written: which requests it matches and the remedies it applies.
        #[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct RawPolicy {
            /// A name for the policy, used in logs, metrics and `GET /policies`.
            pub name: String,
            /// Which requests the policy applies to, matched against the upstream request (after a route's prefix is stripped). All given conditions must hold. The first policy in file order that matches applies.
            #[serde(rename = "match", default)]
            pub matcher: $crate::policy::matcher::RawMatch,
            $(
                $(#[$doc])*
                pub $key: Option<<$kind as $crate::policy::kind::RemedyKind>::Raw>,
            )+
        }

        /// A policy's validated remedies, in chain order.
        #[derive(Debug, Clone, Default)]
        pub struct PolicySpec {
            $(pub $key: Option<<$kind as $crate::policy::kind::RemedyKind>::Spec>,)+
        }

        /// Every remedy, in chain order.
        pub const STAGES: &[$crate::policy::kind::Stage] = &[$(
            $crate::policy::kind::Stage {
                key: stringify!($key),
                name: <$kind as $crate::policy::kind::RemedyKind>::NAME,
                phases: <$kind as $crate::policy::kind::RemedyKind>::PHASES,
                actions: $crate::policy::kind::actions_of::<<$kind as $crate::policy::kind::RemedyKind>::Action>,
            },
        )+];

        impl PolicySpec {
            /// Validates each remedy the policy names; `path` is the policy's (`policies[2]`).
            pub fn validate(raw: &RawPolicy, path: &str, mut cx: $crate::policy::kind::Check<'_>) -> PolicySpec {
                PolicySpec {
                    $($key: raw.$key.as_ref().and_then(|r| {
                        cx.path = format!("{path}.{}", stringify!($key));
                        <$kind as $crate::policy::kind::RemedyKind>::validate(r, &mut cx)
                    }),)+
                }
            }

            /// The remedies this policy applies, by name in chain order.
            pub fn remedies(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(if self.$key.is_some() {
                    out.push(<$kind as $crate::policy::kind::RemedyKind>::NAME);
                })+
                out
            }

            /// The chain: each remedy the policy applies, built, in order.
            pub fn build(&self, b: &mut $crate::policy::compile::Build<'_>) -> Vec<std::sync::Arc<dyn $crate::policy::chain::Remedy>> {
                let mut out = Vec::new();
                $(if let Some(s) = &self.$key {
                    out.push(<$kind as $crate::policy::kind::RemedyKind>::build(s, b));
                })+
                out
            }
        }
    };
}
pub(crate) use remedies;
