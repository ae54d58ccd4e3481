//! What a remedy is to the rest of tollgate: [`RemedyKind`] ties its config as written
//! (serde + schema), its validation, what it builds ([`Built`]), its metric families, its
//! refusals and its docs example; [`Shared`] adds a section of the file declaring its
//! definitions by name. [`remedies!`] turns the one ordered list in [`super::remedies`]
//! into the policy's config type, its validated spec, the declared sections, the
//! compiled chain and the docs' stage table. A remedy exists nowhere else: adding one is
//! its module and one registry line.

use super::actions::Action;
use super::chain::Built;
use super::compile::Build;
use super::config::RawRef;
use super::matcher::PathTemplate;
use super::spec::Resource;
use crate::error::Refusal;
use crate::fields::Errors;
use crate::metrics::Families;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One remedy: its config, how it is checked, what it builds, what it measures and
/// refuses with.
pub trait RemedyKind: 'static {
    /// Its name in the chain: `/policies`, `/config`, metrics, HAR, the docs.
    const NAME: &'static str;
    /// What it does in each phase, for docs/architecture.md's stage table.
    const PHASES: Phases;
    /// Its config as a user writes it, in YAML (`{require: [x-app-id]}`; a name for a
    /// remedy whose definitions are declared, [`Shared`]): `examples/full.yaml`'s policy
    /// shows it with every default filled in, and the docs' key table lists the keys
    /// it shows. Checked by a test: it must validate.
    const EXAMPLE: &'static str;
    /// The refusals it answers with: README's table of errors lists them.
    const REFUSALS: &'static [&'static Refusal] = &[];
    /// The config as written under the policy's key (unknown keys rejected, defaults
    /// filled in; its doc comment and fields are the schema's).
    type Raw: DeserializeOwned + Serialize + JsonSchema + std::fmt::Debug + Clone;
    /// The validated config the remedy is built from.
    type Spec: std::fmt::Debug + Clone + Send + Sync + 'static;
    /// What it counts in `tollgate_remedy_actions_total` ([`NoActions`] when nothing).
    type Action: Action;
    /// Its own metric families (`()` when none), registered once per process by
    /// [`RemedyKind::register`] and reached from [`Build::metrics_of`].
    type Metrics: Default + Send + Sync + 'static;

    /// Registers its metric families (linkerd2-proxy's `MetricFamilies::register`).
    fn register(_families: &mut Families<'_>) -> Self::Metrics {
        Self::Metrics::default()
    }

    /// The secrets its config holds (header or parameter names, and values), which
    /// diagnosis redacts wherever they appear.
    fn secrets(_spec: &Self::Spec, _names: &mut Vec<String>, _values: &mut Vec<String>) {}

    /// Checks the config as written, reporting each problem at its field path through
    /// `cx`; `None` when it cannot be built.
    fn validate(raw: &Self::Raw, cx: &mut Check<'_>) -> Option<Self::Spec>;

    /// Builds the remedy for one policy's chain (its resources shared through `b`).
    fn build(spec: &Self::Spec, b: &mut Build<'_>) -> Built;
}

/// What a remedy does in each phase (empty where it does nothing): docs/architecture.md's
/// stage table.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    /// Its request phase, in registry order.
    pub request: &'static str,
    /// Before and after each attempt.
    pub attempt: &'static str,
    /// Its response phase, in reverse order.
    pub response: &'static str,
}

/// A remedy whose definitions may be declared once, by name, in a section of the file
/// of their own (`quotas: {org: …}`) and named by any number of policies (`quota: org`),
/// or written inline in one policy. Its registry line names the section; the section's
/// key in the file, its validation, `/config`'s view of it and the reload diff follow.
pub trait Shared: RemedyKind<Raw = RawRef<Self::Def>, Spec = Resource<Self::DefSpec>> {
    /// One definition as written.
    type Def: DeserializeOwned + Serialize + JsonSchema + std::fmt::Debug + Clone;
    /// One definition, validated.
    type DefSpec: std::fmt::Debug + Clone + Send + Sync + 'static;
    /// A sample section for `examples/full.yaml` (`{org: {limit: 100000}, team: …}`),
    /// whose entries [`RemedyKind::EXAMPLE`] may name.
    const DECLARED_EXAMPLE: &'static str;

    /// Validates one definition written at `path` (`quotas.org`, or a policy's own);
    /// `section` is the whole section as written (a quota's parent is one of them).
    fn define(
        e: &mut Errors,
        path: &str,
        def: &Self::Def,
        section: &BTreeMap<String, Self::Def>,
    ) -> Self::DefSpec;
}

