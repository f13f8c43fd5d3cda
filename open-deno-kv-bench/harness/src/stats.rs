//! Timing: per-operation latencies, percentiles, medians, and a seeded random generator.

use std::time::{Duration, Instant};

/// A measured run: how many operations, how long in all, and each operation's latency.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Operations done.
    pub ops: usize,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Each operation's latency in nanoseconds (unordered).
    pub latencies_ns: Vec<u64>,
}

impl Measured {
    /// Operations per second over the whole run.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-12)
    }

    /// The 50th and 99th percentile latencies, in microseconds.
    pub fn p50_p99_us(&self) -> (f64, f64) {
        let mut sorted = self.latencies_ns.clone();
        sorted.sort_unstable();
        (
            percentile(&sorted, 0.50) as f64 / 1_000.0,
            percentile(&sorted, 0.99) as f64 / 1_000.0,
        )
    }
}

/// The `q` quantile (0..=1) of sorted samples, nearest-rank; 0 for no samples.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of some numbers (the mean of the middle two for an even count); NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// Times a loop of sequential operations with one clock read per operation: each latency runs
/// from the end of the previous operation (or the start) to the end of this one.
pub struct Chain {
    start: Instant,
    prev: Instant,
    latencies_ns: Vec<u64>,
}

impl Chain {
    /// Starts the clock, with room for `ops` samples.
    pub fn start(ops: usize) -> Self {
        let now = Instant::now();
        Chain {
            start: now,
            prev: now,
            latencies_ns: Vec::with_capacity(ops),
        }
    }

    /// Marks the end of one operation.
    #[inline]
    pub fn tick(&mut self) {
        let now = Instant::now();
        self.latencies_ns.push(nanos(now - self.prev));
        self.prev = now;
    }

    /// The run so far.
    pub fn finish(self) -> Measured {
        Measured {
            ops: self.latencies_ns.len(),
            elapsed: self.prev - self.start,
            latencies_ns: self.latencies_ns,
        }
    }
}

/// The smallest and largest of `values` (infinities when it is empty).
pub fn span(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (low, high)
}

/// "median (min-max)" of durations in seconds, printed in milliseconds: how the diagnostics
/// report a run's rounds.
pub fn millis_summary(seconds: &[f64]) -> String {
    let (low, high) = span(seconds);
    format!(
        "{:.0} ({:.0}-{:.0})",
        median(seconds) * 1e3,
        low * 1e3,
        high * 1e3
    )
}

/// A duration in nanoseconds, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A small seeded xorshift64 generator: the same sequence every run, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced, xorshift never leaves it).
    pub fn new(seed: u64) -> Self {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (`n` > 0; the tiny modulo bias does not matter here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 0.5), 50);
        assert_eq!(percentile(&sorted, 0.99), 99);
        assert_eq!(percentile(&sorted, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let a: Vec<usize> = {
            let mut r = Rng::new(1);
            (0..100).map(|_| r.below(10)).collect()
        };
        let b: Vec<usize> = {
            let mut r = Rng::new(1);
            (0..100).map(|_| r.below(10)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&x| x < 10));
    }
}
