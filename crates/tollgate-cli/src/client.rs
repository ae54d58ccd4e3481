//! `tollgate discover` and `tollgate har`: diagnosis from the command line.

use clap::Subcommand;
use http_body_util::BodyExt;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use tollgate::config::append;
use tollgate::diagnosis::har::read;

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
        crate::out(&read::list(&entries));
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
                Some(file) => append::append_to_file(&file, entry),
                None => read::mock(entry).map(|yaml| crate::out(&yaml)),
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
            crate::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(entry).unwrap_or_default()
            ));
            ExitCode::SUCCESS
        }
    }
}

pub async fn discover(args: DiscoverArgs) -> ExitCode {
    match fetch(&args).await {
        Ok(v) if args.json => {
            crate::out(&format!(
                "{}\n",
                serde_json::to_string_pretty(&v).unwrap_or_default()
            ));
            ExitCode::SUCCESS
        }
        Ok(v) => {
            crate::out(&tollgate::diagnosis::discovery::table::table(&v));
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
