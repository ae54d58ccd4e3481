//! What a policy matches: a host glob, a path template matched against the upstream
//! path (after a route's prefix is stripped, so every routing mode sees the same path),
//! methods, and for MCP calls the JSON-RPC method and the tool, prompt or resource named
//! in the body ([`McpMatch`]). Parsed at config load.

use crate::glob::HostGlob;
use crate::mcp::{Call, NameGlob, names};
use http::Method;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
        // The query is not part of the path a template is matched against.
        if let Some((path, _)) = template.split_once(['?', '#']) {
            return Err(format!(
                "`{template}` has a query; a template matches the path only: write `{path}`"
            ));
        }
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

impl PathTemplate {
    /// Segments before the trailing `*`.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    pub fn has_rest(&self) -> bool {
        self.rest
    }

    /// The segment index of `{name}`.
    pub fn param(&self, name: &str) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| matches!(s, Segment::Param(p) if p == name))
    }

    /// Whether every path this template matches, `other` matches too... the other way
    /// round: whether `self` matches every path `other` matches.
    pub fn covers(&self, other: &PathTemplate) -> bool {
        if self.segments.len() > other.segments.len() && !other.rest {
            return false;
        }
        for (i, seg) in self.segments.iter().enumerate() {
            match (seg, other.segments.get(i)) {
                (Segment::Param(_), Some(_)) => {}
                (Segment::Literal(a), Some(Segment::Literal(b))) if a == b => {}
                _ => return false,
            }
        }
        if self.rest {
            return true;
        }
        !other.rest && self.segments.len() == other.segments.len()
    }
}

/// What a policy matches: host glob, path template (on the upstream path), methods, and
/// what an MCP call names in its body.
#[derive(Debug, Clone)]
pub struct Matcher {
    pub host: Option<HostGlob>,
    pub path: Option<PathTemplate>,
    pub methods: Vec<Method>,
    /// `match.mcp`: only MCP calls naming these (read from the body, once).
    pub mcp: Option<McpMatch>,
}

/// What an MCP call must name for a policy to match it: each list given must hold one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpMatch {
    /// JSON-RPC methods (`tools/call`, `resources/read`).
    pub methods: Vec<String>,
    /// Tools a `tools/call` calls (globs).
    pub tools: Vec<NameGlob>,
    /// Tool or prompt names, or resource URIs (globs), of any call naming one.
    pub names: Vec<NameGlob>,
}

impl McpMatch {
    pub fn matches(&self, call: &Call) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| **m == *call.method))
            && (self.tools.is_empty() || call.tool().is_some_and(|t| names::any(&self.tools, t)))
            && (self.names.is_empty()
                || call
                    .name
                    .as_deref()
                    .is_some_and(|n| names::any(&self.names, n)))
    }
}

impl Matcher {
    /// Whether the request's head matches (host, method, path): all a policy without
    /// `match.mcp` asks.
    pub fn matches(&self, host: &str, method: &Method, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.contains(method))
            && self.host.as_ref().is_none_or(|h| h.matches(host))
            && self.path.as_ref().is_none_or(|p| p.matches(path))
    }

    /// Whether the MCP call read from the body (`None`: not one) matches `match.mcp`.
    pub fn matches_call(&self, call: Option<&Call>) -> bool {
        match &self.mcp {
            None => true,
            Some(m) => call.is_some_and(|c| m.matches(c)),
        }
    }

    /// As `/config` and `/policies` show it.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "host": self.host.as_ref().map(|h| h.as_str()),
            "path": self.path.as_ref().map(|t| t.as_str()),
            "methods": self.methods.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        });
        if let Some(m) = &self.mcp {
            fn globs(g: &[NameGlob]) -> Vec<&str> {
                g.iter().map(NameGlob::as_str).collect()
            }
            v["mcp"] = serde_json::json!({
                "methods": m.methods,
                "tools": globs(&m.tools),
                "names": globs(&m.names),
            });
        }
        v
    }

    /// Whether every request `other` matches is matched by `self` (so a later `other`
    /// never applies). Conservative: `false` when unsure.
    pub fn covers(&self, other: &Matcher) -> bool {
        let methods = self.methods.is_empty()
            || (!other.methods.is_empty()
                && other.methods.iter().all(|m| self.methods.contains(m)));
        let host = match (&self.host, &other.host) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a.covers(b),
        };
        let path = match (&self.path, &other.path) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a.covers(b),
        };
        // A policy matching only some MCP calls covers none it does not name.
        let mcp = match (&self.mcp, &other.mcp) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a == b,
        };
        methods && host && path && mcp
    }
}

// ---- config: as written, and its validation ----

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMatch {
    /// Host glob pattern (`api.example.com`, `*.example.com`). Absent: any host.
    pub host: Option<String>,
    /// Path template matched against the upstream path: literal segments, `{param}` for one segment, trailing `*` for any rest (`/repos/{owner}/{repo}/*`). Absent: any path.
    pub path: Option<String>,
    /// HTTP methods (`GET`, `POST`, ...). Empty: any method.
    pub methods: Vec<String>,
    /// MCP calls only (JSON-RPC POSTed to an MCP server), naming these in the body: the policy applies per tool (docs/mcp.md). Absent: any request.
    pub mcp: Option<RawMcpMatch>,
}

/// `match.mcp`: what an MCP call must name. Each list given must hold one of the call's.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RawMcpMatch {
    /// JSON-RPC methods (`tools/call`, `tools/list`, `resources/read`, `prompts/get`). Empty: any.
    pub methods: Vec<String>,
    /// Tools called (`tools/call` with `params.name`), exact or globs (`create_*`). Empty: any.
    pub tools: Vec<String>,
    /// Names the call acts on, of any method: a tool's or a prompt's name, a resource's URI (globs: `file:///docs/*`). Empty: any.
    pub names: Vec<String>,
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
    fn covering() {
        let m = |host: Option<&str>, path: Option<&str>, methods: &[Method]| Matcher {
            host: host.map(|h| HostGlob::new(h).unwrap()),
            path: path.map(|p| PathTemplate::new(p).unwrap()),
            methods: methods.to_vec(),
            mcp: None,
        };
        let all = m(None, None, &[]);
        let gh = m(Some("api.github.com"), Some("/repos/{o}/*"), &[Method::GET]);
        assert!(all.covers(&gh));
        assert!(!gh.covers(&all));
        assert!(m(Some("*.github.com"), Some("/repos/*"), &[]).covers(&gh));
        assert!(!m(Some("*.github.com"), Some("/repos/x/*"), &[]).covers(&gh));
        assert!(!m(None, Some("/repos/{o}"), &[]).covers(&gh));
        // A policy for some MCP calls covers none that it does not name.
        let tools = |t: &[&str]| McpMatch {
            methods: vec![],
            tools: t.iter().map(|t| NameGlob::new(t).unwrap()).collect(),
            names: vec![],
        };
        let create = Matcher {
            mcp: Some(tools(&["create_*"])),
            ..all.clone()
        };
        assert!(all.covers(&create));
        assert!(!create.covers(&all));
        assert!(create.covers(&create.clone()));
    }
}
