//! Upstream targets: where a request goes, parsed from `x-tollgate-host`, an absolute-form
//! URI (forward proxy), a CONNECT authority, or a declared route.

use crate::error::ProxyError;
use http::uri::{Authority, PathAndQuery, Scheme as UriScheme, Uri};
use http::{HeaderValue, header};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        if s.eq_ignore_ascii_case("https") {
            Some(Scheme::Https)
        } else if s.eq_ignore_ascii_case("http") {
            Some(Scheme::Http)
        } else {
            None
        }
    }

    pub fn uri_scheme(self) -> UriScheme {
        match self {
            Scheme::Http => UriScheme::HTTP,
            Scheme::Https => UriScheme::HTTPS,
        }
    }
}

/// A validated upstream: scheme, lower-case host (IPv6 without brackets) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    pub host: std::sync::Arc<str>,
    pub port: u16,
    /// `host[:port]` as sent in `Host` / `:authority` (default port omitted).
    pub authority: Authority,
    /// The same, ready to insert as the `Host` header (no per-request formatting).
    pub host_header: HeaderValue,
}

impl Target {
    /// Parses `host[:port]`; the port defaults by scheme. Rejects user-info, paths and
    /// anything that is not a plausible host name or IP literal.
    pub fn parse(scheme: Scheme, authority: &str) -> Result<Self, String> {
        if authority.contains('@') {
            return Err(format!("`{authority}` must not contain user-info"));
        }
        let auth = Authority::from_str(authority)
            .map_err(|_| format!("`{authority}` is not a valid host[:port]"))?;
        Self::from_authority(scheme, &auth)
    }

    /// A copy that shares no allocation with `self`: cloning it then counts references in
    /// memory of its own. Each data-plane worker keeps detached copies of the route
    /// targets, which every routed request clones, so that workers do not contend on one
    /// reference count.
    pub fn detached(&self) -> Self {
        Self {
            scheme: self.scheme,
            host: std::sync::Arc::from(&*self.host),
            port: self.port,
            authority: Authority::from_str(self.authority.as_str())
                .unwrap_or_else(|_| self.authority.clone()),
            host_header: HeaderValue::from_bytes(self.host_header.as_bytes())
                .unwrap_or_else(|_| self.host_header.clone()),
        }
    }

