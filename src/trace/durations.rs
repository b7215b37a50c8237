//! Host durations summarised in fixed log buckets ([`RangeSummary`]): bounded memory whatever
//! the count, mergeable by adding counts, quantiles within 1/32 of the true value.
#![forbid(unsafe_code)]

use super::RangeSummary;
use std::collections::BTreeMap;

/// Buckets per power of two: each is at most 1/16 of its lower bound wide.
const PER_OCTAVE: u64 = 16;

/// The bucket of a duration (ns): values below 16 have one bucket each, then 16 buckets of
/// equal width per power of two, 976 buckets over all of `u64`.
pub fn duration_bucket(ns: u64) -> u64 {
    if ns < PER_OCTAVE {
        return ns;
    }
    let octave = u64::from(ns.ilog2()); // ≥ 4
    let sub = (ns >> (octave - 4)) & (PER_OCTAVE - 1);
    PER_OCTAVE * (octave - 3) + sub
}

/// `[low, high]` of a bucket: every duration in it (inclusive).
pub fn bucket_bounds(bucket: u64) -> (u64, u64) {
    if bucket < PER_OCTAVE {
        return (bucket, bucket);
    }
    let octave = bucket / PER_OCTAVE + 3;
    let sub = bucket % PER_OCTAVE;
    let width = 1u64 << (octave - 4);
    let low = (PER_OCTAVE + sub) << (octave - 4);
    (low, low.saturating_add(width - 1))
}

/// Counts durations of one range name into [`RangeSummary`] form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurationHistogram {
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    buckets: BTreeMap<u64, u64>,
}

impl DurationHistogram {
    pub fn add(&mut self, ns: u64) {
        self.min_ns = if self.count == 0 {
            ns
        } else {
            self.min_ns.min(ns)
        };
        self.max_ns = self.max_ns.max(ns);
        self.count += 1;
        self.total_ns = self.total_ns.saturating_add(ns);
        *self.buckets.entry(duration_bucket(ns)).or_insert(0) += 1;
    }

    /// Adds another histogram's counts (same buckets: exact).
    pub fn merge(&mut self, other: &DurationHistogram) {
        if other.count == 0 {
            return;
        }
        self.min_ns = if self.count == 0 {
            other.min_ns
        } else {
            self.min_ns.min(other.min_ns)
        };
        self.max_ns = self.max_ns.max(other.max_ns);
        self.count += other.count;
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
        for (&b, &n) in &other.buckets {
            *self.buckets.entry(b).or_insert(0) += n;
        }
    }

    pub fn summary(&self, name: &str) -> RangeSummary {
        RangeSummary {
            name: name.to_owned(),
            count: self.count,
            total_ns: self.total_ns,
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            buckets: self.buckets.iter().map(|(&b, &n)| [b, n]).collect(),
        }
    }

    pub fn of(summary: &RangeSummary) -> DurationHistogram {
        DurationHistogram {
            count: summary.count,
            total_ns: summary.total_ns,
            min_ns: summary.min_ns,
            max_ns: summary.max_ns,
            buckets: summary.buckets.iter().map(|&[b, n]| (b, n)).collect(),
        }
    }
}

impl RangeSummary {
    /// The `q`-quantile (0 ≤ q ≤ 1) of the durations: the middle of the bucket that holds it,
    /// within [min, max]; within 1/32 of the true value (exact below 16 ns). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.buckets.iter().map(|b| b[1]).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * (total - 1) as f64).round() as u64).min(total - 1);
        let mut seen = 0u64;
        for &[bucket, n] in &self.buckets {
            seen += n;
            if seen > rank {
                let (low, high) = bucket_bounds(bucket);
                let mid = (low as f64 + high as f64) / 2.0;
                return Some(mid.clamp(self.min_ns as f64, self.max_ns as f64));
            }
        }
        None
    }

    /// Mean duration (exact), `None` when empty.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_ns as f64 / self.count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_duration_once_and_are_at_most_a_sixteenth_wide() {
        let mut probes: Vec<u64> = (0..4096).collect();
        probes.extend((12..64).flat_map(|e| {
            let p = 1u64 << e;
            [p - 1, p, p + 1, p + p / 3]
        }));
        probes.push(u64::MAX);
        for ns in probes {
            let b = duration_bucket(ns);
            let (low, high) = bucket_bounds(b);
            assert!(
                low <= ns && ns <= high,
                "{ns} in bucket {b} = [{low}, {high}]"
            );
            assert!(
                (high - low) as f64 <= low as f64 / 16.0,
                "{b}: [{low}, {high}]"
            );
            if low > 0 {
                assert_eq!(duration_bucket(low - 1), b - 1, "buckets are contiguous");
            }
        }
        assert_eq!(duration_bucket(u64::MAX), 975);
    }

    #[test]
    fn quantiles_are_within_a_thirty_second_and_merging_adds_counts() {
        // 1..=100_000 ns in two halves, merged.
        let (mut a, mut b) = (DurationHistogram::default(), DurationHistogram::default());
        for ns in 1..=100_000u64 {
            if ns % 2 == 0 { a.add(ns) } else { b.add(ns) }
        }
        a.merge(&b);
        let s = a.summary("decode_step");
        assert_eq!((s.count, s.min_ns, s.max_ns), (100_000, 1, 100_000));
        assert_eq!(s.total_ns, 100_000 * 100_001 / 2);
        for (q, exact) in [
            (0.1, 10_000.0),
            (0.5, 50_000.5),
            (0.9, 90_000.0),
            (1.0, 100_000.0),
        ] {
            let got = s.quantile(q).unwrap();
            assert!(
                (got - exact).abs() / exact <= 1.0 / 32.0,
                "q{q}: {got} vs {exact}"
            );
        }
        assert!(s.buckets.len() < 16 * 14, "{} buckets", s.buckets.len());
        assert_eq!(DurationHistogram::of(&s), a, "a summary reads back");
        assert_eq!(s.mean_ns(), Some(50_000.5));
        assert_eq!(
            DurationHistogram::default().summary("x").quantile(0.5),
            None
        );
    }
}
