//! `tollgate discover`: the endpoints a running gateway discovered, from its admin API.

use http_body_util::BodyExt;
use serde_json::Value;
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
