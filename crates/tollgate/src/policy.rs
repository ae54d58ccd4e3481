//! Policies: named request matchers (host glob, path template, methods) that remedies and
//! diagnosis attach to. Compiled at config load; matched once per request, only when
//! policies exist, so unmatched traffic pays nothing.

use crate::glob::HostGlob;
use http::Method;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// A path template: `/v1/users/{id}/*`. `{param}` matches one non-empty segment; a
/// trailing `*` matches any rest (including nothing).
#[derive(Debug, Clone)]
pub struct PathTemplate {
    source: String,
    segments: Vec<Segment>,
    rest: bool,
}

impl PathTemplate {
    pub fn new(template: &str) -> Result<Self, String> {
        let body = template
            .strip_prefix('/')
            .ok_or_else(|| format!("path template `{template}` must start with `/`"))?;
        let (body, rest) = match body.strip_suffix('*') {
            Some(b) => (b.strip_suffix('/').unwrap_or(b), true),
            None => (body, false),
        };
        let mut segments = Vec::new();
        for seg in body.split('/').filter(|s| !s.is_empty()) {
            if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!("`{seg}` in `{template}` is not a valid parameter"));
                }
                segments.push(Segment::Param(name.to_owned()));
            } else if seg.contains(['{', '}', '*']) {
                return Err(format!(
                    "segment `{seg}` in `{template}`: use `{{name}}` for a whole segment, `*` only at the end"
                ));
            } else {
                segments.push(Segment::Literal(seg.to_owned()));
            }
        }
        Ok(Self {
            source: template.to_owned(),
            segments,
            rest,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, path: &str) -> bool {
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        for seg in &self.segments {
            match (seg, parts.next()) {
                (Segment::Literal(l), Some(p)) if l == p => {}
                (Segment::Param(_), Some(_)) => {}
                _ => return false,
            }
        }
        self.rest || parts.next().is_none()
    }
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub host: Option<HostGlob>,
    pub path: Option<PathTemplate>,
    pub methods: Vec<Method>,
}

impl Policy {
    pub fn matches(&self, host: &str, method: &Method, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.contains(method))
            && self.host.as_ref().is_none_or(|h| h.matches(host))
            && self.path.as_ref().is_none_or(|p| p.matches(path))
    }
}

/// Policies in file order; the first match applies.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    pub policies: Vec<Policy>,
}

impl PolicySet {
    #[inline]
    pub fn find(&self, host: &str, method: &Method, path: &str) -> Option<&Policy> {
        if self.policies.is_empty() {
            return None;
        }
        self.policies.iter().find(|p| p.matches(host, method, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let t = PathTemplate::new("/v1/users/{id}").unwrap();
        assert!(t.matches("/v1/users/42"));
        assert!(!t.matches("/v1/users/42/posts"));
        assert!(!t.matches("/v1/users"));
        let t = PathTemplate::new("/v1/users/{id}/*").unwrap();
        assert!(t.matches("/v1/users/42/posts/1"));
        assert!(t.matches("/v1/users/42"));
        let t = PathTemplate::new("/*").unwrap();
        assert!(t.matches("/anything/at/all"));
        assert!(PathTemplate::new("v1").is_err());
        assert!(PathTemplate::new("/v1/us*rs").is_err());
        assert!(PathTemplate::new("/v1/{}").is_err());
    }

    #[test]
    fn first_matching_policy_applies() {
        let set = PolicySet {
            policies: vec![
                Policy {
                    name: "writes".into(),
                    host: Some(HostGlob::new("*.example.com").unwrap()),
                    path: None,
                    methods: vec![Method::POST],
                },
                Policy {
                    name: "all".into(),
                    host: None,
                    path: Some(PathTemplate::new("/*").unwrap()),
                    methods: vec![],
                },
            ],
        };
        assert_eq!(
            set.find("api.example.com", &Method::POST, "/x")
                .unwrap()
                .name,
            "writes"
        );
        assert_eq!(
            set.find("api.example.com", &Method::GET, "/x")
                .unwrap()
                .name,
            "all"
        );
        assert!(PolicySet::default().find("a", &Method::GET, "/").is_none());
    }
}
