//! Validation of the `intercept` section: host globs, and the CA loaded as `run` loads it
//! (a missing, unreadable or mismatched CA fails `check`, at `intercept.ca`, saying what
//! to run or write).

use super::raw::RawIntercept;
use super::validate::Errors;
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
                e.check("intercept.ca", loaded.map_err(|err| err.to_string()))
            })
        }
        None => {
            let loaded = Ca::load_dir(&Ca::default_dir()).map_err(|err| match err {
                CaError::Missing { dir } => format!(
                    "no CA in {}: run `tollgate ca init` there (the default data directory), or write `intercept.ca: {{cert_file: …, key_file: …}}` to use your own",
                    dir.display()
                ),
                other => other.to_string(),
            });
            e.check("intercept.ca", loaded)
        }
    };
    Intercept {
        hosts,
        ca: ca.map(Arc::new),
        tunnel_refused_for: raw.tunnel_refused_for.get(),
        max_hosts: raw.max_hosts.get(),
    }
}
