//! The core commands: `tollgate run | check | schema | provider | discover | har | ca`.

use clap::Subcommand;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use tollgate::config::{self, Config, ConfigFiles};
use tollgate::server::{Gateway, StartOptions};
use tollgate::state::Overrides;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway (built-in defaults without a config file).
    Run(RunArgs),
    /// Validate a config: prints every error with its field path; exit 0 valid, 1 invalid.
    Check {
        /// The config file to validate; several files, or a directory of them (conf.d),
        /// are checked as `run --config` joins them.
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// Report `${VARS}` that are not set as warnings, not errors (CI checking a file
        /// whose secrets exist only where it runs); their values are placeholders.
        #[arg(long)]
        env_optional: bool,
    },
    /// Print the JSON Schema of the config file.
    Schema,
    /// Show the endpoints a running gateway discovered (`GET /discover`), most called first.
    Discover(crate::client::DiscoverArgs),
    /// Read captured HAR files: list or follow entries (filtered by host, status,
    /// policy), show one, turn one into a mock policy.
    #[command(subcommand)]
    Har(crate::har::HarCommand),
    /// The local certificate authority of HTTPS interception: make it, show its
    /// fingerprint, export its certificate for trust stores.
    #[command(subcommand)]
    Ca(crate::ca::CaCommand),
    /// Run the built-in provider emulator (httpbin-compatible paths) for tests, demos and benchmarks.
    Provider {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: SocketAddr,
        /// Worker threads, 1 to 1024 (default: available cores).
        #[arg(long, value_parser = threads)]
        threads: Option<usize>,
        /// Serve HTTPS with a CA of its own, written to DIR/provider-ca.pem (trust it
        /// with `upstream.tls.extra_ca_file`), and a certificate for localhost and 127.0.0.1.
        #[arg(long, value_name = "DIR")]
        tls_dir: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Config file (YAML), or a directory of them (conf.d: its *.yaml files in name
    /// order). Repeat it to join several files: mappings merge, lists join, and a value
    /// or policy name set in two files is an error. Without it tollgate runs on
    /// built-in defaults.
    #[arg(long, short, env = "TOLLGATE_CONFIG")]
    pub config: Vec<PathBuf>,
    /// Proxy listener address, overriding `listen.address`.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Admin listener address, overriding `admin.address`.
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// Data-plane workers, 1 to 1024 (default: available cores): each a thread with its
    /// own listener socket, connections, upstream pool and timers.
    #[arg(long, value_parser = threads)]
    pub threads: Option<usize>,
}

/// `--threads`: tokio panics on 0 worker threads, and thousands help nobody.
fn threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}` is not a thread count; write a whole number from 1 to 1024"
        )),
    }
}

/// Runs one of the core commands (the binary adds `bench` on top).
pub fn dispatch(command: Command) -> ExitCode {
    match command {
        Command::Run(args) => run(args),
        Command::Check {
            files,
            env_optional,
        } => check(files, env_optional),
        Command::Schema => {
            crate::out(&config::json_schema());
            ExitCode::SUCCESS
        }
        Command::Discover(args) => block_on(Some(1), crate::client::discover(args)),
        Command::Har(cmd) => crate::har::har(cmd),
        Command::Ca(cmd) => crate::ca::run(cmd),
        Command::Provider {
            listen,
            threads,
            tls_dir,
        } => block_on(threads, async move {
            tollgate::logging::init(&Config::default().log);
            let tls = match tls_dir
                .as_deref()
                .map(tollgate_provider::tls::server_config)
            {
                Some(Err(e)) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
                Some(Ok(c)) => Some(c),
                None => None,
            };
            let scheme = if tls.is_some() { "https" } else { "http" };
            match tollgate_provider::Provider::start_with(listen, tls).await {
                Ok(p) => {
                    eprintln!("tollgate provider listening on {scheme}://{}", p.addr);
                    Signals::new().recv().await;
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: cannot listen on {listen}: {e}");
                    ExitCode::FAILURE
                }
            }
        }),
    }
}

fn check(files: Vec<PathBuf>, env_optional: bool) -> ExitCode {
    let files = ConfigFiles::new(files);
    let loaded = files.load(env_optional);
    match loaded {
        Ok((config, unset)) => {
            for u in unset {
                eprintln!("warning: {u} (checked with a placeholder value)");
            }
            match tollgate::check::check(&config) {
                Ok(warnings) => {
                    for w in warnings {
                        eprintln!("warning: {w}");
                    }
                }
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            }
            crate::out(&format!("{}: valid\n", files.describe()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn block_on<F: std::future::Future<Output = ExitCode>>(threads: Option<usize>, f: F) -> ExitCode {
    // One thread: a current-thread runtime, which skips the work-stealing machinery.
    let mut rt = if threads == Some(1) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if let Some(n) = threads.filter(|&n| n > 1) {
        rt.worker_threads(n);
    }
    match rt.enable_all().build() {
        Ok(rt) => rt.block_on(f),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tollgate run`: start, reload on SIGHUP, drain on SIGTERM/SIGINT, exit 0. The data
