//! Names as policies write them (`create_*`, `delete_repository`): a case-sensitive glob,
//! `*` matching any run of characters, as MCP tool names are case-sensitive ("Tool
//! names SHOULD be between 1 and 128 characters… case-sensitive", MCP 2025-11-25).

/// A compiled glob over names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameGlob {
    source: String,
    /// The pattern split on `*`: the first piece a prefix, the last a suffix, the middle
    /// ones in order between.
    pieces: Vec<String>,
}

impl NameGlob {
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("an empty name matches nothing: write a name, or `*` for any".into());
        }
        Ok(Self {
            source: pattern.to_owned(),
            pieces: pattern.split('*').map(str::to_owned).collect(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, name: &str) -> bool {
        let (first, rest) = self.pieces.split_first().expect("split yields one piece");
        let Some(mut left) = name.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return left.is_empty();
        };
        for piece in middle {
            match left.find(piece.as_str()) {
                Some(i) => left = &left[i + piece.len()..],
                None => return false,
            }
        }
        left.ends_with(last.as_str())
    }
}

/// Whether any of `globs` matches `name`.
pub fn any(globs: &[NameGlob], name: &str) -> bool {
    globs.iter().any(|g| g.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let g = |p: &str, n: &str| NameGlob::new(p).unwrap().matches(n);
        assert!(g("delete_repository", "delete_repository"));
        assert!(!g("delete_repository", "delete_repository2"));
        assert!(!g("delete_repository", "Delete_repository"));
        assert!(g("create_*", "create_issue"));
        assert!(g("create_*", "create_"));
        assert!(!g("create_*", "recreate_issue"));
        assert!(g("*_refund", "create_refund"));
        assert!(g("*", "anything"));
        assert!(g("a*b*c", "a-b-b-c"));
        assert!(!g("a*b*c", "a-c"));
        assert!(!g("ab*ba", "aba"));
        assert!(NameGlob::new("").is_err());
    }
}