/// One declared section: its definitions as written, and validated, by name.
pub struct Section<K: Shared> {
    /// Its key in the file (`quotas`).
    pub key: &'static str,
    pub raw: BTreeMap<String, K::Def>,
    pub specs: BTreeMap<String, K::DefSpec>,
}

impl<K: Shared> Section<K> {
    /// Validates every definition of the section `key`.
    pub fn validate(e: &mut Errors, key: &'static str, raw: &BTreeMap<String, K::Def>) -> Self {
        Section {
            key,
            specs: raw
                .iter()
                .map(|(n, d)| (n.clone(), K::define(e, &format!("{key}.{n}"), d, raw)))
                .collect(),
            raw: raw.clone(),
        }
    }
}

/// The declared sections, validated: each [`Section`] by its remedy's type (the
/// registry's generated `Declared` is the one implementation).
pub trait Declarations: Sync {
    /// The section of the remedy whose `TypeId` is given, as a `Section<K>`.
    fn section(&self, kind: TypeId) -> Option<&dyn Any>;
}

/// A `name | definition` field: the declared definition, or the policy's own, checked.
pub fn resolve<K: Shared>(
    raw: &RawRef<K::Def>,
    cx: &mut Check<'_>,
) -> Option<Resource<K::DefSpec>> {
    let section = cx
        .declared
        .section(TypeId::of::<K>())
        .and_then(|s| s.downcast_ref::<Section<K>>())?;
    match raw {
        RawRef::Name(n) => match section.specs.get(n) {
            Some(spec) => Some(Resource {
                name: n.clone(),
                declared: true,
                spec: spec.clone(),
            }),
            None => {
                let known: Vec<_> = section.specs.keys().map(String::as_str).collect();
                cx.errors.fail(
                    &cx.path,
                    format!(
                        "no {key} entry named `{n}`; declare it under `{key}:`{}",
                        if known.is_empty() {
                            String::new()
                        } else {
                            format!(" (declared: {})", known.join(", "))
                        },
                        key = section.key,
                    ),
                );
                None
            }
        },
        RawRef::Inline(def) => Some(Resource {
            name: format!("policy {}", cx.policy),
            declared: false,
            spec: K::define(cx.errors, &cx.path, def, &section.raw),
        }),
    }
}

impl Build<'_> {
    /// The metric families remedy `K` registered ([`RemedyKind::register`]).
    pub fn metrics_of<K: RemedyKind>(&self) -> Arc<K::Metrics> {
        self.metrics.extension(TypeId::of::<K>(), K::register)
    }
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
    /// The declared sections, validated.
    pub declared: &'a dyn Declarations,
}

impl Check<'_> {
    /// The path of a field under the remedy's key.
    pub fn at(&self, field: &str) -> String {
        format!("{}.{field}", self.path)
    }
}

/// An example as written, read and written back with every default filled in.
pub type Example = fn() -> Result<yaml_serde::Value, String>;

/// A row of the stage table: a remedy's policy key, name, phases and actions, and what
/// the docs and the metrics take from it.
#[derive(Debug, Clone, Copy)]
pub struct Stage {
    pub key: &'static str,
    pub name: &'static str,
    pub phases: Phases,
    /// The name its actions are counted under, and the actions.
    pub actions: fn() -> (&'static str, Vec<&'static str>),
    /// Its [`RemedyKind::EXAMPLE`] read and written back, every default filled in.
    pub example: Example,
    /// The section declaring its definitions (`quotas`), and a sample of it with every
    /// default filled in, for a [`Shared`] remedy.
    pub declares: Option<(&'static str, Example)>,
    pub refusals: &'static [&'static Refusal],
    /// Registers its metric families (once per process).
    pub register: fn(&crate::metrics::Metrics),
}

/// `text` read as `T` and written back: what a user wrote, with every default filled in.
pub fn filled<T: DeserializeOwned + Serialize>(text: &str) -> Result<yaml_serde::Value, String> {
    yaml_serde::from_str::<T>(text)
        .and_then(yaml_serde::to_value)
        .map_err(|e| format!("`{text}`: {e}"))
}

