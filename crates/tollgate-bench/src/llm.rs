//! `tollgate bench llm`: LLM calls through tollgate against the provider's OpenAI
//! stand-in, which streams a chat completion's events at a fixed pace. In one run:
//! the time to the first event and to the last, direct and through each gateway
//! (tollgate's passthrough, tollgate with a policy that only frames the call — the
//! matched path's own cost —, tollgate reading usage, and reading it with a token limit
//! and a budget on,
//! and the LLM gateways it is compared with where they install: LiteLLM's proxy,
//! Portkey's gateway, Bifrost),
//! one call at a time, the targets interleaved call by call; then requests per second of
//! complete (non-streamed) answers at a number of connections, tollgate's passthrough
//! against tollgate reading usage, rounds A B A B.

use crate::harness::{Harness, Layout};
use crate::{CommonArgs, machine, procs, report};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct LlmArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Content events per streamed answer.
    #[arg(long, default_value_t = 20)]
    pub events: u32,
    /// The stand-in's pace between events (`1ms`).
    #[arg(long, default_value = "1ms")]
    pub pace: String,
    /// Streamed calls per target per round (default 300; --quick 60).
    #[arg(long)]
    pub calls: Option<u64>,
    /// Complete answers per target per round of the capacity measurement (default
    /// 20000; --quick 4000).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Keep-alive connections of the capacity measurement.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// LiteLLM's proxy (`pip install 'litellm[proxy]'`): its `litellm` command; skipped,
    /// and said so, when it is not found.
    #[arg(long, default_value = "litellm")]
    pub litellm: PathBuf,
    /// Portkey's gateway: the `build/start-server.js` of `@portkey-ai/gateway` as npm
    /// installs it (1.15.2, with `@hono/node-server` pinned to 1.13.5 by an `overrides`:
    /// the version npm resolves answers every streamed call 500, Portkey-AI/gateway#1389),
    /// run with `node`; skipped, and said so, when it is not found.
    #[arg(
        long,
        default_value = "node_modules/@portkey-ai/gateway/build/start-server.js"
    )]
    pub portkey: PathBuf,
    /// Bifrost's binary (`npx -y @maximhq/bifrost`'s download); skipped, and said so,
    /// when it is not found.
    #[arg(long, default_value = "bifrost")]
    pub bifrost: PathBuf,
}

