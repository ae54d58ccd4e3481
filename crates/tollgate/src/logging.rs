//! Process logging with `tracing`: text or JSON to standard error; `RUST_LOG` wins over `log.level`.

use tracing_subscriber::EnvFilter;

/// The `log:` section as validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    pub level: String,
    pub json: bool,
    pub access_log: bool,
    pub access_log_file: Option<std::path::PathBuf>,
    pub queue_capacity: usize,
}

/// Installs the global subscriber once; later calls (tests, reloads) are no-ops.
pub fn init(log: &Log) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    // Colours only on a terminal: a file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if log.json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
