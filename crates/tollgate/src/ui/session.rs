//! Dashboard logins. With `admin.token` set, the login form (`POST /ui/login`) trades the
//! token for a session: a random id in an `HttpOnly`, `SameSite=Strict` cookie that
//! expires after `admin.ui.session_ttl`, so the token never sits in a URL, a log line or
//! the browser's history. Sessions live in memory, each bound to the token it was opened
//! with: a changed token (a reload) ends them all.

use http::HeaderValue;
use ring::rand::SecureRandom;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const COOKIE: &str = "tollgate_session";

struct Open {
    expires: Instant,
    opened: Instant,
    /// SHA-256 of the token it was opened with.
    token: [u8; 32],
}

#[derive(Default)]
pub struct Sessions {
    open: Mutex<HashMap<String, Open>>,
}

/// Whether two secrets are equal, in time that depends only on their lengths.
pub fn same_secret(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn digest(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl Sessions {
    /// A new session for `token`; past `max` open sessions the oldest ends.
    pub fn open(&self, token: &str, ttl: Duration, max: usize) -> Option<String> {
        let mut id = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut id).ok()?;
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, s| s.expires > now);
        while open.len() >= max.max(1) {
            let oldest = open
                .iter()
                .min_by_key(|(_, s)| s.opened)
                .map(|(k, _)| k.clone())?;
            open.remove(&oldest);
        }
        open.insert(
            id.clone(),
            Open {
                expires: now + ttl,
                opened: now,
                token: digest(token),
            },
        );
        Some(id)
    }

    /// Whether `id` is an open session of `token`.
    pub fn valid(&self, id: &str, token: &str) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        match open.get(id) {
            Some(s) if s.expires > Instant::now() && s.token == digest(token) => true,
            Some(_) => {
                open.remove(id);
                false
            }
            None => false,
        }
    }

    pub fn close(&self, id: &str) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// The session id in the request's `Cookie` header fields (RFC 6265 §5.4).
pub fn cookie(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// `Set-Cookie` for a new session (RFC 6265 §4.1; `SameSite`: RFC 6265bis). No `Secure`:
/// the admin listener speaks plain HTTP, where a browser would drop such a cookie.
pub fn set_cookie(id: &str, ttl: Duration) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict",
        ttl.as_secs()
    ))
    .expect("hex id and digits")
}

/// `Set-Cookie` that removes the session cookie.
pub fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("tollgate_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_valid_for_its_token_until_closed() {
        let s = Sessions::default();
        let id = s.open("t0ken", Duration::from_secs(60), 4).unwrap();
        assert_eq!(id.len(), 64);
        assert!(s.valid(&id, "t0ken"));
        assert!(!s.valid(&id, "rotated"), "a new token ends it");
        assert!(!s.valid(&id, "t0ken"), "and it stays ended");
        let id = s.open("t0ken", Duration::from_secs(60), 4).unwrap();
        s.close(&id);
        assert!(!s.valid(&id, "t0ken"));
        assert!(!s.valid("", "t0ken"));
    }

    #[test]
    fn past_the_most_sessions_the_oldest_ends_and_expired_ones_go() {
        let s = Sessions::default();
        let first = s.open("t", Duration::from_secs(60), 2).unwrap();
        let second = s.open("t", Duration::from_secs(60), 2).unwrap();
        let third = s.open("t", Duration::from_secs(60), 2).unwrap();
        assert!(!s.valid(&first, "t"));
        assert!(s.valid(&second, "t") && s.valid(&third, "t"));
        let gone = s.open("t", Duration::ZERO, 2).unwrap();
        assert!(!s.valid(&gone, "t"));
    }

    #[test]
    fn finds_the_cookie_among_others() {
        let mut h = http::HeaderMap::new();
        h.append(http::header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        h.append(
            http::header::COOKIE,
            HeaderValue::from_static("x=y; tollgate_session=abc"),
        );
        assert_eq!(cookie(&h), Some("abc"));
        assert_eq!(
            set_cookie("abc", Duration::from_secs(60)).to_str().unwrap(),
            "tollgate_session=abc; Path=/; Max-Age=60; HttpOnly; SameSite=Strict"
        );
    }
}