/// A gateway (or the stand-in itself) and the path its chat completions take.
struct Endpoint {
    name: String,
    addr: SocketAddr,
    /// The streamed call's path and the complete call's.
    stream_path: String,
    whole_path: String,
    /// Headers each call carries (a gateway's routing headers).
    headers: Vec<(&'static str, String)>,
    /// Kept alive as long as the endpoint.
    _target: Option<crate::harness::Target>,
    _proc: Option<procs::Proc>,
}

/// The key every call carries: LiteLLM's master key (it refuses to start without one).
const KEY: &str = "sk-bench-5f0c2a9e7d3b41c6a8e2f1d0b9c7a6e5";
const BEARER: &str = "Bearer sk-bench-5f0c2a9e7d3b41c6a8e2f1d0b9c7a6e5";

pub(crate) const PASSTHROUGH: &str =
    "routes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\nlog:\n  level: warn\n";

/// The complete (non-streamed) chat completion the capacity measurement sends, and
/// `bench instructions`' LLM scenarios.
pub(crate) const WHOLE_CALL: &[u8] = br#"{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello to the benchmark."}]}"#;

/// Every call matched by a policy that only frames it (`timeouts`): the matched path's
/// own cost, which reading usage adds to.
pub(crate) const MATCHED: &str = "routes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\nlog:\n  level: warn\npolicies:\n  - name: llm\n    timeouts: {total: 1h}\n";

/// Every call read for usage.
pub(crate) const USAGE: &str = "routes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\nlog:\n  level: warn\npolicies:\n  - name: llm\n    llm: {}\n";

/// Every call read for usage, counted against a token limit and a budget that never refuse.
pub(crate) const LIMITS: &str = "routes:\n  - prefix: /\n    upstream: ${TOLLGATE_BENCH_PROVIDER}\nlog:\n  level: warn\npolicies:\n  - name: llm\n    llm: {}\n    token_limit: {limit: 1000000000000, window: minute}\n    budget: {limit: \"$100000000\", per: day}\n";

pub fn run(args: LlmArgs) -> Result<(), String> {
    let c = &args.common;
    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, c.placement(Layout::Shared)?)?;
    let stream_path = format!("/pace/{}/v1/chat/completions", args.pace);
    let whole_path = "/v1/chat/completions".to_owned();
    let ep = |name: &str, addr: SocketAddr, target| Endpoint {
        name: name.into(),
        addr,
        stream_path: stream_path.clone(),
        whole_path: whole_path.clone(),
        headers: Vec::new(),
        _target: target,
        _proc: None,
    };
    let mut endpoints = vec![ep("direct", h.provider, None)];
    report::write(&h.out, "llm-passthrough.yaml", PASSTHROUGH)?;
    report::write(&h.out, "llm-matched.yaml", MATCHED)?;
    report::write(&h.out, "llm-usage.yaml", USAGE)?;
    report::write(&h.out, "llm-limits.yaml", LIMITS)?;
    for (name, file) in [
        ("passthrough", "llm-passthrough.yaml"),
        ("matched", "llm-matched.yaml"),
        ("usage", "llm-usage.yaml"),
        ("usage+limits", "llm-limits.yaml"),
    ] {
        let t = h.tollgate(name, &h.out.join(file), c.threads)?;
        let addr = addr_of(&t.base)?;
        endpoints.push(ep(name, addr, Some(t)));
    }
    let mut skipped = Vec::new();
    match litellm(&args, &h) {
        Ok(e) => endpoints.push(e),
        Err(why) => skipped.push(format!("LiteLLM: {why}")),
    }
    match portkey(&args, &h) {
        Ok(e) => endpoints.push(e),
        Err(why) => skipped.push(format!("Portkey: {why}")),
    }
    match bifrost(&args) {
        Ok(e) => endpoints.push(e),
        Err(why) => skipped.push(format!("Bifrost: {why}")),
    }
    for l in h.lines.iter().chain(&skipped) {
        eprintln!("{l}");
    }
    let rounds = c.rounds.max(2);
    let calls = args.calls.unwrap_or(if c.quick { 60 } else { 300 });
    let requests = args
        .requests
        .unwrap_or(if c.quick { 4_000 } else { 20_000 });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Read before this thread is pinned (the count follows its affinity).
    let machine_line = format!("{}, {} cores", machine::cpu_model(), machine::cores());
    let loadgen_core = h.placement.loadgen.first().copied();
    if let Some(id) = loadgen_core {
        core_affinity::set_for_current(core_affinity::CoreId { id });
    }

