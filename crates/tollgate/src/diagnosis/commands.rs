//! `tollgate discover` and `tollgate har`: diagnosis from the command line.

use super::har::read;
use clap::Subcommand;
use http_body_util::BodyExt;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DiscoverArgs {
    /// The admin listener's URL.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub admin: String,
    /// The admin token, when `admin.token` is set.
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the JSON of `GET /discover` instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum HarCommand {
    /// List the entries of a HAR file, or of every tollgate HAR file in a directory.
    List {
        /// A HAR file or a directory of them (diagnosis.har.file.dir).
        path: PathBuf,
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

pub fn har(cmd: HarCommand) -> ExitCode {
    let (path, which) = match &cmd {
        HarCommand::List { path } => (path, None),
        HarCommand::Show { path, entry } | HarCommand::Mock { path, entry, .. } => {
            (path, Some(entry))
        }
    };
    let entries = match read::load(path) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(which) = which else {
        crate::stdout::out(&read::list(&entries));
        return ExitCode::SUCCESS;
    };
    let Some(entry) = read::find(&entries, which) else {
        eprintln!(
            "error: no entry `{which}` ({} entries; give a number from `tollgate har list` or a request id)",
            entries.len()
        );
        return ExitCode::FAILURE;
    };
    match cmd {
        HarCommand::Mock { append, .. } => {
            let done = match append {
                Some(file) => append_to(&file, entry),
                None => read::mock(entry).map(|yaml| crate::stdout::out(&yaml)),
            };
            match done {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            crate::stdout::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(entry).unwrap_or_default()
            ));
            ExitCode::SUCCESS
        }
    }
}

/// Adds the entry's mock policy to `file`, written whole or not at all (a temporary file
/// renamed over it).
fn append_to(file: &std::path::Path, entry: &Value) -> Result<(), String> {
    let policy = read::mock_policy(entry)?;
    let config = match std::fs::read_to_string(file) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let out = super::har::append::append(&config, policy)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if let Err(errors) = crate::config::parse(&out) {
        let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        return Err(format!(
            "{} would not parse with the mock added, so it is left as it was: {}",
            file.display(),
            shown.join("; ")
        ));
    }
    let tmp = file.with_extension("tollgate-tmp");
    std::fs::write(&tmp, &out)
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    eprintln!("added a mock policy to {}", file.display());
    Ok(())
}

pub async fn discover(args: DiscoverArgs) -> ExitCode {
    match fetch(&args).await {
        Ok(v) if args.json => {
            crate::stdout::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(&v).unwrap_or_default()
            ));
            ExitCode::SUCCESS
        }
        Ok(v) => {
            crate::stdout::out(&table(&v));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn fetch(args: &DiscoverArgs) -> Result<Value, String> {
    let base: http::Uri = args
        .admin
        .parse()
        .map_err(|e| format!("--admin `{}`: {e}", args.admin))?;
    if base.scheme_str() != Some("http") {
        return Err(format!(
            "--admin `{}`: write the admin listener's http:// URL",
            args.admin
        ));
    }
    let auth = base
        .authority()
        .ok_or("--admin needs a host and port")?
        .clone();
    let port = auth.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((auth.host(), port))
        .await
        .map_err(|e| format!("cannot reach the admin listener at {auth}: {e} (is tollgate running? --admin sets the address)"))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = http::Request::get("/discover").header(http::header::HOST, auth.as_str());
    if let Some(t) = &args.token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "GET /discover answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    serde_json::from_slice(&body).map_err(|e| format!("GET /discover: {e}"))
}

/// Milliseconds with one decimal, `-` when absent.
fn ms(x: &Value) -> String {
    x.as_f64().map_or("-".to_owned(), |f| format!("{f:.1}"))
}

/// Endpoints as a table, most called first; then the aggregated endpoints, if any.
pub fn table(v: &Value) -> String {
    let mut out = if v["enabled"] == false {
        format!(
            "{}\n",
            v["message"].as_str().unwrap_or("endpoint discovery is off")
        )
    } else {
        discovered(v)
    };
    out.push_str(&aggregated(v));
    out
}

/// The aggregated endpoints (`aggregated`), each with a line per backend.
fn aggregated(v: &Value) -> String {
    let Some(list) = v["aggregated"].as_array().filter(|l| !l.is_empty()) else {
        return String::new();
    };
    let n = |x: &Value, k: &str| x["results"][k].as_u64().unwrap_or(0);
    let mut out = format!(
        "\naggregated endpoints\n{:>8}  {:<7} {:<40} {:>9} {:>8} {:>7} {:>8} {:>8}\n",
        "COUNT",
        "METHOD",
        "ENDPOINT / backend",
        "complete",
        "partial",
        "failed",
        "p50 ms",
        "p99 ms"
    );
    for e in list {
        out.push_str(&format!(
            "{:>8}  {:<7} {:<40} {:>9} {:>8} {:>7} {:>8} {:>8}\n",
            e["count"].as_u64().unwrap_or(0),
            e["method"].as_str().unwrap_or("-"),
            e["endpoint"].as_str().unwrap_or("-"),
            n(e, "complete"),
            n(e, "partial"),
            n(e, "failed"),
            ms(&e["latency_ms"]["p50"]),
            ms(&e["latency_ms"]["p99"]),
        ));
        for b in e["backends"].as_array().into_iter().flatten() {
            let name = format!(
                "  {} ({})",
                b["name"].as_str().unwrap_or("-"),
                b["host"].as_str().unwrap_or("-")
            );
            out.push_str(&format!(
                "{:>8}  {:<7} {:<40} {:>9} {:>8} {:>7} {:>8} {:>8}\n",
                b["count"].as_u64().unwrap_or(0),
                "",
                name,
                format!("ok {}", n(b, "ok")),
                format!("fail {}", n(b, "failed") + n(b, "skipped")),
                format!("t/o {}", n(b, "timeout")),
                ms(&b["latency_ms"]["p50"]),
                ms(&b["latency_ms"]["p99"]),
            ));
        }
    }
    out
}

/// The discovered endpoints, most called first.
fn discovered(v: &Value) -> String {
    let mut out = format!(
        "{:>8}  {:<7} {:<28} {:<40} {:>6} {:>6} {:>8} {:>8}\n",
        "COUNT", "METHOD", "HOST", "ENDPOINT", "2xx%", "429", "p50 ms", "p99 ms"
    );
    for e in v["endpoints"].as_array().into_iter().flatten() {
        let count = e["count"].as_u64().unwrap_or(0);
        let status = e["status"].as_object();
        let sum = |f: &dyn Fn(u64) -> bool| -> u64 {
            status
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.parse::<u64>().is_ok_and(f))
                .map(|(_, n)| n.as_u64().unwrap_or(0))
                .sum()
        };
        let ok = sum(&|s| (200..300).contains(&s));
        out.push_str(&format!(
            "{:>8}  {:<7} {:<28} {:<40} {:>6.1} {:>6} {:>8} {:>8}\n",
            count,
            e["method"].as_str().unwrap_or("-"),
            e["host"].as_str().unwrap_or("-"),
            e["endpoint"].as_str().unwrap_or("-"),
            100.0 * ok as f64 / count.max(1) as f64,
            sum(&|s| s == 429),
            ms(&e["latency_ms"]["p50"]),
            ms(&e["latency_ms"]["p99"]),
        ));
    }
    if v["folded"].as_u64().unwrap_or(0) > 0 {
        out.push_str(&format!(
            "({} calls counted under `other`: a discovery cap was reached)\n",
            v["folded"]
        ));
    }
    out
}
