//! Metrics that every worker records into without writing a cache line another worker
//! writes: one shard of atomic counters per recording thread (a data-plane worker's is
//! its index; threads beyond the shards share them), summed when `/metrics` is read.
//! prometheus-client's `Histogram` takes one write lock per observation, and its `Counter`
//! is one atomic that every worker's requests would pass between their cores.
//!
//! A shard is allocated by the first thread that records into it, so it lies on that
//! thread's own pages (mimalloc keeps a heap per thread): no padding to keep it off
//! other workers' lines, and a metric costs memory only for the workers that use it
//! (one per host label set, say, a few hundred bytes on two workers).

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Shards: more than the workers a machine usually runs, few enough to sum cheaply.
pub const SHARDS: usize = 16;

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
    shards: [OnceLock<Box<Shard<B>>>; SHARDS],
}

/// One thread's counters, allocated by it (see the module's note).
struct Shard<const B: usize> {
    /// Per bounded bucket, not cumulative.
    counts: [AtomicU64; B],
    /// Above the last bound: the `+Inf` bucket.
    over: AtomicU64,
    sum_ns: AtomicU64,
}

thread_local! {
    /// This thread's shard: a data-plane worker sets its own ([`record_as`]); every other
    /// thread (admin, observer, blocking pool) records into the last, which no worker
    /// takes while the workers are fewer than the shards.
    static SHARD: Cell<usize> = const { Cell::new(SHARDS - 1) };
}

/// Makes this thread record into shard `worker % SHARDS`: called once by each data-plane
/// worker's thread, so that workers `0..SHARDS` each write lines of their own.
pub fn record_as(worker: usize) {
    SHARD.with(|s| s.set(worker % SHARDS));
}

/// This thread's shard (see [`record_as`]).
pub fn shard() -> usize {
    SHARD.with(Cell::get)
}

impl<const B: usize> ShardedHistogram<B> {
    /// Buckets from `start` seconds, each `factor` times the one before.
    pub fn exponential(start: f64, factor: f64) -> Self {
        let bounds: [f64; B] = std::array::from_fn(|i| start * factor.powi(i as i32));
        Self {
            inner: Arc::new(Inner {
                bounds,
                bounds_ns: bounds.map(|s| (s * 1e9).round() as u64),
                shards: std::array::from_fn(|_| OnceLock::new()),
            }),
        }
    }

    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let shard = self.inner.shards[shard()].get_or_init(|| {
            Box::new(Shard {
                counts: std::array::from_fn(|_| AtomicU64::new(0)),
                over: AtomicU64::new(0),
                sum_ns: AtomicU64::new(0),
            })
        });
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
        for s in self.inner.shards.iter().filter_map(OnceLock::get) {
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

/// A counter with one cell per shard, each allocated by its thread (see the module's
/// note): where requests of every worker count (requests, remedy actions).
#[derive(Clone)]
pub struct ShardedCounter {
    cells: Arc<[OnceLock<Box<AtomicU64>>; SHARDS]>,
}

impl Default for ShardedCounter {
    fn default() -> Self {
        Self {
            cells: Arc::new(std::array::from_fn(|_| OnceLock::new())),
        }
    }
}

impl ShardedCounter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        self.cells[shard()]
            .get_or_init(Box::default)
            .fetch_add(n, Ordering::Relaxed);
    }

    /// The sum over the shards.
    pub fn get(&self) -> u64 {
        self.cells
            .iter()
            .filter_map(OnceLock::get)
            .map(|c| c.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

impl std::fmt::Debug for ShardedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ShardedCounter").field(&self.get()).finish()
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A [`ShardedCounter`] of billionths, exposed in units: money counted exactly in
/// nano-dollars (a float counter would round each addition) and shown in dollars.
#[derive(Clone, Default)]
pub struct NanoCounter(pub ShardedCounter);

impl NanoCounter {
    /// The sum in units.
    pub fn get(&self) -> f64 {
        self.0.get() as f64 / 1e9
    }
}

impl std::fmt::Debug for NanoCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NanoCounter").field(&self.get()).finish()
    }
}

impl TypedMetric for NanoCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for NanoCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
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
    fn a_counter_sums_what_each_worker_counted_in_its_own_shard() {
        let c = ShardedCounter::default();
        std::thread::scope(|s| {
            for w in 0..20 {
                let c = &c;
                s.spawn(move || {
                    record_as(w);
                    for _ in 0..=w {
                        c.inc();
                    }
                    let mine = c.cells[w % SHARDS].get().expect("made by its first inc");
                    assert!(mine.load(Ordering::Relaxed) > w as u64 / 2);
                });
            }
        });
        c.inc(); // this thread: the last shard
        assert_eq!(c.get(), (1..=20).sum::<u64>() + 1);
        let mut r = Registry::default();
        r.register("acts", "Actions", c.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains("# TYPE acts counter\nacts_total 211\n"),
            "{text}"
        );
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