/// Registers `K`'s metric families in `m` (once).
pub fn register<K: RemedyKind>(m: &crate::metrics::Metrics) {
    m.extension(TypeId::of::<K>(), K::register);
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

/// Generates, from the ordered list of remedies ([`super::remedies::registry`]): the
/// policy as written (`RawPolicy`, one optional key per remedy), the validated policy
/// (`PolicySpec`), its validation, its compilation into a chain, the declared sections
/// as written (`RawDeclared`) and validated (`Declared`), and [`Stage`]s in order.
macro_rules! remedies {
    (@declares $m:ident::$k:ident) => { None };
    (@declares $m:ident::$k:ident $section:ident) => {
        Some((stringify!($section), || {
            $crate::policy::kind::filled::<
                std::collections::BTreeMap<String, <$m::$k as $crate::policy::kind::Shared>::Def>,
            >(<$m::$k as $crate::policy::kind::Shared>::DECLARED_EXAMPLE)
        }))
    };
    ($($(#[$doc:meta])* $key:ident: $m:ident::$k:ident $(, $(#[$sdoc:meta])* $section:ident)?;)+) => {
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
                pub $key: Option<<$m::$k as $crate::policy::kind::RemedyKind>::Raw>,
            )+
        }

        /// A policy's validated remedies, in chain order.
        #[derive(Debug, Clone, Default)]
        pub struct PolicySpec {
            $(pub $key: Option<<$m::$k as $crate::policy::kind::RemedyKind>::Spec>,)+
        }

        /// Every remedy, in chain order.
        pub const STAGES: &[$crate::policy::kind::Stage] = &[$(
            $crate::policy::kind::Stage {
                key: stringify!($key),
                name: <$m::$k as $crate::policy::kind::RemedyKind>::NAME,
                phases: <$m::$k as $crate::policy::kind::RemedyKind>::PHASES,
                actions: $crate::policy::kind::actions_of::<<$m::$k as $crate::policy::kind::RemedyKind>::Action>,
                example: || $crate::policy::kind::filled::<<$m::$k as $crate::policy::kind::RemedyKind>::Raw>(
                    <$m::$k as $crate::policy::kind::RemedyKind>::EXAMPLE,
                ),
                declares: $crate::policy::kind::remedies!(@declares $m::$k $($section)?),
                refusals: <$m::$k as $crate::policy::kind::RemedyKind>::REFUSALS,
                register: $crate::policy::kind::register::<$m::$k>,
            },
        )+];

        /// The declared sections as written, borrowed from the file's config.
        pub struct RawDeclared<'a> {
            $($(pub $section: &'a std::collections::BTreeMap<String, <$m::$k as $crate::policy::kind::Shared>::Def>,)?)+
        }

        /// The declared sections, validated once for every policy naming their entries.
        pub struct Declared {
            $($(pub $section: $crate::policy::kind::Section<$m::$k>,)?)+
        }

        impl Declared {
            pub fn validate(e: &mut $crate::fields::Errors, raw: RawDeclared<'_>) -> Self {
                Declared {
                    $($($section: $crate::policy::kind::Section::validate(e, stringify!($section), raw.$section),)?)+
                }
            }
        }

        impl $crate::policy::kind::Declarations for Declared {
            fn section(&self, kind: std::any::TypeId) -> Option<&dyn std::any::Any> {
                $($(if kind == std::any::TypeId::of::<$m::$k>() {
                    return Some(&self.$section);
                })?)+
                None
            }
        }

        impl PolicySpec {
            /// Validates each remedy the policy names; `path` is the policy's (`policies[2]`).
            pub fn validate(raw: &RawPolicy, path: &str, mut cx: $crate::policy::kind::Check<'_>) -> PolicySpec {
                PolicySpec {
                    $($key: raw.$key.as_ref().and_then(|r| {
                        cx.path = format!("{path}.{}", stringify!($key));
                        <$m::$k as $crate::policy::kind::RemedyKind>::validate(r, &mut cx)
                    }),)+
                }
            }

            /// The secrets the policy's remedies hold (names, values), for redaction.
            pub fn secrets(&self, names: &mut Vec<String>, values: &mut Vec<String>) {
                $(if let Some(s) = &self.$key {
                    <$m::$k as $crate::policy::kind::RemedyKind>::secrets(s, names, values);
                })+
            }

            /// The remedies this policy applies, by name in chain order.
            pub fn remedies(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(if self.$key.is_some() {
                    out.push(<$m::$k as $crate::policy::kind::RemedyKind>::NAME);
                })+
                out
            }

            /// The chain: each remedy the policy applies, built, in order.
            pub fn build(&self, b: &mut $crate::policy::compile::Build<'_>) -> Vec<$crate::policy::chain::Built> {
                let mut out = Vec::new();
                $(if let Some(s) = &self.$key {
                    out.push(<$m::$k as $crate::policy::kind::RemedyKind>::build(s, b));
                })+
                out
            }
        }
    };
}
pub(crate) use remedies;
