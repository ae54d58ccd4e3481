//! Output files: `percentiles.csv`, `summary.md`, `metadata.json`, capacity tables.

use crate::stats::{Row, label};
use std::fmt::Write as _;
use std::path::Path;

/// Completes `metadata.json` with what every command records about its run, and writes it.
pub fn write_metadata(
    dir: &Path,
    mut meta: serde_json::Value,
    placement: &[String],
    load: (&str, &str),
    files: &[String],
) -> Result<(), String> {
    meta["placement"] = serde_json::json!(placement);
    meta["load_average"] = serde_json::json!({"before": load.0, "after": load.1});
    meta["files"] = serde_json::json!(files);
    write(
        dir,
        "metadata.json",
        &(serde_json::to_string_pretty(&meta).expect("json") + "\n"),
    )
}

/// The files of a run that measured a footprint and wrote a summary.
pub fn footprint_files() -> Vec<String> {
    ["percentiles.csv", "summary.md", "metadata.json"]
        .map(String::from)
        .to_vec()
}

/// Writes a tollgate config `name` into `dir` for a bench: one route to the provider,
/// quiet logs, then `rest` (policies, a store); returns its path.
pub fn route_config(dir: &Path, name: &str, rest: &str) -> Result<std::path::PathBuf, String> {
    write(
        dir,
        name,
        &format!(
            "routes:\n  - prefix: /\n    upstream: ${{TOLLGATE_BENCH_PROVIDER}}\nlog:\n  level: warn\n{rest}"
        ),
    )?;
    Ok(dir.join(name))
}

pub fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    std::fs::write(dir.join(name), text)
        .map_err(|e| format!("cannot write {}: {e}", dir.join(name).display()))
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_default()
}

/// `percentile,label,scenario,latency_us,delta_us,noise_us,within_noise`, one line per
/// scenario and percentile.
pub fn percentiles_csv(rows: &[Row]) -> String {
    let mut s =
        String::from("percentile,label,scenario,latency_us,delta_us,noise_us,within_noise\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{:.1},{},{:.1},{}",
            r.percentile,
            label(r.percentile),
            r.scenario,
            r.latency_us,
            opt(r.delta_us),
            r.noise_us,
            r.within_noise.map(|b| b.to_string()).unwrap_or_default()
        );
    }
    s
}

/// The Markdown table of the headline percentiles, deltas marked when within noise.
pub fn summary_table(rows: &[Row], scenarios: &[String]) -> String {
    const HEAD: &[f64] = &[50.0, 90.0, 95.0, 99.0, 99.9];
    let mut s = String::from("| scenario |");
    for p in HEAD {
        let _ = write!(s, " {} ms | Δ {} µs |", label(*p), label(*p));
    }
    s.push('\n');
    s.push_str("|---|");
    for _ in HEAD {
        s.push_str("---:|---:|");
    }
    s.push('\n');
    for name in scenarios {
        let _ = write!(s, "| {name} |");
        for p in HEAD {
            let r = rows
                .iter()
                .find(|r| r.percentile == *p && &r.scenario == name);
            match r {
                Some(r) => {
                    let delta = match (r.delta_us, r.within_noise) {
                        (Some(d), Some(true)) => format!("{d:+.0} (noise)"),
                        (Some(d), _) => format!("{d:+.0}"),
                        (None, _) => format!("±{:.0} noise", r.noise_us),
                    };
                    let _ = write!(s, " {:.3} | {delta} |", r.latency_us / 1000.0);
                }
                None => s.push_str(" | |"),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_shape() {
        let rows = vec![
            Row {
                percentile: 50.0,
                scenario: "direct".into(),
                latency_us: 150_100.0,
                delta_us: None,
                noise_us: 12.0,
                within_noise: None,
            },
            Row {
                percentile: 50.0,
                scenario: "passthrough".into(),
                latency_us: 150_140.0,
                delta_us: Some(40.0),
                noise_us: 12.0,
                within_noise: Some(false),
            },
        ];
        let csv = percentiles_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "percentile,label,scenario,latency_us,delta_us,noise_us,within_noise"
        );
        assert_eq!(lines[1], "50,p50,direct,150100.0,,12.0,");
        assert_eq!(lines[2], "50,p50,passthrough,150140.0,40.0,12.0,false");
        let table = summary_table(&rows, &["direct".into(), "passthrough".into()]);
        assert!(table.contains("| passthrough | 150.140 | +40 |"), "{table}");
        assert!(table.contains("±12 noise"), "{table}");
    }
}
