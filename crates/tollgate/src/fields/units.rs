//! Human units in the config file, as types: a duration (`250ms`, `1m30s`), a size
//! (`64KiB`, `1MB`) and a percentage (`20%`). A field's bounds are part of its type
//! (`Dur<1, HOUR_MS>`), so one declaration gives the file its check, the schema and docs
//! their range, `/config` its canonical spelling, and validation a value it need not
//! check again.
//!
//! A value outside its type is kept rather than stopping the parser, so that `check`
//! reports every error in the file at once: the config's parser counts them
//! ([`reading`]), then has the parser place each at its path and line ([`failing_at`]).

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// Milliseconds in a second, an hour, a day: the bounds fields write.
pub const SEC_MS: u64 = 1_000;
pub const HOUR_MS: u64 = 3_600_000;
pub const DAY_MS: u64 = 86_400_000;

/// The schema keyword a unit type states its range in; the config's `json_schema`
/// moves it into the field's description, where editors and the docs show it.
pub const RANGE_KEYWORD: &str = "x-range";

/// Why a value written for a unit field is not one (its message).
#[derive(Clone, PartialEq)]
pub struct Invalid(Arc<str>);

/// A unit field as read: its value, or why the text is not one.
pub(super) type Read<T> = Result<T, Invalid>;

thread_local! {
    /// How this thread reads unit fields: the invalid values seen so far, and which one
    /// (1-based) is an error for the parser rather than a value kept (0: none).
    static READING: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Runs `parse` keeping every invalid unit value, and counts them.
pub fn reading<T, E>(parse: impl FnOnce() -> Result<T, E>) -> Result<(T, usize), E> {
    READING.set((0, 0));
    let r = parse();
    let (seen, _) = READING.replace((0, 0));
    r.map(|t| (t, seen))
}

/// Runs `parse` with the `n`th invalid unit value (in the file's order) an error, so the
/// parser reports it at its path and line.
pub fn failing_at<T, E>(n: usize, parse: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    READING.set((0, n));
    let r = parse();
    READING.set((0, 0));
    r
}

pub(super) fn read<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Read<T>, D::Error> {
    match parse(&scalar(d)?) {
        Ok(v) => Ok(Ok(v)),
        Err(m) => {
            let (seen, fail_at) = READING.get();
            READING.set((seen + 1, fail_at));
            if seen + 1 == fail_at {
                return Err(D::Error::custom(m));
            }
            Ok(Err(Invalid(m.into())))
        }
    }
}

/// A measure a bounded field takes: how it is read, written and named.
pub trait Unit {
    type Value: Copy + PartialOrd;
    /// `a duration`: how errors and the schema name it.
    const WHAT: &'static str;
    /// The value of a bound (milliseconds for a duration, bytes for a size).
    fn bound(n: u64) -> Self::Value;
    fn parse(text: &str) -> Result<Self::Value, String>;
    fn show(v: Self::Value) -> String;
    /// How `/config` shows a value: as the file writes it (a number for a count).
    fn write<S: Serializer>(v: Self::Value, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&Self::show(v))
    }
    /// The schema's `type` and, where JSON Schema can state them, its bounds.
    fn schema(min: u64, max: u64) -> serde_json::Value {
        let _ = (min, max);
        serde_json::json!({"type": ["string", "integer"]})
    }
}

/// Whole numbers (counts, sizes of queues and tables): bounds as they are.
pub enum Whole {}

impl Unit for Whole {
    type Value = u64;
    const WHAT: &'static str = "a whole number";
    fn bound(n: u64) -> u64 {
        n
    }
    fn parse(text: &str) -> Result<u64, String> {
        text.trim()
            .parse()
            .map_err(|_| format!("`{text}` is not a whole number; write e.g. `10`"))
    }
    fn show(v: u64) -> String {
        v.to_string()
    }
    fn write<S: Serializer>(v: u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v)
    }
    fn schema(min: u64, max: u64) -> serde_json::Value {
        serde_json::json!({"type": "integer", "minimum": min, "maximum": max})
    }
}

/// Durations: bounds in milliseconds.
pub enum Time {}

impl Unit for Time {
    type Value = Duration;
    const WHAT: &'static str = "a duration";
    fn bound(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }
    fn parse(text: &str) -> Result<Duration, String> {
        parse_duration(text)
    }
    fn show(v: Duration) -> String {
        format_duration(v)
    }
}

/// Sizes: bounds in bytes.
pub enum Bytes {}

impl Unit for Bytes {
    type Value = u64;
    const WHAT: &'static str = "a size";
    fn bound(n: u64) -> u64 {
        n
    }
    fn parse(text: &str) -> Result<u64, String> {
        parse_size(text)
    }
    fn show(v: u64) -> String {
        format_size(v)
    }
}

/// A value of unit `U` within `MIN..=MAX` (in the unit's bound measure).
pub struct Bounded<U: Unit, const MIN: u64, const MAX: u64>(Read<U::Value>);

