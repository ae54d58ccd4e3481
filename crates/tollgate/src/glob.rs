//! Host glob patterns (`*.example.com`, `api.*.com`, `*`), compiled once at config load.

/// A compiled, case-insensitive glob over host names; `*` matches any run of characters.
#[derive(Debug, Clone)]
pub struct HostGlob {
    source: String,
    /// The pattern split on `*`: the first piece must be a prefix, the last a suffix,
    /// the middle ones must appear in order.
    pieces: Vec<String>,
}

impl HostGlob {
    pub fn new(pattern: &str) -> Result<Self, String> {
        let mut p = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
        if p.is_empty() {
            return Err("empty host pattern".into());
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
        if let Some(ip) = crate::egress::canonical_ip(&p) {
            p = ip.to_string();
        }
        if let Some(c) = p
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-._*:[]".contains(*c)))
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
}
