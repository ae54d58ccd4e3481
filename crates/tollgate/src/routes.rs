//! Declared routes: a path prefix on the listener mapped to an upstream base URL
//! (`/github/*` → `https://api.github.com`, prefix stripped).

use crate::secret::mask_url;
use crate::target::{Scheme, Target};
use http::Uri;

#[derive(Debug, Clone)]
pub struct Route {
    /// Normalised prefix: starts with `/`, no trailing `/` (except the root route `/`).
    pub prefix: String,
    pub target: Target,
    /// Base path of the upstream URL without trailing `/` (empty for none).
    pub base_path: String,
    /// The upstream URL with secrets masked, for `/config` and logs.
    pub display: String,
}

impl Route {
    /// `upstream` is the URL to use; `written` is the text in the config file (before
    /// `${ENV}` substitution), the only form shown in errors and `/config`.
    pub fn new(prefix: &str, upstream: &str, written: &str) -> Result<Self, String> {
        let shown = mask_url(written);
        let mut p = prefix
            .trim_end_matches('*')
            .trim_end_matches('/')
            .to_owned();
        if !prefix.starts_with('/') {
            return Err(format!("prefix `{prefix}` must start with `/`"));
        }
        if p.is_empty() {
            p.push('/');
        }
        let uri: Uri = upstream
            .parse()
            .map_err(|e| format!("upstream `{shown}` is not a URL: {e}"))?;
        let scheme = uri
            .scheme_str()
            .and_then(Scheme::parse)
            .ok_or_else(|| format!("upstream `{shown}` must start with http:// or https://"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| format!("upstream `{shown}` has no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "upstream `{shown}` must not contain user-info; credentials belong in headers"
            ));
        }
        let target = Target::from_authority(scheme, authority)
            .map_err(|_| format!("upstream `{shown}` has an invalid host or port"))?;
        if uri.query().is_some() {
            return Err("upstream base URL must not have a query string".into());
        }
        let base_path = uri.path().trim_end_matches('/').to_owned();
        Ok(Self {
            prefix: p,
            target,
            base_path,
            display: shown,
        })
    }

    /// The path left after the prefix when `path` is under this route.
    #[inline]
    fn strip<'a>(&self, path: &'a str) -> Option<&'a str> {
        if self.prefix == "/" {
            return Some(path);
        }
        let rest = path.strip_prefix(self.prefix.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}

/// Routes ordered longest prefix first, so the most specific route wins.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    /// Where each route as the file writes it is in `routes` (what `/config` and the
    /// reload's diff show: `routes[0]` is the file's first).
    written: Vec<usize>,
}

impl RouteTable {
    pub fn new(routes: Vec<Route>) -> Self {
        let mut order: Vec<(usize, Route)> = routes.into_iter().enumerate().collect();
        order.sort_by_key(|(_, r)| std::cmp::Reverse(r.prefix.len()));
        let mut written = vec![0; order.len()];
        for (at, (i, _)) in order.iter().enumerate() {
            written[*i] = at;
        }
        Self {
            routes: order.into_iter().map(|(_, r)| r).collect(),
            written,
        }
    }

    /// The routes in the file's order.
    pub fn as_written(&self) -> impl Iterator<Item = &Route> {
        self.written.iter().map(|&i| &self.routes[i])
    }

    /// The same table with detached targets (see [`Target::detached`]), for one worker.
    pub fn detached(&self) -> Self {
        Self {
            routes: self
                .routes
                .iter()
                .map(|r| Route {
                    target: r.target.detached(),
                    ..r.clone()
                })
                .collect(),
            written: self.written.clone(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The route for `path` and the path to send upstream (base path + rest); borrowed
    /// (no allocation) when the route has no base path.
    pub fn find<'a>(&self, path: &'a str) -> Option<(&Route, std::borrow::Cow<'a, str>)> {
        self.routes.iter().find_map(|r| {
            let rest = r.strip(path)?;
            if r.base_path.is_empty() && rest.starts_with('/') {
                return Some((r, std::borrow::Cow::Borrowed(rest)));
            }
            let mut upstream_path = String::with_capacity(r.base_path.len() + rest.len() + 1);
            upstream_path.push_str(&r.base_path);
            upstream_path.push_str(rest);
            if !upstream_path.starts_with('/') {
                upstream_path.insert(0, '/');
            }
            Some((r, std::borrow::Cow::Owned(upstream_path)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routes_are_shown_in_the_files_order() {
        let r = |p: &str| Route::new(p, "http://a.example", "http://a.example").unwrap();
        let t = RouteTable::new(vec![r("/a"), r("/longer/b"), r("/c")]);
        let written: Vec<&str> = t.as_written().map(|r| r.prefix.as_str()).collect();
        assert_eq!(written, ["/a", "/longer/b", "/c"]);
        assert_eq!(
            t.iter().next().unwrap().prefix,
            "/longer/b",
            "matched longest first"
        );
    }

    #[test]
    fn longest_prefix_wins_and_prefix_is_stripped() {
        let table = RouteTable::new(vec![
            Route::new(
                "/github/*",
                "https://api.github.com",
                "https://api.github.com",
            )
            .unwrap(),
            Route::new(
                "/github/raw",
                "https://raw.github.com/base/",
                "https://raw.github.com/base/",
            )
            .unwrap(),
            Route::new("/", "http://fallback:8080", "http://fallback:8080").unwrap(),
        ]);
        let (r, p) = table.find("/github/users/octocat").unwrap();
        assert_eq!((&*r.target.host, &*p), ("api.github.com", "/users/octocat"));
        let (r, p) = table.find("/github/raw/x").unwrap();
        assert_eq!((&*r.target.host, &*p), ("raw.github.com", "/base/x"));
        let (r, p) = table.find("/github").unwrap();
        assert_eq!((&*r.target.host, &*p), ("api.github.com", "/"));
        let (r, p) = table.find("/githubx").unwrap();
        assert_eq!((&*r.target.host, &*p), ("fallback", "/githubx"));
        assert!(Route::new("github", "https://x", "https://x").is_err());
        assert!(Route::new("/x", "ftp://x", "ftp://x").is_err());
        assert!(Route::new("/x", "https://x/?a=1", "https://x/?a=1").is_err());
    }
}
