//! Validation of the `intercept` section: host globs, and the CA loaded as `run` loads it
//! (a missing, unreadable or mismatched CA fails `check`, at `intercept.ca`, saying what
//! to run or write).

use super::raw::RawIntercept;
use crate::fields::Errors;
use crate::glob::HostGlob;
use crate::intercept::Intercept;
use crate::intercept::ca::{Ca, CaError};
use std::path::Path;
use std::sync::Arc;

pub(super) fn intercept(e: &mut Errors, raw: &RawIntercept) -> Intercept {
    let hosts: Vec<HostGlob> = raw
        .hosts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| e.check(&format!("intercept.hosts[{i}]"), HostGlob::new(p)))
        .collect();
    // The CA is loaded when it will be used: with no host named, interception is off
    // and its files need not exist.
    let ca = match &raw.ca {
        _ if raw.hosts.is_empty() => None,
        Some(files) => {
            let cert = e.env("intercept.ca.cert_file", &files.cert_file);
            let key = e.env("intercept.ca.key_file", &files.key_file);
            cert.zip(key).and_then(|(cert, key)| {
                let loaded = Ca::load(Path::new(&cert), Path::new(&key));
                loaded_or_reported(e, loaded, String::new())
            })
        }
        None => {
            let (dir, chosen_by) = Ca::default_dir_and_why();
            let loaded = Ca::load_dir(&dir);
            let fix = format!(
                " (the data directory {chosen_by}): run `tollgate ca init` there, or write `intercept.ca: {{cert_file: …, key_file: …}}` to use your own"
            );
            loaded_or_reported(e, loaded, fix)
        }
    };
    Intercept {
        hosts,
        ca: ca.map(Arc::new),
        tunnel_refused_for: raw.tunnel_refused_for.get(),
        max_hosts: raw.max_hosts.get(),
    }
}

/// The CA, or its error at `intercept.ca` (`fix` after a missing CA's message). A CA
/// whose files are absent is a warning under `check --env-optional`: CI checks a file
/// whose CA exists only where the gateway runs.
fn loaded_or_reported(e: &mut Errors, loaded: Result<Ca, CaError>, fix: String) -> Option<Ca> {
    let absent = match &loaded {
        Err(CaError::Missing { .. }) => true,
        Err(CaError::Io { source, .. }) => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    };
    match loaded {
        Ok(ca) => Some(ca),
        Err(err) => {
            let message = match &err {
                CaError::Missing { dir } if !fix.is_empty() => {
                    format!("no CA in {}{fix}", dir.display())
                }
                _ => err.to_string(),
            };
            if absent {
                e.error_or_warning("intercept.ca", message);
            } else {
                e.check::<()>("intercept.ca", Err(message));
            }
            None
        }
    }
}