    // 1. Streams, one call at a time, the targets interleaved call by call.
    let body = Bytes::from(format!(
        r#"{{"model":"gpt-4o-mini","stream":true,"stream_options":{{"include_usage":true}},"max_tokens":{},"messages":[{{"role":"user","content":"Say hello to the benchmark."}}]}}"#,
        args.events
    ));
    let mut first: Vec<Vec<(f64, f64)>> = vec![Vec::new(); endpoints.len()];
    let mut last: Vec<Vec<(f64, f64)>> = vec![Vec::new(); endpoints.len()];
    rt.block_on(async {
        let mut conns = Vec::new();
        for e in &endpoints {
            conns.push(connect(e.addr).await?);
        }
        for round in 0..rounds {
            let mut hf: Vec<Histogram<u64>> = endpoints.iter().map(|_| hist()).collect();
            let mut hl: Vec<Histogram<u64>> = endpoints.iter().map(|_| hist()).collect();
            let warm = if round == 0 { calls / 5 } else { 0 };
            for k in 0..(calls + warm) {
                for j in 0..endpoints.len() {
                    // A different target first on each call.
                    let i = (j + k as usize) % endpoints.len();
                    let e = &endpoints[i];
                    let (f, l) = stream(&mut conns[i], e, &body).await?;
                    if k >= warm {
                        let _ = hf[i].record(f.as_micros() as u64);
                        let _ = hl[i].record(l.as_micros() as u64);
                    }
                }
            }
            for i in 0..endpoints.len() {
                first[i].push((
                    hf[i].value_at_quantile(0.5) as f64,
                    hf[i].value_at_quantile(0.99) as f64,
                ));
                last[i].push((
                    hl[i].value_at_quantile(0.5) as f64,
                    hl[i].value_at_quantile(0.99) as f64,
                ));
            }
        }
        Ok::<_, String>(())
    })?;
    let med = |v: &[(f64, f64)]| {
        (
            median(&v.iter().map(|x| x.0).collect::<Vec<_>>()),
            median(&v.iter().map(|x| x.1).collect::<Vec<_>>()),
        )
    };

    // 2. Capacity: complete answers, closed loop, rounds A B A B.
    let whole = Bytes::from_static(WHOLE_CALL);
    let cap_targets: Vec<usize> = (1..endpoints.len()).collect();
    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); endpoints.len()];
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(h.placement.loadgen_threads().max(1))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    for _ in 0..rounds {
        for &i in &cap_targets {
            let e = &endpoints[i];
            let r = mt.block_on(capacity(e, &whole, requests, args.concurrency))?;
            eprintln!("capacity {:<14} {r:>8.0} requests/s", e.name);
            rps[i].push(r);
        }
    }

    // Report.
    let (d_first, d_last) = (med(&first[0]), med(&last[0]));
    let mut md = format!(
        "# tollgate bench llm\n\n{machine_line}; {}; the stand-in streams {} content events {} apart (OpenAI's chunk shape, `include_usage`). Streams: one call at a time over a kept-alive connection per target, targets interleaved call by call, {calls} calls per target per round, median of {rounds} rounds. Capacity: complete answers, {} connections, {requests} per target per round, rounds A B A B.\n\n",
        h.lines.join("; "),
        args.events,
        args.pace,
        args.concurrency,
    );
    md += "| target | first event p50 | p99 | added p50 | added p99 | last event p50 | p99 | added p50 | added p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    let mut csv = String::from("target,first_p50_us,first_p99_us,last_p50_us,last_p99_us\n");
    for (i, e) in endpoints.iter().enumerate() {
        let (f, l) = (med(&first[i]), med(&last[i]));
        md += &format!(
            "| {} | {:.0} µs | {:.0} µs | {:+.0} µs | {:+.0} µs | {:.0} µs | {:.0} µs | {:+.0} µs | {:+.0} µs |\n",
            e.name,
            f.0,
            f.1,
            f.0 - d_first.0,
            f.1 - d_first.1,
            l.0,
            l.1,
            l.0 - d_last.0,
            l.1 - d_last.1
        );
        csv += &format!("{},{:.0},{:.0},{:.0},{:.0}\n", e.name, f.0, f.1, l.0, l.1);
    }
    let by_name = |n: &str| endpoints.iter().position(|e| e.name == n);
    if let (Some(p), Some(m), Some(u), Some(l)) = (
        by_name("passthrough"),
        by_name("matched"),
        by_name("usage"),
        by_name("usage+limits"),
    ) {
        let f = |i: usize| med(&first[i]).0;
        md += &format!(
            "\nOver tollgate's passthrough at p50, to the first event: a matched policy {:+.0} µs; reading usage **{:+.0} µs**; with a token limit and a budget too **{:+.0} µs** (target ≤ +30 µs).\n",
            f(m) - f(p),
            f(u) - f(p),
            f(l) - f(p)
        );
    }
    md += "\n| target | requests/s (median) | ÷ passthrough | ÷ matched |\n|---|---:|---:|---:|\n";
    let of = |n: &str| by_name(n).map(|p| median(&rps[p])).unwrap_or(1.0).max(1e-9);
    let (base, matched) = (of("passthrough"), of("matched"));
    for &i in &cap_targets {
        let r = median(&rps[i]);
        md += &format!(
            "| {} | {r:.0} | {:.2} | {:.2} |\n",
            endpoints[i].name,
            r / base,
            r / matched
        );
    }
    for s in &skipped {
        md += &format!("\nNot measured: {s}.\n");
    }
    report::write(&h.out, "llm.csv", &csv)?;
    report::write(&h.out, "llm.md", &md)?;
    println!("{md}");
    Ok(())
}

