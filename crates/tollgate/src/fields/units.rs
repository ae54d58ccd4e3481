//! Human units in the config file: durations (`250ms`, `1m30s`) and sizes (`64KiB`, `1MB`).

use std::time::Duration;

/// Parses a duration such as `250ms`, `5s`, `1m30s` (humantime syntax). A bare `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("`{text}` is not a duration ({e}); write e.g. `250ms`, `5s`, `1m30s`"))
}

/// Parses a size: a whole number of bytes, optionally followed by `B`, `KB`/`KiB`,
/// `MB`/`MiB`, `GB`/`GiB` (decimal and binary multiples as named; case-insensitive).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{text}` is not a size; write e.g. `65536`, `64KiB`, `1MB`");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(bad)
}

/// Formats a duration the way the config file writes them (for `/config`).
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("5").unwrap_err().contains("`5`"));
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
        assert_eq!(parse_size("1 MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert!(parse_size("1.5MB").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("").is_err());
    }
}