/// A duration within `MIN..=MAX` milliseconds, written `250ms`, `5s`, `1m30s` (`0` for
/// none).
pub type Dur<const MIN: u64, const MAX: u64> = Bounded<Time, MIN, MAX>;

/// A size in bytes within `MIN..=MAX`, written `65536`, `64KiB`, `1MB`.
pub type Size<const MIN: u64, const MAX: u64> = Bounded<Bytes, MIN, MAX>;

/// A whole number within `MIN..=MAX`.
pub type Int<const MIN: u64, const MAX: u64> = Bounded<Whole, MIN, MAX>;

impl<U: Unit, const MIN: u64, const MAX: u64> Bounded<U, MIN, MAX> {
    /// The value; the lower bound for an invalid one, which validation has reported.
    pub fn value(&self) -> U::Value {
        self.0.clone().unwrap_or(U::bound(MIN))
    }

    fn range() -> String {
        format!("{} to {}", U::show(U::bound(MIN)), U::show(U::bound(MAX)))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let v = U::parse(text)?;
        if v < U::bound(MIN) || v > U::bound(MAX) {
            return Err(format!(
                "`{text}` is out of range; write {} from {}",
                U::WHAT,
                Self::range()
            ));
        }
        Ok(Self(Ok(v)))
    }
}

impl<const MIN: u64, const MAX: u64> Dur<MIN, MAX> {
    /// A default: clamped into the bounds, so a mistaken literal can never escape them.
    pub fn ms(ms: u64) -> Self {
        Self(Ok(Duration::from_millis(ms.clamp(MIN, MAX))))
    }

    pub fn secs(s: u64) -> Self {
        Self::ms(s.saturating_mul(SEC_MS))
    }

    pub fn get(&self) -> Duration {
        self.value()
    }
}

impl<const MIN: u64, const MAX: u64> Size<MIN, MAX> {
    /// A default: clamped into the bounds.
    pub fn bytes(n: u64) -> Self {
        Self(Ok(n.clamp(MIN, MAX)))
    }

    pub fn get(&self) -> usize {
        usize::try_from(self.value()).unwrap_or(usize::MAX)
    }
}

impl<const MIN: u64, const MAX: u64> Int<MIN, MAX> {
    /// A default: clamped into the bounds.
    pub fn of(n: u64) -> Self {
        Self(Ok(n.clamp(MIN, MAX)))
    }

    pub fn get(&self) -> u64 {
        self.value()
    }

    /// The value as a `usize` (every bound a field declares fits one).
    pub fn usize(&self) -> usize {
        usize::try_from(self.value()).unwrap_or(usize::MAX)
    }

    /// The value as a `u32` (for fields bounded within it).
    pub fn u32(&self) -> u32 {
        u32::try_from(self.value()).unwrap_or(u32::MAX)
    }
}

impl<U: Unit, const MIN: u64, const MAX: u64> Clone for Bounded<U, MIN, MAX> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<U: Unit, const MIN: u64, const MAX: u64> PartialEq for Bounded<U, MIN, MAX> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<'de, U: Unit, const MIN: u64, const MAX: u64> Deserialize<'de> for Bounded<U, MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self(read(d, |t| Self::parse(t).map(|v| v.value()))?))
    }
}

impl<U: Unit, const MIN: u64, const MAX: u64> Serialize for Bounded<U, MIN, MAX> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        U::write(self.value(), s)
    }
}

impl<U: Unit, const MIN: u64, const MAX: u64> JsonSchema for Bounded<U, MIN, MAX> {
    fn schema_name() -> Cow<'static, str> {
        U::WHAT.into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut schema = U::schema(MIN, MAX);
        schema[RANGE_KEYWORD] = format!("{} from {}", U::WHAT, Self::range()).into();
        Schema::try_from(schema).unwrap_or_default()
    }
}

impl<U: Unit, const MIN: u64, const MAX: u64> std::fmt::Debug for Bounded<U, MIN, MAX> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&U::show(self.value()))
    }
}

/// Shares: written `20%`, bounds in percent.
pub enum Share {}

impl Unit for Share {
    type Value = f64;
    const WHAT: &'static str = "a percentage";
    fn bound(n: u64) -> f64 {
        n as f64
    }
    fn parse(text: &str) -> Result<f64, String> {
        text.trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<f64>().ok())
            .filter(|p| (0.0..=100.0).contains(p))
            .ok_or_else(|| {
                format!("`{text}`: write a percentage from \"0%\" to \"100%\", e.g. \"20%\"")
            })
    }
    fn show(v: f64) -> String {
        format!("{v}%")
    }
    fn schema(_: u64, _: u64) -> serde_json::Value {
        serde_json::json!({"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*%\s*$"})
    }
}

/// A share from `0%` to `100%`, written `"20%"`; [`Percent::fraction`] is `0.2`.
pub type Percent = Bounded<Share, 0, 100>;

impl Percent {
    /// A default, in percent (clamped to 0..=100).
    pub fn of(p: f64) -> Self {
        Self(Ok(p.clamp(0.0, 100.0)))
    }

