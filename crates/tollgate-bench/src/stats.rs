//! Percentiles per scenario, deltas against direct, and the noise floor (the spread of
//! the direct runs per percentile) that says which deltas mean nothing.

use hdrhistogram::Histogram;

/// The percentiles every report carries: p1 … p99, p99.9, p99.99, and max (as 100).
pub fn points() -> Vec<f64> {
    let mut p: Vec<f64> = (1..=99).map(f64::from).collect();
    p.extend([99.9, 99.99, 100.0]);
    p
}

pub fn label(p: f64) -> String {
    if p >= 100.0 {
        "max".into()
    } else {
        format!("p{p}")
    }
}

/// Latency at percentile `p` in microseconds (`p = 100` is the maximum).
pub fn value_us(h: &Histogram<u64>, p: f64) -> f64 {
    let ns = if p >= 100.0 {
        h.max()
    } else {
        h.value_at_quantile(p / 100.0)
    };
    ns as f64 / 1000.0
}

/// One scenario's measurements: every round's histogram and their merge. A scenario's
/// value at a percentile is the median of its rounds, so one round disturbed by the
/// machine (a stall of a few hundred ms is common on shared cores) does not decide it.
pub struct Series {
    pub name: String,
    pub rounds: Vec<Histogram<u64>>,
    pub merged: Histogram<u64>,
    /// A second copy measured alongside each round (direct, when targets are interleaved
    /// request by request): the noise floor is then the difference between the copies.
    pub twin: Vec<Histogram<u64>>,
}

impl Series {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            rounds: Vec::new(),
            merged: crate::loadgen::new_histogram(),
            twin: Vec::new(),
        }
    }

    pub fn add_twin_round(&mut self, h: Histogram<u64>) {
        self.twin.push(h);
    }

    /// The noise floor at `p`: with twin rounds, the largest difference between the two
    /// copies measured at the same time; otherwise the spread across rounds.
    pub fn noise_us(&self, p: f64) -> f64 {
        if self.twin.is_empty() {
            return self.spread_us(p);
        }
        self.rounds
            .iter()
            .zip(&self.twin)
            .map(|(a, b)| (value_us(a, p) - value_us(b, p)).abs())
            .fold(0.0, f64::max)
    }

    pub fn add_round(&mut self, h: Histogram<u64>) {
        self.merged.add(&h).expect("same bounds");
        self.rounds.push(h);
    }

    /// The median over rounds of the value at `p` (the merged histogram without rounds).
    pub fn value_us(&self, p: f64) -> f64 {
        if self.rounds.is_empty() {
            return value_us(&self.merged, p);
        }
        let mut v: Vec<f64> = self.rounds.iter().map(|h| value_us(h, p)).collect();
        median(&mut v)
    }

    /// Largest minus smallest value across rounds at `p` (0 with fewer than two rounds).
    pub fn spread_us(&self, p: f64) -> f64 {
        let v: Vec<f64> = self.rounds.iter().map(|h| value_us(h, p)).collect();
        if v.len() < 2 {
            return 0.0;
        }
        v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min)
    }
}

/// One line of `percentiles.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub percentile: f64,
    pub scenario: String,
    pub latency_us: f64,
    /// Scenario minus direct at this percentile (absent for direct itself).
    pub delta_us: Option<f64>,
    /// Spread between the direct rounds at this percentile.
    pub noise_us: f64,
    /// |delta| smaller than the noise floor.
    pub within_noise: Option<bool>,
}

/// Rows for every scenario at every percentile; `direct` is the baseline series.
pub fn rows(direct: &Series, others: &[&Series]) -> Vec<Row> {
    let mut out = Vec::new();
    for p in points() {
        let base = direct.value_us(p);
        let noise = direct.noise_us(p);
        out.push(Row {
            percentile: p,
            scenario: direct.name.clone(),
            latency_us: base,
            delta_us: None,
            noise_us: noise,
            within_noise: None,
        });
        for s in others {
            let v = s.value_us(p);
            let d = v - base;
            out.push(Row {
                percentile: p,
                scenario: s.name.clone(),
                latency_us: v,
                delta_us: Some(d),
                noise_us: noise,
                within_noise: Some(d.abs() < noise),
            });
        }
    }
    out
}

