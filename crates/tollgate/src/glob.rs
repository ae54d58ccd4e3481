//! Host glob patterns (`*.example.com`, `api.*.com`, `*`), compiled once at config load.

/// A compiled, case-insensitive glob over host names; `*` matches any run of characters.
#[derive(Debug, Clone)]
pub struct HostGlob {
    source: String,
    /// The pattern split on `*`: the first piece must be a prefix, the last a suffix,
    /// the middle ones must appear in order.
    pieces: Vec<String>,
}

/// Two globs are the same pattern when their sources are (a reload compares configs).
impl PartialEq for HostGlob {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl HostGlob {
    pub fn new(pattern: &str) -> Result<Self, String> {
        let mut p = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
        if p.is_empty() {
            return Err("empty host pattern".into());
        }
        // A URL pasted where a host goes (`https://api.openai.com/v1`): say to write its
        // host, before the `:` reads as a port.
        if let Some((scheme, rest)) = p.split_once("://") {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
            let host = match host.rsplit_once(':') {
                Some((h, port))
                    if !h.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    h
                }
                _ => host,
            };
            return Err(format!(
                "`{pattern}` is a URL ({scheme}://…), not a host: write the host alone, `{host}` (a policy matches a host on every scheme, port and path)"
            ));
        }
        // `host:port` (one colon, not an IPv6 literal) would never match: targets are
        // matched by host alone.
        if let Some((host, port)) = p.split_once(':')
            && !port.contains(':')
            && !p.starts_with('[')
        {
            return Err(format!(
                "`{pattern}` has a port; a policy matches a host on every port: write `{host}`"
            ));
        }
        // An IP literal matches its canonical form, which is how targets spell it
        // (`127.1`, `[::ffff:127.0.0.1]` and `2130706433` all become `127.0.0.1`).
        // Only an IP literal may hold `:`, `[` or `]` (`[::1]`, `::ffff:10.0.0.1`).
        let ip = crate::egress::canonical_ip(&p);
        let extra = if ip.is_some() { ":[]" } else { "" };
        if let Some(ip) = ip {
            p = ip.to_string();
        }
        if let Some(c) = p
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-._*".contains(*c) || extra.contains(*c)))
        {
            return Err(format!(
                "host pattern `{pattern}` contains `{c}`; use letters, digits, `-`, `.` and `*`"
            ));
        }
        Ok(Self {
            source: pattern.to_owned(),
            pieces: p.split('*').map(str::to_owned).collect(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether this pattern matches every host `other` matches (conservative: a pattern
    /// with wildcards is covered only by `*` or by itself).
    pub fn covers(&self, other: &HostGlob) -> bool {
        match other.pieces.as_slice() {
            [literal] => self.matches(literal),
            _ => self.pieces == other.pieces || self.pieces.iter().all(|p| p.is_empty()),
        }
    }

    /// `host` must already be lower-case without a trailing dot (as [`crate::target`] produces).
    pub fn matches(&self, host: &str) -> bool {
        let pieces = &self.pieces;
        if pieces.len() == 1 {
            return host == pieces[0];
        }
        let (first, last) = (&pieces[0], &pieces[pieces.len() - 1]);
        if host.len() < first.len() + last.len()
            || !host.starts_with(first.as_str())
            || !host.ends_with(last.as_str())
        {
            return false;
        }
        let mut middle = &host[first.len()..host.len() - last.len()];
        for piece in &pieces[1..pieces.len() - 1] {
            match middle.find(piece.as_str()) {
                Some(i) => middle = &middle[i + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::HostGlob;

    fn m(p: &str, h: &str) -> bool {
        HostGlob::new(p).unwrap().matches(h)
    }

    #[test]
    fn globs() {
        assert!(m("*.example.com", "api.example.com"));
        assert!(m("*.example.com", "a.b.example.com"));
        assert!(!m("*.example.com", "example.com"));
        assert!(!m("*.example.com", "evilexample.com.attacker.net"));
        assert!(m("API.Example.com", "api.example.com"));
        assert!(m("api.*.com", "api.foo.com"));
        assert!(!m("api.*.com", "api.com"));
        assert!(m("*", "anything"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxcyyb"));
        assert!(m("127.1", "127.0.0.1"));
        assert!(m("[::FFFF:127.0.0.1]", "127.0.0.1"));
        assert!(m("[::1]", "::1"));
        assert!(HostGlob::new("bad/host").is_err());
        assert!(HostGlob::new("").is_err());
    }

    #[test]
    fn a_url_gets_its_host_as_the_fix_and_brackets_only_hold_an_ip() {
        for (url, host) in [
            ("https://api.openai.com/", "api.openai.com"),
            ("http://user:pw@api.x.com:8443/v1?q=1", "api.x.com"),
            ("HTTPS://API.OpenAI.com", "api.openai.com"),
        ] {
            let e = HostGlob::new(url).unwrap_err();
            assert!(
                e.contains("is a URL") && e.contains(&format!("`{host}`")),
                "{e}"
            );
            assert!(!e.contains("write `https`"), "{e}");
        }
        for bad in ["api.[github.com", "api]x.com", "a:b:c", "[not-an-ip]"] {
            assert!(HostGlob::new(bad).is_err(), "{bad} accepted");
        }
        assert!(HostGlob::new("[2001:db8::1]").is_ok());
    }
}
