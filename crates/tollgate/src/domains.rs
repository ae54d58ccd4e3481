//! Domain allow/deny lists, applied to every traffic mode before any connection is made.

use crate::glob::HostGlob;

/// Compiled allow/deny lists. Deny wins; an empty allow list allows every host.
#[derive(Debug, Clone, Default)]
pub struct DomainRules {
    pub allow: Vec<HostGlob>,
    pub deny: Vec<HostGlob>,
}

impl DomainRules {
    /// `host` is lower-case without a trailing dot.
    #[inline]
    pub fn permits(&self, host: &str) -> bool {
        if self.deny.iter().any(|g| g.matches(host)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|g| g.matches(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_and_empty_allow_allows_all() {
        let g = |p: &str| HostGlob::new(p).unwrap();
        let open = DomainRules::default();
        assert!(open.permits("x.com"));
        let rules = DomainRules {
            allow: vec![g("*.example.com")],
            deny: vec![g("evil.example.com")],
        };
        assert!(rules.permits("api.example.com"));
        assert!(!rules.permits("evil.example.com"));
        assert!(!rules.permits("other.org"));
    }
}