    /// The share as a fraction; 0 for an invalid one, which validation has reported.
    pub fn fraction(&self) -> f64 {
        self.value() / 100.0
    }
}

/// A scalar as the text it was written as: `size: 65536` and `ttl: 0` are numbers to
/// YAML, and a unit type reads them as it reads `64KiB`.
fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a value such as `250ms`, `64KiB` or `20%`")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        // Any other value is read as text too, and refused by the unit's parse with the
        // rest of the file's invalid values: a type error would end the parse at the
        // first one.
        fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<String, E> {
            Ok("null".into())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<String, A::Error> {
            while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok("[…]".into())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<String, A::Error> {
            while a
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok("{…}".into())
        }
    }
    d.deserialize_any(Text)
}

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
pub fn parse_size(text: &str) -> Result<u64, String> {
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
        .filter(|v| usize::try_from(*v).is_ok())
        .ok_or_else(bad)
}

/// A duration the way the config file writes them, in the largest unit that holds it
/// whole: `0`, `250ms`, `90s`, `1m`, `365d` (days the largest: a month or a year has no
/// fixed length).
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0".to_owned();
    }
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let n = d.as_nanos();
    let (per, unit) = UNITS
        .iter()
        .find(|(per, _)| n % per == 0)
        .unwrap_or(&UNITS[6]);
    format!("{}{unit}", n / per)
}

/// A size the way the config file writes them: the largest unit that divides it
/// (binary first), else bytes: `64KiB`, `1MB`, `0`, `1B`.
pub fn format_size(n: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "KB"),
    ];
    if n == 0 {
        return "0".to_owned();
    }
    UNITS
        .iter()
        .find(|(m, _)| n % m == 0)
        .map_or_else(|| format!("{n}B"), |(m, u)| format!("{}{u}", n / m))
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
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::ZERO), "0");
        for (d, s) in [
            (365 * 86_400_000, "365d"),
            (3_600_000, "1h"),
            (1_500, "1500ms"),
            (60_000, "1m"),
        ] {
            assert_eq!(format_duration(Duration::from_millis(d)), s);
            assert_eq!(parse_duration(s).unwrap(), Duration::from_millis(d));
        }
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
        for (n, s) in [(65536, "64KiB"), (1_000_000, "1MB"), (1, "1B"), (0, "0")] {
            assert_eq!(format_size(n), s);
            assert_eq!(parse_size(s).unwrap(), n);
        }
    }

    #[test]
    fn every_invalid_value_is_reported_at_its_path() {
        #[derive(Deserialize, Serialize)]
        struct Raw {
            a: Dur<1, HOUR_MS>,
            list: Vec<Size<1, 10>>,
            ok: Percent,
        }
        let text = "{a: 2h, list: [5, 1KiB], ok: '5%'}";
        let (_, invalid) = reading(|| yaml_serde::from_str::<Raw>(text)).unwrap();
        assert_eq!(invalid, 2);
        let second = failing_at(2, || yaml_serde::from_str::<Raw>(text))
            .err()
            .unwrap();
        assert!(
            second.to_string().contains("`1KiB` is out of range"),
            "{second}"
        );
        assert!(failing_at(3, || yaml_serde::from_str::<Raw>(text)).is_ok());
    }

    #[test]
    fn a_bounded_field_refuses_what_is_outside_and_round_trips_what_is_inside() {
        type D = Dur<1, HOUR_MS>;
        let read = |s: &str| yaml_serde::from_str::<D>(s).unwrap();
        assert_eq!(read("1m30s").get(), Duration::from_secs(90));
        let err = D::parse("2h").unwrap_err();
        assert!(
            err.contains("`2h` is out of range; write a duration from 1ms to 1h"),
            "{err}"
        );
        assert!(D::parse("0").is_err());
        assert_eq!(
            read("0").get(),
            Duration::from_millis(1),
            "invalid reads as its bound"
        );
        assert_eq!(yaml_serde::to_value(D::secs(90)).unwrap(), "90s");
        assert_eq!(
            D::ms(0).get(),
            Duration::from_millis(1),
            "defaults are clamped"
        );

        type S = Size<1024, { 16 << 20 }>;
        let size = |s: &str| yaml_serde::from_str::<S>(s).unwrap();
        assert_eq!(size("64KiB").get(), 65536);
        assert_eq!(size("2048").get(), 2048);
        assert!(
            S::parse("1B")
                .unwrap_err()
                .contains("write a size from 1KiB to 16MiB")
        );

        let pct = |s: &str| yaml_serde::from_str::<Percent>(s).unwrap();
        assert_eq!(pct("'20%'").fraction(), 0.2);
        assert!(
            Percent::parse("120%")
                .unwrap_err()
                .contains("from \"0%\" to \"100%\"")
        );
        assert_eq!(yaml_serde::to_value(Percent::of(12.5)).unwrap(), "12.5%");
    }
}
