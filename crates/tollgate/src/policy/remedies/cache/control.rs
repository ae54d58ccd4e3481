//! The provider's `Cache-Control` (RFC 9111 §5.2.2) as the cache honours it.

use http::HeaderMap;
use http::header::{AUTHORIZATION, CACHE_CONTROL};
use std::time::Duration;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Directives {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub max_age: Option<Duration>,
    pub s_maxage: Option<Duration>,
}

pub fn parse(h: &HeaderMap) -> Directives {
    let mut d = Directives::default();
    for v in h.get_all(CACHE_CONTROL) {
        let Ok(v) = v.to_str() else { continue };
        for item in v.split(',') {
            let (name, arg) = match item.split_once('=') {
                Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                None => (item.trim(), None),
            };
            let secs = || {
                arg.and_then(|a| a.parse::<u64>().ok())
                    .map(Duration::from_secs)
            };
            match name.to_ascii_lowercase().as_str() {
                "no-store" => d.no_store = true,
                "no-cache" => d.no_cache = true,
                "private" => d.private = true,
                "max-age" => d.max_age = secs(),
                "s-maxage" => d.s_maxage = secs(),
                _ => {}
            }
        }
    }
    d
}

/// Which of the fields the cache reads in a request are there, from one pass over its
/// field names: most requests carry neither, and a pass over a handful of names costs
/// less than the lookups it spares (each a hash of the name and a probe of the map).
#[derive(Clone, Copy, Default)]
pub struct Carries {
    pub cache_control: bool,
    /// The caller's own credential: part of the key, and kept out of shared entries.
    pub authorization: bool,
}

impl Carries {
    pub fn of(h: &HeaderMap) -> Self {
        let mut c = Self::default();
        for n in h.keys() {
            if n == CACHE_CONTROL {
                c.cache_control = true;
            } else if n == AUTHORIZATION {
                c.authorization = true;
            }
        }
        c
    }

    /// Whether the request asks not to be served from the cache (`no-cache`,
    /// `no-store`).
    pub fn bypasses(&self, h: &HeaderMap) -> bool {
        self.cache_control && {
            let d = parse(h);
            d.no_cache || d.no_store
        }
    }
}
