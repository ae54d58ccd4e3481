//! A policy's validated definition ([`PolicySpec`], generated from the registry) and the
//! shared resources it refers to by name.

pub use super::remedies::PolicySpec;

/// A resource a policy uses: declared (shared by name) or its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource<T> {
    /// The declared name, or `policy NAME` for an inline definition.
    pub name: String,
    pub declared: bool,
    pub spec: T,
}
