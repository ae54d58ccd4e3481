//! `tollgate har list | tail | show | mock`: captured HAR files from the command line.
//! `list` and `tail` filter by host, status and policy, as a table or JSON; `tail`
//! follows the files as the gateway appends to them.

use clap::{Args, Subcommand};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tollgate::config::append;
use tollgate::diagnosis::har::read::{self, Filter};

#[derive(Debug, Subcommand)]
pub enum HarCommand {
    /// List the entries of a HAR file, or of every tollgate HAR file in a directory.
    List {
        /// A HAR file or a directory of them (diagnosis.har.file.dir).
        path: PathBuf,
        #[command(flatten)]
        show: Shown,
    },
    /// Print the last entries, then each new one as the gateway writes it (Ctrl-C ends).
    Tail {
        /// A HAR file or a directory of them (diagnosis.har.file.dir).
        path: PathBuf,
        #[command(flatten)]
        show: Shown,
        /// How many of the entries already there to print first.
        #[arg(long, short = 'n', default_value_t = 10)]
        lines: usize,
    },
    /// Print one entry as JSON.
    Show {
        path: PathBuf,
        /// The entry's number in `list`, or its request id.
        entry: String,
    },
    /// Print a config with a mock policy answering the entry's request with its response,
    /// or add that policy to a config file's `policies:` (`--append`).
    Mock {
        path: PathBuf,
        /// The entry's number in `list`, or its request id.
        entry: String,
        /// Add the policy to this config file (created if missing), under its
        /// `policies:` list; comments and formatting are kept, a taken name gets a suffix.
        #[arg(long, value_name = "FILE")]
        append: Option<PathBuf>,
    },
}

/// Which entries `list` and `tail` print, and how.
#[derive(Debug, Args)]
pub struct Shown {
    /// Only requests to this host (`api.github.com`, or `host:port`).
    #[arg(long)]
    host: Option<String>,
    /// Only this status (`429`) or class (`5xx`).
    #[arg(long)]
    status: Option<String>,
    /// Only requests this policy ran on.
    #[arg(long)]
    policy: Option<String>,
    /// One JSON object per entry and line (number, request id, time, method, status,
    /// duration, URL, policy, remedies, error) instead of a table.
    #[arg(long)]
    json: bool,
}

impl Shown {
    fn filter(&self) -> Result<Filter, String> {
        let f = Filter {
            host: self.host.clone(),
            status: self.status.clone(),
            policy: self.policy.clone(),
        };
        f.check().map(|()| f)
    }

    /// The entry numbered `n`, as a table line or a JSON line.
    fn line(&self, n: usize, e: &Value) -> String {
        if self.json {
            format!("{}\n", read::summary(n, e))
        } else {
            read::list_line(n, e)
        }
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

pub fn har(cmd: HarCommand) -> ExitCode {
    match cmd {
        HarCommand::List { path, show } => list(&path, &show),
        HarCommand::Tail { path, show, lines } => tail(&path, &show, lines),
        HarCommand::Show { path, entry } => one(&path, &entry, |e| {
            crate::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(e).unwrap_or_default()
            ));
            Ok(())
        }),
        HarCommand::Mock {
            path,
            entry,
            append,
        } => one(&path, &entry, |e| match append {
            Some(file) => append::append_to_file(&file, e),
            None => read::mock(e).map(|yaml| crate::out(&yaml)),
        }),
    }
}

fn list(path: &Path, show: &Shown) -> ExitCode {
    let (filter, entries) = match show.filter().and_then(|f| Ok((f, read::load(path)?))) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let mut out = if show.json {
        String::new()
    } else {
        read::list_head()
    };
    for (i, e) in entries.iter().enumerate().filter(|(_, e)| filter.keeps(e)) {
        out.push_str(&show.line(i + 1, e));
    }
    crate::out(&out);
    ExitCode::SUCCESS
}

/// How often `tail` reads the files again.
const POLL: Duration = Duration::from_millis(250);

/// Prints the last `lines` kept entries, then follows: each poll prints the entries after
/// the last one printed. Found by its request id, or, once its file has been rotated
/// away, by time.
fn tail(path: &Path, show: &Shown, lines: usize) -> ExitCode {
    let filter = match show.filter() {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let mut last: Option<(Value, Value)> = None;
    let mut first = true;
    if !show.json && !written(&read::list_head()) {
        return ExitCode::SUCCESS;
    }
    loop {
        // A directory with no file yet, or a file being created: try again.
        let entries = read::load(path).unwrap_or_default();
        let start = match &last {
            None => 0,
            Some((id, started)) => entries
                .iter()
                .rposition(|e| &e["_tollgateRequestId"] == id && !id.is_null())
                .map(|i| i + 1)
                .unwrap_or_else(|| {
                    entries
                        .iter()
                        .position(|e| e["startedDateTime"].as_str() > started.as_str())
                        .unwrap_or(entries.len())
                }),
        };
        let mut new: Vec<(usize, &Value)> = entries
            .iter()
            .enumerate()
            .skip(start)
            .filter(|(_, e)| filter.keeps(e))
            .collect();
        if first {
            new = new.split_off(new.len().saturating_sub(lines));
            first = false;
        }
        let mut out = String::new();
        for (i, e) in &new {
            out.push_str(&show.line(i + 1, e));
        }
        // A reader that went away (`| head`) ends the tail.
        if !out.is_empty() && !written(&out) {
            return ExitCode::SUCCESS;
        }
        if let Some(e) = entries.get(start..).and_then(<[Value]>::last) {
            last = Some((
                e["_tollgateRequestId"].clone(),
                e["startedDateTime"].clone(),
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Writes and flushes `text` to standard output: whether the reader took it.
fn written(text: &str) -> bool {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())
        .and_then(|()| o.flush())
        .is_ok()
}

/// Runs `then` on one entry of the file, found by number or request id.
fn one(path: &Path, which: &str, then: impl FnOnce(&Value) -> Result<(), String>) -> ExitCode {
    let entries = match read::load(path) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let Some(entry) = read::find(&entries, which) else {
        return fail(format!(
            "no entry `{which}` ({} entries; give a number from `tollgate har list` or a request id)",
            entries.len()
        ));
    };
    match then(entry) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