/// The median of `v` (a copy sorted).
fn median(v: &[f64]) -> f64 {
    crate::stats::median(&mut v.to_vec())
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn addr_of(base: &str) -> Result<SocketAddr, String> {
    let uri: Uri = base.parse().map_err(|e| format!("{base}: {e}"))?;
    uri.authority()
        .ok_or("no authority")?
        .as_str()
        .parse()
        .map_err(|e| format!("{base}: {e}"))
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn post(e: &Endpoint, path: &str, body: &Bytes) -> Request<Full<Bytes>> {
    request(e.addr, &e.headers, path, body)
}

/// A chat completion POSTed to `addr` with `headers`.
fn request(
    addr: SocketAddr,
    headers: &[(&'static str, String)],
    path: &str,
    body: &Bytes,
) -> Request<Full<Bytes>> {
    let mut r = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("authorization", BEARER);
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.body(Full::new(body.clone())).expect("a valid request")
}

/// One streamed call: the time to its first body bytes and to its end.
async fn stream(
    c: &mut SendRequest<Full<Bytes>>,
    e: &Endpoint,
    body: &Bytes,
) -> Result<(Duration, Duration), String> {
    c.ready().await.map_err(|x| format!("{}: {x}", e.name))?;
    let start = Instant::now();
    let resp = c
        .send_request(post(e, &e.stream_path, body))
        .await
        .map_err(|x| format!("{}: {x}", e.name))?;
    if !resp.status().is_success() {
        return Err(format!("{} answered {}", e.name, resp.status()));
    }
    let mut b = resp.into_body();
    let mut first = None;
    while let Some(f) = b.frame().await {
        let f = f.map_err(|x| format!("{}: {x}", e.name))?;
        if f.data_ref().is_some_and(|d| !d.is_empty()) && first.is_none() {
            first = Some(start.elapsed());
        }
    }
    let last = start.elapsed();
    Ok((first.unwrap_or(last), last))
}

/// Requests per second of complete answers over `concurrency` connections.
async fn capacity(
    e: &Endpoint,
    body: &Bytes,
    requests: u64,
    concurrency: usize,
) -> Result<f64, String> {
    let per = (requests / concurrency.max(1) as u64).max(1);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (addr, path, body, name) = (e.addr, e.whole_path.clone(), body.clone(), e.name.clone());
        let headers = e.headers.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await?;
            for _ in 0..per {
                c.ready().await.map_err(|x| format!("{name}: {x}"))?;
                let req = request(addr, &headers, &path, &body);
                let resp = c
                    .send_request(req)
                    .await
                    .map_err(|x| format!("{name}: {x}"))?;
                let ok = resp.status().is_success();
                resp.into_body()
                    .collect()
                    .await
                    .map_err(|x| format!("{name}: {x}"))?;
                if !ok {
                    return Err(format!("{name}: an error answer"));
                }
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|x| x.to_string())??;
    }
    Ok((per * concurrency as u64) as f64 / start.elapsed().as_secs_f64())
}

/// LiteLLM's proxy in front of the stand-in, one model routed to it.
fn litellm(args: &LlmArgs, h: &Harness) -> Result<Endpoint, String> {
    let bin = procs::on_path(&args.litellm.to_string_lossy())
        .or_else(|| args.litellm.exists().then(|| args.litellm.clone()))
        .ok_or("`litellm` not found (pip install 'litellm[proxy]', or pass --litellm)")?;
    let port = procs::free_port();
    let config = format!(
        "model_list:\n  - model_name: gpt-4o-mini\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_base: http://{}/pace/{}/v1\n      api_key: sk-bench\n",
        h.provider, args.pace
    );
    report::write(&h.out, "litellm.yaml", &config)?;
    let cores = h.placement.server_cores(args.common.threads);
    let (mut cmd, where_) = procs::command(&bin, cores.as_deref());
    cmd.args(["--config"])
        .arg(h.out.join("litellm.yaml"))
        .args(["--port", &port.to_string(), "--num_workers", "1"])
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_MASTER_KEY", KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
    let proc = procs::Proc::new("litellm", child, where_);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    procs::wait_port(addr, Duration::from_secs(120))?;
    // Its streamed path is its own: it calls the stand-in's paced path itself.
    Ok(Endpoint {
        name: "litellm".into(),
        addr,
        stream_path: "/v1/chat/completions".into(),
        whole_path: "/v1/chat/completions".into(),
        headers: Vec::new(),
        _target: None,
        _proc: Some(proc),
    })
}

/// Bifrost, when its binary is here.
/// Portkey's gateway in front of the stand-in: one Node process, the stand-in named per
/// call by its headers (`x-portkey-custom-host`, 127.0.0.1 being a trusted custom host).
fn portkey(args: &LlmArgs, h: &Harness) -> Result<Endpoint, String> {
    let script = &args.portkey;
    if !script.is_file() {
        return Err(format!(
            "{} not found: `npm install @portkey-ai/gateway@1.15.2` with `\"overrides\": {{\"@hono/node-server\": \"1.13.5\"}}` in package.json, then pass --portkey node_modules/@portkey-ai/gateway/build/start-server.js",
            script.display()
        ));
    }
    let node = procs::on_path("node").ok_or("`node` not found (apt-get install nodejs)")?;
    let port = procs::free_port();
    let cores = h.placement.server_cores(args.common.threads);
    let (mut cmd, where_) = procs::command(&node, cores.as_deref());
    // It reads its own files relative to its folder.
    if let Some(dir) = script.parent().and_then(Path::parent) {
        cmd.current_dir(dir);
    }
    let script = script.canonicalize().map_err(|e| e.to_string())?;
    cmd.arg(&script)
        .arg(format!("--port={port}"))
        .arg("--headless")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", node.display()))?;
    let proc = procs::Proc::new("portkey", child, where_);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    procs::wait_port(addr, Duration::from_secs(60))?;
    let upstream = format!("http://{}/pace/{}/v1", h.provider, args.pace);
    Ok(Endpoint {
        name: "portkey".into(),
        addr,
        stream_path: "/v1/chat/completions".into(),
        whole_path: "/v1/chat/completions".into(),
        headers: vec![
            ("x-portkey-provider", "openai".into()),
            ("x-portkey-custom-host", upstream),
        ],
        _target: None,
        _proc: Some(proc),
    })
}

fn bifrost(args: &LlmArgs) -> Result<Endpoint, String> {
    procs::on_path(&args.bifrost.to_string_lossy())
        .or_else(|| args.bifrost.exists().then(|| args.bifrost.clone()))
        .ok_or_else(|| {
            "its binary was not found: the `@maximhq/bifrost` npm package (1.6.3) downloads it from getbifrost.ai at first run, and its Go modules are not served here; pass --bifrost PATH where it is installed".to_owned()
        })
        .and_then(|_| Err("running Bifrost is not scripted yet".to_owned()))
}
