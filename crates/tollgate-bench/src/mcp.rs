//! `tollgate bench mcp`: MCP tool calls (`tools/call`, 2026-07-28's shape and headers)
//! against the provider's MCP stand-in (`POST /mcp`), in one run: direct; tollgate's
//! passthrough (no policy: the body is not read); tollgate reading each call (`mcp:` with
//! a deny list); and tollgate with a per-tool policy (`match.mcp` on the tool, a rate
//! limit and the deny list: the body read, the policy chosen by the tool). The footprint
//! per percentile (open loop, interleaved request by request) and requests per second on
//! one core (closed loop, rounds A B A B).

use crate::harness::{Harness, Interleave, Layout, Target};
use crate::stats;
use crate::{CommonArgs, machine, report};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub mix: crate::MixArgs,
}

pub(crate) const PATH: &str = "/mcp";

/// One `tools/call` as the `mcp` Python SDK sends it at 2026-07-28 (its `_meta`), 290
/// bytes.
pub(crate) const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcp","version":"0.1.0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;

/// The headers 2026-07-28 sends with it.
pub(crate) fn headers() -> Vec<(String, String)> {
    [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "add"),
        ("accept", "application/json, text/event-stream"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub(crate) const READ: &str = "policies:\n  - name: mcp\n    mcp: {deny: [delete_repository]}\n";
pub(crate) const PER_TOOL: &str = "policies:\n  - name: adds\n    match: {mcp: {tools: [add]}}\n    rate_limit: {limit: 1000000000000, window: minute}\n    mcp: {deny: [delete_repository]}\n  - name: mcp\n    mcp: {deny: [delete_repository]}\n";

pub fn run(args: McpArgs) -> Result<(), String> {
    let c = &args.common;
    let requests = args.mix.requests(c.quick);
    let load_before = machine::loadavg();
    let mut h = Harness::start(c.tollgate_bin.clone(), &c.out, c.placement(Layout::Shared)?)?;
    let mcp = |mut t: Target| {
        t.headers = headers();
        t.post = Some(bytes::Bytes::from_static(CALL.as_bytes()));
        t
    };
    let direct = mcp(h.direct());
    let passthrough_cfg = report::route_config(&h.out, "passthrough.yaml", "")?;
    let read_cfg = report::route_config(&h.out, "mcp-read.yaml", READ)?;
    let per_tool_cfg = report::route_config(&h.out, "per-tool.yaml", PER_TOOL)?;
    let passthrough = mcp(h.tollgate("passthrough", &passthrough_cfg, c.threads)?);
    let read = mcp(h.tollgate("mcp-read", &read_cfg, c.threads)?);
    let per_tool = mcp(h.tollgate("per-tool", &per_tool_cfg, c.threads)?);
    for l in &h.lines {
        eprintln!("{l}");
    }
    eprintln!("load average before: {load_before}");
    let load = crate::rounds::Load::of_run(PATH, requests, c);
    let rounds = load.rounds;

    // The footprint (open loop, request by request), then capacity (rounds A B A B).
    let all: Vec<&Target> = vec![&direct, &passthrough, &read, &per_tool];
    let connections = 32;
    let crate::rounds::Mix {
        series,
        rows,
        measured,
    } = crate::rounds::footprint_and_capacity(
        &h,
        &all,
        &load,
        (connections, args.mix.rate),
        args.mix.concurrency,
        &c.out,
    )?;
    let p50 = |name: &str| stats::p50_of(&series, name);
    let over = |name: &str| p50(name) - p50("passthrough");
    let capacity: Vec<&Target> = all[1..].to_vec();
    let ratio = |i: usize| measured[i].rps / measured[0].rps.max(1e-9);
    // Every call was read and counted per tool: the per-tool target's counter says so.
    let counted = per_tool.metrics().and_then(|m| {
        crate::harness::counter(
            &m,
            "tollgate_mcp_calls_total{policy=\"adds\",method=\"tools/call\",tool=\"add\"}",
        )
    });
    let load_after = machine::loadavg();
    eprintln!("load average after: {load_after}");

    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let mut md = format!(
        "# tollgate bench mcp\n\n{}, {} cores, one proxy thread each. `POST {PATH}` of one `tools/call` ({} bytes, 2026-07-28's `_meta` and headers) to the provider's MCP stand-in: passthrough (no policy: the body is not read); mcp-read (`mcp: {{deny: [delete_repository]}}`: every call read, judged and counted); per-tool (a policy matching `tools: [add]` with a rate limit and the deny list, before the server's policy: the body read, the policy chosen by the tool). Footprint: open loop at {} requests/s per target over {connections} connections, {}, median of {rounds} rounds. Capacity: closed loop, {} keep-alive connections, rounds A B A B.\n\n",
        machine::cpu_model(),
        machine::cores(),
        CALL.len(),
        args.mix.rate,
        Interleave::Requests.describe(),
        args.mix.concurrency
    );
    md += &report::summary_table(&rows, &names);
    md += &format!(
        "\nOver the passthrough at p50: mcp-read **{:+.0} µs**, per-tool **{:+.0} µs** (target ≤ +50 µs).\n",
        over("mcp-read"),
        over("per-tool")
    );
    md += &crate::rounds::capacity_table(&capacity, &measured, "passthrough");
    md += &format!(
        "\nper-tool ÷ passthrough: **{:.2}×** (target ≥ 0.9×); mcp-read ÷ passthrough: {:.2}×. Calls the per-tool target counted for `add`: {}.\n",
        ratio(2),
        ratio(1),
        counted.map_or_else(|| "?".into(), |n| n.to_string())
    );
    report::write(&c.out, "summary.md", &md)?;
    eprintln!("\n{md}");
    let mut meta = machine::metadata("bench mcp", &std::env::args().collect::<Vec<_>>());
    meta["footprint_p50_over_passthrough_us"] =
        json!({"mcp-read": over("mcp-read"), "per-tool": over("per-tool")});
    meta["capacity_over_passthrough"] = json!({"mcp-read": ratio(1), "per-tool": ratio(2)});
    meta["capacity"] = crate::rounds::capacity_json(&capacity, &measured);
    meta["calls_counted"] = json!(counted);
    report::write_metadata(
        &c.out,
        meta,
        &h.lines,
        (&load_before, &load_after),
        &report::footprint_files(),
    )
}