    pub fn from_authority(scheme: Scheme, auth: &Authority) -> Result<Self, String> {
        let raw_host = auth.host();
        if auth.as_str().contains('@') {
            return Err(format!("`{auth}` must not contain user-info"));
        }
        let host = raw_host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.');
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._:".contains(c))
        {
            return Err(format!("`{raw_host}` is not a valid host name"));
        }
        // Parse the port text ourselves: `Authority::port` hides an out-of-range port.
        let explicit_port = auth
            .as_str()
            .get(raw_host.len()..)
            .and_then(|r| r.strip_prefix(':'));
        let port = match explicit_port {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("`{auth}` has an invalid port"))?,
            None => scheme.default_port(),
        };
        if port == 0 {
            return Err(format!("`{auth}` has port 0"));
        }
        // An IP literal in any spelling a resolver accepts is replaced by its canonical
        // form, so the domain lists and the request's Host see the address it reaches.
        let host = match crate::egress::canonical_ip(host) {
            Some(ip) => ip.to_string(),
            None => host.to_ascii_lowercase(),
        };
        let authority =
            if port == scheme.default_port() && auth.port().is_none() && host == raw_host {
                auth.clone()
            } else if port == scheme.default_port() {
                Authority::from_str(&bracket(&host)).map_err(|e| e.to_string())?
            } else {
                Authority::from_str(&format!("{}:{port}", bracket(&host)))
                    .map_err(|e| e.to_string())?
            };
        let host_header = HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?;
        Ok(Self {
            scheme,
            host: host.into(),
            port,
            authority,
            host_header,
        })
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// The URI (and `Host`) of an upstream request: origin-form with `Host` the target's
/// authority when tollgate writes the request itself (the HTTP/1.1 pool for `http`, an
/// upgrade's own connection: `own_connection`); absolute-form without `Host` for
/// hyper-util's client (`https`), which writes `Host` or `:authority` itself.
pub fn upstream_uri(
    target: &Target,
    path_and_query: PathAndQuery,
    headers: &mut http::HeaderMap,
    own_connection: bool,
) -> Result<Uri, ProxyError> {
    if target.scheme == Scheme::Http || own_connection {
        set_host(headers, &target.host_header);
        return Ok(Uri::from(path_and_query));
    }
    headers.remove(header::HOST);
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(target.scheme.uri_scheme());
    uri.authority = Some(target.authority.clone());
    uri.path_and_query = Some(path_and_query);
    Uri::from_parts(uri).map_err(|e| ProxyError::BadTarget(e.to_string()))
}

/// Sets `Host` to `value`, in place when the request has exactly one (an HTTP/1.1
/// request always has): a pass over a handful of fields costs less than the hashed
/// insert, which the other cases (none, several) take.
fn set_host(headers: &mut http::HeaderMap, value: &http::HeaderValue) {
    let mut hosts = headers.iter_mut().filter(|(n, _)| *n == header::HOST);
    if let (Some((_, first)), None) = (hosts.next(), hosts.next()) {
        *first = value.clone();
        return;
    }
    headers.insert(header::HOST, value.clone());
}

/// The absolute URL of an upstream request (its URI may be origin-form).
pub fn url(target: &Target, uri: &Uri) -> String {
    if uri.scheme().is_some() {
        return uri.to_string();
    }
    let scheme = match target.scheme {
        Scheme::Http => "http",
        Scheme::Https => "https",
    };
    // Pushed, not `format!`: this runs for every captured call.
    let authority = target.authority.as_str();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = String::with_capacity(scheme.len() + 3 + authority.len() + path.len());
    for part in [scheme, "://", authority, path] {
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_set_in_place_or_inserted() {
        let v = http::HeaderValue::from_static("upstream:8080");
        let names = |h: &http::HeaderMap| -> Vec<String> {
            h.iter().map(|(n, v)| format!("{n}={v:?}")).collect()
        };
        let mut h = http::HeaderMap::new();
        h.append("accept", "*/*".parse().unwrap());
        h.append(header::HOST, "client".parse().unwrap());
        h.append("user-agent", "x".parse().unwrap());
        set_host(&mut h, &v);
        assert_eq!(
            names(&h),
            [
                "accept=\"*/*\"",
                "host=\"upstream:8080\"",
                "user-agent=\"x\""
            ]
        );
        h.append(header::HOST, "second".parse().unwrap());
        set_host(&mut h, &v);
        assert_eq!(h.get_all(header::HOST).iter().collect::<Vec<_>>(), [&v]);
        let mut h = http::HeaderMap::new();
        set_host(&mut h, &v);
        assert_eq!(h.get_all(header::HOST).iter().collect::<Vec<_>>(), [&v]);
    }

    #[test]
    fn parses_targets() {
        let t = Target::parse(Scheme::Https, "API.Example.com").unwrap();
        assert_eq!(
            (&*t.host, t.port, t.authority.as_str()),
            ("api.example.com", 443, "api.example.com")
        );
        let t = Target::parse(Scheme::Http, "localhost:8080").unwrap();
        assert_eq!(
            (&*t.host, t.port, t.authority.as_str()),
            ("localhost", 8080, "localhost:8080")
        );
        let t = Target::parse(Scheme::Http, "[::1]:9000").unwrap();
        assert_eq!((&*t.host, t.port), ("::1", 9000));
        for spelled in [
            "127.1",
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "[::ffff:127.0.0.1]",
        ] {
            let t = Target::parse(Scheme::Http, spelled).unwrap();
            assert_eq!(
                (&*t.host, t.authority.as_str()),
                ("127.0.0.1", "127.0.0.1"),
                "{spelled}"
            );
        }
        assert!(Target::parse(Scheme::Http, "user@host").is_err());
        assert!(Target::parse(Scheme::Http, "host:99999").is_err());
        assert!(Target::parse(Scheme::Http, "host:").is_err());
        assert!(Target::parse(Scheme::Http, "ho st").is_err());
        assert!(Target::parse(Scheme::Http, "host/path").is_err());
        assert!(Target::parse(Scheme::Http, "").is_err());
    }
}