/// plane runs on its workers' threads; this thread's runtime keeps the admin API,
/// signals and reloads.
pub fn run(args: RunArgs) -> ExitCode {
    let workers = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    block_on(Some(1), async move {
        let given = args
            .config
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let files = (!args.config.is_empty()).then(|| ConfigFiles::new(args.config));
        let log_config = match &files {
            Some(f) => f
                .load(false)
                .map(|(c, _)| c.log)
                .unwrap_or_else(|_| Config::default().log),
            None => Config::default().log,
        };
        tollgate::logging::init(&log_config);
        let opts = StartOptions {
            config_files: files,
            config: None,
            overrides: Overrides {
                listen: args.listen,
                admin: args.admin,
            },
            watch: true,
            workers: Some(workers),
        };
        let gateway = match Gateway::start(opts).await {
            Ok(g) => g,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!(
            "tollgate listening: proxy http://{} admin http://{}",
            gateway.proxy_addr, gateway.admin_addr
        );
        let ui = gateway.shared().runtime.load().config.admin.ui.enabled;
        eprintln!(
            "{}",
            first_words(&given, gateway.proxy_addr, gateway.admin_addr, ui)
        );
        spawn_sighup(gateway.shared().clone());
        let mut signals = Signals::new();
        signals.recv().await;
        tracing::info!("shutdown signal received: draining (a second one exits at once)");
        gateway.shutdown();
        tokio::select! {
            () = gateway.wait() => ExitCode::SUCCESS,
            () = signals.recv() => {
                eprintln!("second shutdown signal: exiting without waiting for the drain");
                ExitCode::FAILURE
            }
        }
    })
}

/// What a first run says after its addresses: which config it runs on, where the
/// dashboard is, and one call to try.
fn first_words(files: &str, proxy: SocketAddr, admin: SocketAddr, ui: bool) -> String {
    let config = match files.is_empty() {
        true => "built-in defaults (no --config): every call is forwarded as it is, no policy applies; docs/configuration.md says what to write".to_owned(),
        false => format!("{files} (a change is picked up: POST /reload, SIGHUP or the file watcher)"),
    };
    let mut out = format!("  config: {config}\n");
    if ui {
        out.push_str(&format!("  dashboard: http://{admin}/ui\n"));
    }
    out.push_str(&format!(
        "  metrics: http://{admin}/metrics\n  try: curl -x http://{proxy} http://httpbin.org/get   (or with x-tollgate-host: curl -H 'x-tollgate-host: api.github.com' http://{proxy}/zen)\n  stop: Ctrl-C (in-flight calls finish first)"
    ));
    out
}

#[cfg(unix)]
fn spawn_sighup(shared: std::sync::Arc<tollgate::state::Shared>) {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            let _ = tollgate::reload::reload(&shared).await;
        }
    });
}

#[cfg(not(unix))]
fn spawn_sighup(_: std::sync::Arc<tollgate::state::Shared>) {}

/// The shutdown signals (Ctrl-C, SIGTERM), listened for from the moment this is made: a
/// signal sent before [`Signals::recv`] is awaited is not lost (a second Ctrl-C sent as
/// soon as the drain is logged ends it).
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                int: signal(SignalKind::interrupt()).expect("install SIGINT handler"),
                term: signal(SignalKind::terminate()).expect("install SIGTERM handler"),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next shutdown signal.
    async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
