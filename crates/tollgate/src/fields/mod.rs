//! Reading config values: units, `${ENV}` substitution, range checks, and the errors
//! found so far, each at its field path. The bottom layer every part of the config
//! (gateway settings, policies and their remedies, endpoints, diagnosis) validates with;
//! it imports nothing of the gateway.

pub mod env;
mod secret_text;
pub mod units;
mod values;
pub mod words;

use ipnet::IpNet;
pub use secret_text::{SecretText, fingerprinting, is_env_reference, masked};
use std::fmt;
use std::net::SocketAddr;
pub use values::{MAX_COUNT, method};

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted field path, e.g. `upstream.pool.idle_timeout` or `routes[1].prefix`; empty for the whole file.
    pub path: String,
    pub message: String,
    /// 1-based line and column, when the parser knows them.
    pub location: Option<(usize, usize)>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some((l, c)) = self.location {
            write!(f, " (line {l}, column {c})")?;
        }
        Ok(())
    }
}

/// The errors found so far, and (with `check --env-optional`) the unset variables
/// reported as warnings instead: `path: ${NAME}`.
pub struct Errors(pub Vec<ConfigError>, pub Option<Vec<String>>);

impl Errors {
    pub fn check<T>(&mut self, path: &str, r: Result<T, String>) -> Option<T> {
        r.map_err(|message| {
            self.0.push(ConfigError {
                path: path.to_owned(),
                message,
                location: None,
            })
        })
        .ok()
    }

    /// `${ENV}` substitution and a check of the result, whose messages show the text as
    /// written: a secret substituted into it never reaches a message.
    ///
    /// Under `check --env-optional` a value holding an unset variable that does not pass
    /// (`${REDIS_URL}` reads `unset-REDIS_URL`, not a URL) is checked as one of
    /// [`STAND_INS`] instead, the first that passes; if none does it is left out with the
    /// variable's warning alone, never an error the real value would not have.
    pub fn env_checked<T>(
        &mut self,
        path: &str,
        written: &str,
        check: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        self.env_checked_at(path, path, written, check)
    }

    /// [`Errors::env_checked`] whose check's errors belong to `checked_at` (a route's,
    /// for its upstream's value), the variable's to `path`.
    pub fn env_checked_at<T>(
        &mut self,
        path: &str,
        checked_at: &str,
        written: &str,
        check: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let (value, unset) = self.env_noting(path, written)?;
        match check(&value) {
            Ok(v) => Some(v),
            Err(_) if unset => STAND_INS.iter().find_map(|s| check(s).ok()),
            Err(m) => self.check(checked_at, Err(as_written(m, &value, written))),
        }
    }

    /// Whether unset `${VARS}` are warnings here (`check --env-optional`), not errors.
    pub fn env_optional(&self) -> bool {
        self.1.is_some()
    }

    /// A problem that `check --env-optional` reports as a warning (what exists only where
    /// the gateway runs: a CA's files), and otherwise an error.
    pub fn error_or_warning(&mut self, path: &str, message: String) {
        match &mut self.1 {
            Some(warnings) => warnings.push(format!("{path}: {message}")),
            None => {
                self.check::<()>(path, Err(message));
            }
        }
    }

    pub fn addr(&mut self, path: &str, s: &str) -> SocketAddr {
        self.check(
            path,
            s.parse()
                .map_err(|_| format!("`{s}` is not an address; write e.g. `127.0.0.1:8000`")),
        )
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    pub fn env(&mut self, path: &str, s: &str) -> Option<String> {
        self.env_noting(path, s).map(|(v, _)| v)
    }

    /// [`Errors::env`], and whether a variable in it was unset (`--env-optional`).
    fn env_noting(&mut self, path: &str, s: &str) -> Option<(String, bool)> {
        let mut unset = false;
        let r = match &mut self.1 {
            Some(warnings) => env::expand_lenient(s, |name| {
                unset = true;
                warnings.push(format!("{path}: environment variable `{name}` is not set"))
            }),
            None => env::expand(s),
        };
        self.check(path, r).map(|v| (v, unset))
    }

    pub fn nets(&mut self, path: &str, list: &[String]) -> Vec<IpNet> {
        list.iter()
            .enumerate()
            .filter_map(|(i, n)| self.check(&format!("{path}[{i}]"), parse_net(n)))
            .collect()
    }
}

/// What an unset variable's value is checked as under `check --env-optional` when its
/// placeholder does not pass: a Redis URL, an HTTP(S) URL, a word.
pub const STAND_INS: [&str; 3] = [
    "redis://unset.invalid:6379",
    "https://unset.invalid",
    "unset",
];

/// A message about a `${ENV}`-substituted value, showing the text as written: a secret
/// substituted into it never reaches a message.
pub fn as_written(message: String, value: &str, written: &str) -> String {
    if value == written {
        message
    } else {
        message.replace(value, written)
    }
}

/// An address or CIDR range; an address alone is a range of one.
fn parse_net(s: &str) -> Result<IpNet, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<IpNet>() {
        return Ok(n.trunc());
    }
    match crate::egress::canonical_ip(t) {
        Some(ip) => Ok(IpNet::from(ip)),
        None => Err(format!(
            "`{s}` is not an address or CIDR range; write e.g. `10.0.0.0/8`, `192.0.2.7` or `fd00::/8`"
        )),
    }
}

/// `true`: the default of a switch that is on unless written `false`.
pub fn yes() -> bool {
    true
}
