//! A histogram that every worker records into without a shared lock: one shard of atomic
//! counters per recording thread (threads beyond the shards share them), summed when
//! `/metrics` is read. prometheus-client's `Histogram` takes one write lock per
//! observation, which every worker's requests would contend on.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Shards: more than the workers a machine usually runs, few enough to sum cheaply.
const SHARDS: usize = 16;

/// Durations in buckets whose upper bounds are `B` exponential steps (the last bucket,
/// `+Inf`, is the `B + 1`-th).
#[derive(Clone)]
pub struct ShardedHistogram<const B: usize> {
    inner: Arc<Inner<B>>,
}

struct Inner<const B: usize> {
    /// Upper bounds in seconds, as exposed.
    bounds: [f64; B],
    /// The same in nanoseconds, compared on the path.
    bounds_ns: [u64; B],
    shards: [Shard<B>; SHARDS],
}

/// One thread's counters, alone on its cache lines.
#[repr(align(128))]
struct Shard<const B: usize> {
    /// Per bounded bucket, not cumulative.
    counts: [AtomicU64; B],
    /// Above the last bound: the `+Inf` bucket.
    over: AtomicU64,
    sum_ns: AtomicU64,
}

thread_local! {
    /// This thread's shard.
    static SHARD: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
    };
}

impl<const B: usize> ShardedHistogram<B> {
    /// Buckets from `start` seconds, each `factor` times the one before.
    pub fn exponential(start: f64, factor: f64) -> Self {
        let bounds: [f64; B] = std::array::from_fn(|i| start * factor.powi(i as i32));
        Self {
            inner: Arc::new(Inner {
                bounds,
                bounds_ns: bounds.map(|s| (s * 1e9).round() as u64),
                shards: std::array::from_fn(|_| Shard {
                    counts: std::array::from_fn(|_| AtomicU64::new(0)),
                    over: AtomicU64::new(0),
                    sum_ns: AtomicU64::new(0),
                }),
            }),
        }
    }

    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let shard = &self.inner.shards[SHARD.with(|s| *s)];
        shard.sum_ns.fetch_add(ns, Ordering::Relaxed);
        match self.inner.bounds_ns.iter().position(|&b| ns <= b) {
            Some(i) => shard.counts[i].fetch_add(1, Ordering::Relaxed),
            None => shard.over.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Sum in seconds, count, and each bucket's own count (`+Inf` last), over all shards.
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut buckets: Vec<(f64, u64)> = self
            .inner
            .bounds
            .iter()
            .map(|&b| (b, 0))
            .chain(std::iter::once((f64::MAX, 0)))
            .collect();
        let mut sum_ns = 0u64;
        for s in &self.inner.shards {
            for (b, c) in buckets.iter_mut().zip(&s.counts) {
                b.1 += c.load(Ordering::Relaxed);
            }
            buckets[B].1 += s.over.load(Ordering::Relaxed);
            sum_ns = sum_ns.wrapping_add(s.sum_ns.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|b| b.1).sum();
        (sum_ns as f64 / 1e9, count, buckets)
    }
}

impl<const B: usize> std::fmt::Debug for ShardedHistogram<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sum, count, _) = self.snapshot();
        f.debug_struct("ShardedHistogram")
            .field("sum", &sum)
            .field("count", &count)
            .finish()
    }
}

impl<const B: usize> TypedMetric for ShardedHistogram<B> {
    const TYPE: MetricType = MetricType::Histogram;
}

impl<const B: usize> EncodeMetric for ShardedHistogram<B> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn observations_from_many_threads_are_all_counted_in_their_buckets() {
        let h = ShardedHistogram::<3>::exponential(0.001, 10.0); // 1 ms, 10 ms, 100 ms
        std::thread::scope(|s| {
            for _ in 0..20 {
                s.spawn(|| {
                    h.observe(Duration::from_micros(500)); // ≤ 1 ms
                    h.observe(Duration::from_millis(50)); // ≤ 100 ms
                    h.observe(Duration::from_secs(1)); // +Inf
                });
            }
        });
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 60);
        assert_eq!(
            buckets.iter().map(|b| b.1).collect::<Vec<_>>(),
            vec![20, 0, 20, 20]
        );
        assert!((sum - 20.0 * 1.0505).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn it_reads_as_an_openmetrics_histogram() {
        let h = ShardedHistogram::<2>::exponential(0.001, 10.0);
        h.observe(Duration::from_micros(200));
        h.observe(Duration::from_millis(5));
        let mut r = Registry::default();
        r.register("op_seconds", "Operations", h.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "# TYPE op_seconds histogram",
            "op_seconds_count 2",
            "op_seconds_bucket{le=\"0.001\"} 1",
            "op_seconds_bucket{le=\"0.01\"} 2",
            "op_seconds_bucket{le=\"+Inf\"} 2",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
    }
}
