//! `tollgate ca init | show | export`: the local certificate authority of HTTPS
//! interception, in a data directory (`--data-dir`, default
//! [`tollgate::intercept::ca::Ca::default_dir`]). See docs/interception.md.

use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tollgate::intercept::ca::{CERT_FILE, Ca, KEY_FILE};

#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Make a new CA (an ECDSA P-256 key, valid ten years): the certificate world-readable,
    /// the key readable by its owner only (0600).
    Init {
        #[command(flatten)]
        dir: DataDir,
        /// Replace the CA already there (clients that trust the old one must be given the
        /// new one).
        #[arg(long)]
        force: bool,
    },
    /// Print where the CA is and its SHA-256 fingerprint (as `openssl x509 -fingerprint
    /// -sha256` and browsers show it).
    Show {
        #[command(flatten)]
        dir: DataDir,
    },
    /// Print the CA certificate (never the key), for a trust store.
    Export {
        #[command(flatten)]
        dir: DataDir,
        /// `pem` (text; most trust stores, `NODE_EXTRA_CA_CERTS`, `SSL_CERT_FILE`) or
        /// `der` (binary; Java's keytool, Windows).
        #[arg(long, value_enum, default_value_t = Format::Pem)]
        format: Format,
        /// Write to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct DataDir {
    /// Where the CA is kept (default: $TOLLGATE_DATA_DIR, else $XDG_DATA_HOME/tollgate,
    /// else ~/.local/share/tollgate).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

impl DataDir {
    fn path(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(Ca::default_dir)
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Pem,
    Der,
}

pub fn run(cmd: CaCommand) -> ExitCode {
    match exec(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn exec(cmd: CaCommand) -> Result<(), String> {
    match cmd {
        CaCommand::Init { dir, force } => {
            let dir = dir.path();
            let ca = Ca::create(&dir, force).map_err(|e| e.to_string())?;
            crate::out(&format!(
                "made a CA in {}\n  certificate: {}\n  key:         {} (mode 0600)\n  SHA-256:     {}\nTrust the certificate where your applications run: docs/interception.md.\n",
                dir.display(),
                dir.join(CERT_FILE).display(),
                dir.join(KEY_FILE).display(),
                ca.fingerprint()
            ));
            Ok(())
        }
        CaCommand::Show { dir } => {
            let dir = dir.path();
            let ca = Ca::load_dir(&dir).map_err(|e| e.to_string())?;
            crate::out(&format!(
                "certificate: {}\nkey:         {}\nSHA-256:     {}\n",
                dir.join(CERT_FILE).display(),
                dir.join(KEY_FILE).display(),
                ca.fingerprint()
            ));
            Ok(())
        }
        CaCommand::Export { dir, format, out } => {
            let ca = Ca::load_dir(&dir.path()).map_err(|e| e.to_string())?;
            let bytes = match format {
                Format::Pem => ca.pem().as_bytes(),
                Format::Der => ca.der(),
            };
            match out {
                Some(path) => std::fs::write(&path, bytes)
                    .map_err(|e| format!("cannot write {}: {e}", path.display())),
                None => {
                    // A reader that closed the pipe has what it wanted (see `crate::out`).
                    let mut o = std::io::stdout().lock();
                    let _ = o.write_all(bytes).and_then(|()| o.flush());
                    Ok(())
                }
            }
        }
    }
}
