//! A resource a policy uses: a definition declared by name and shared, or its own.

/// A resource a policy uses: declared (shared by name) or its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource<T> {
    /// The declared name, or `policy NAME` for an inline definition.
    pub name: String,
    pub declared: bool,
    pub spec: T,
}
