//! `GET /discover` as text: the endpoints most called first, then the aggregated ones
//! (what `tollgate discover` prints).

use serde_json::Value;

/// Milliseconds with one decimal, `-` when absent.
fn ms(x: &Value) -> String {
    x.as_f64().map_or("-".to_owned(), |f| format!("{f:.1}"))
}

/// The busiest consumers first, `name:count`, at most three and how many more.
fn consumers(c: &Value) -> String {
    let Some(map) = c.as_object().filter(|m| !m.is_empty()) else {
        return "-".into();
    };
    let mut list: Vec<(&String, u64)> = map
        .iter()
        .map(|(k, n)| (k, n.as_u64().unwrap_or(0)))
        .collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out: Vec<String> = list
        .iter()
        .take(3)
        .map(|(k, n)| format!("{k}:{n}"))
        .collect();
    if list.len() > 3 {
        out.push(format!("+{} more", list.len() - 3));
    }
    out.join(" ")
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

/// The endpoints that carried LLM calls: tokens, cost, time to first byte.
fn llm(v: &Value) -> String {
    let rows: Vec<&Value> = v["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["llm"].is_object())
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nLLM calls\n{:>8}  {:<7} {:<28} {:<40} {:>12} {:>12} {:>11} {:>9}\n",
        "CALLS", "METHOD", "HOST", "ENDPOINT", "TOKENS IN", "TOKENS OUT", "COST $", "TTFB p50"
    );
    for e in rows {
        let l = &e["llm"];
        out.push_str(&format!(
            "{:>8}  {:<7} {:<28} {:<40} {:>12} {:>12} {:>11.4} {:>9}\n",
            l["calls"].as_u64().unwrap_or(0),
            e["method"].as_str().unwrap_or("-"),
            e["host"].as_str().unwrap_or("-"),
            e["endpoint"].as_str().unwrap_or("-"),
            l["input_tokens"].as_u64().unwrap_or(0),
            l["output_tokens"].as_u64().unwrap_or(0),
            l["cost_usd"].as_f64().unwrap_or(0.0),
            ms(&l["time_to_first_byte_ms"]["p50"]),
        ));
    }
    out
}

/// The discovered endpoints, most called first: each with the policy it ran, its status
/// mix (2xx share, 429s, 5xx), cache hits, latency and its consumers.
fn discovered(v: &Value) -> String {
    let mut out = format!(
        "{:>8}  {:<7} {:<28} {:<40} {:<16} {:>6} {:>6} {:>6} {:>7} {:>8} {:>8}  {}\n",
        "COUNT",
        "METHOD",
        "HOST",
        "ENDPOINT",
        "POLICY",
        "2xx%",
        "429",
        "5xx",
        "CACHED",
        "p50 ms",
        "p99 ms",
        "CONSUMERS"
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
            "{:>8}  {:<7} {:<28} {:<40} {:<16} {:>6.1} {:>6} {:>6} {:>7} {:>8} {:>8}  {}\n",
            count,
            e["method"].as_str().unwrap_or("-"),
            e["host"].as_str().unwrap_or("-"),
            e["endpoint"].as_str().unwrap_or("-"),
            e["policy"].as_str().unwrap_or("-"),
            100.0 * ok as f64 / count.max(1) as f64,
            sum(&|s| s == 429),
            sum(&|s| (500..600).contains(&s)),
            e["cache_hits"].as_u64().unwrap_or(0),
            ms(&e["latency_ms"]["p50"]),
            ms(&e["latency_ms"]["p99"]),
            consumers(&e["consumers"]),
        ));
    }
    out.push_str(&llm(v));
    if v["folded"].as_u64().unwrap_or(0) > 0 {
        out.push_str(&format!(
            "({} calls counted under `other`: a discovery cap was reached)\n",
            v["folded"]
        ));
    }
    out
}