/// The p50 in µs of the series named `name` among `series` (0 when absent).
pub fn p50_of(series: &[Series], name: &str) -> f64 {
    series
        .iter()
        .find(|s| s.name == name)
        .map_or(0.0, |s| s.value_us(50.0))
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values_us: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = crate::loadgen::new_histogram();
        for v in values_us {
            h.record(v * 1000).unwrap();
        }
        h
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        // Uniform 1..=10_000 µs: p-th percentile ≈ 100·p µs.
        let h = hist(1..=10_000);
        for p in [1.0, 10.0, 50.0, 90.0, 99.0, 99.9] {
            let v = value_us(&h, p);
            let want = 100.0 * p;
            assert!(
                (v - want).abs() <= want * 0.002 + 1.0,
                "p{p}: {v} vs {want}"
            );
        }
        assert_eq!(value_us(&h, 100.0).round(), 10_000.0);
        assert_eq!(points().len(), 102);
        assert_eq!(label(99.9), "p99.9");
        assert_eq!(label(100.0), "max");
    }

    #[test]
    fn deltas_and_noise_floor() {
        let mut direct = Series::new("direct");
        direct.add_round(hist((0..1000).map(|_| 1000)));
        direct.add_round(hist((0..1000).map(|_| 1010)));
        let mut proxied = Series::new("passthrough");
        proxied.add_round(hist((0..1000).map(|_| 1050)));
        let mut close = Series::new("close");
        close.add_round(hist((0..1000).map(|_| 1008)));
        let rows = rows(&direct, &[&proxied, &close]);
        assert_eq!(rows.len(), 102 * 3);
        let p50: Vec<&Row> = rows.iter().filter(|r| r.percentile == 50.0).collect();
        assert_eq!(p50[0].delta_us, None);
        let d = p50[1].delta_us.unwrap();
        assert!((d - 45.0).abs() < 1.5 || (d - 50.0).abs() < 1.5, "{d}");
        assert!((p50[1].noise_us - 10.0).abs() < 1.0, "{}", p50[1].noise_us);
        assert_eq!(p50[1].within_noise, Some(false));
        assert_eq!(
            p50[2].within_noise,
            Some(true),
            "a delta below the direct spread is noise"
        );
    }

    #[test]
    fn with_a_twin_the_noise_floor_is_the_largest_difference_between_copies() {
        let mut direct = Series::new("direct");
        // Round 2 is slower for everything (the machine), which a twin measured at the
        // same time shares: the drift between rounds is not noise, the copies' gap is.
        direct.add_round(hist((0..1000).map(|_| 1000)));
        direct.add_twin_round(hist((0..1000).map(|_| 1004)));
        direct.add_round(hist((0..1000).map(|_| 1500)));
        direct.add_twin_round(hist((0..1000).map(|_| 1502)));
        assert!((direct.spread_us(50.0) - 500.0).abs() < 1.0);
        assert!(
            (direct.noise_us(50.0) - 4.0).abs() < 0.5,
            "{}",
            direct.noise_us(50.0)
        );
        let mut proxied = Series::new("passthrough");
        proxied.add_round(hist((0..1000).map(|_| 1100)));
        proxied.add_round(hist((0..1000).map(|_| 1600)));
        let rows = rows(&direct, &[&proxied]);
        let p50 = rows
            .iter()
            .find(|r| r.percentile == 50.0 && r.scenario == "passthrough")
            .unwrap();
        assert_eq!(p50.within_noise, Some(false), "{p50:?}");
    }

    #[test]
    fn one_disturbed_round_does_not_decide() {
        let mut s = Series::new("direct");
        s.add_round(hist((0..100).map(|_| 1000)));
        s.add_round(hist((0..100).map(|_| 1002)));
        s.add_round(hist((0..100).map(|_| 90_000)));
        assert!(
            (s.value_us(50.0) - 1002.0).abs() < 1.0,
            "{}",
            s.value_us(50.0)
        );
        assert!(
            s.spread_us(50.0) > 80_000.0,
            "the spread still shows the disturbance"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
