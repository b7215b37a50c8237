//! Robust summary statistics: every figure gapscope reports carries n, the median and a spread.
#![forbid(unsafe_code)]

use super::thresholds::{MIN_STEPS_TO_JUDGE, MIN_WINDOWS, WINDOWS_SUPERIORITY};
use serde::{Deserialize, Deserializer, Serialize};

/// `ns` as "1.23 µs", negatives with the one minus sign every output uses ("−0.10 µs").
pub fn us(ns: f64) -> String {
    let v = ns / 1e3;
    if (v * 100.0).round() == 0.0 {
        "0.00 µs".to_owned()
    } else if v < 0.0 {
        format!("−{:.2} µs", -v)
    } else {
        format!("{v:.2} µs")
    }
}

/// Why a figure from `n` steps is not judged ([`MIN_STEPS_TO_JUDGE`]); `None` when it is.
/// `what` is what is not given ("a remedy", "a verdict").
pub fn too_few_steps(n: usize, what: &str) -> Option<String> {
    (n < MIN_STEPS_TO_JUDGE).then(|| {
        format!(
            "{what} needs ≥ {MIN_STEPS_TO_JUDGE} steps with a period, this has {n} (a cell's first step has none)"
        )
    })
}

/// Why a cell of `steps` steps has no period (given it has none): a period is a step's end
/// less the previous step's end, so it needs two steps in a row.
pub fn why_no_period(steps: usize) -> String {
    match steps {
        0 => "no steps".to_owned(),
        1 => "one step with device work: a period needs ≥ 2".to_owned(),
        n => format!(
            "{n} steps, none right after another (tracing paused, or the loop broke, before each)"
        ),
    }
}

/// n, median and spread (p10–p90 and min–max) of a sample. Units are the caller's (ns for
/// durations).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// Summarises `values` (reordered in place); `None` when empty or when a value is NaN.
    pub fn of(values: &mut [f64]) -> Option<Stat> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        values.sort_unstable_by(f64::total_cmp);
        Some(Stat {
            n: values.len(),
            median: quantile_sorted(values, 0.5),
            p10: quantile_sorted(values, 0.1),
            p90: quantile_sorted(values, 0.9),
            min: values[0],
            max: values[values.len() - 1],
        })
    }

    /// Convenience for integer nanosecond samples.
    pub fn of_ns(values: impl IntoIterator<Item = u64>) -> Option<Stat> {
        let mut v: Vec<f64> = values.into_iter().map(|x| x as f64).collect();
        Stat::of(&mut v)
    }

    /// Run-to-run spread: the p10–p90 width.
    pub fn spread(&self) -> f64 {
        self.p90 - self.p10
    }

    /// Whether the sample has a spread to give ([`MIN_STEPS_TO_JUDGE`] values or more).
    pub fn has_spread(&self) -> bool {
        self.n >= MIN_STEPS_TO_JUDGE
    }
}

/// Reads a Stat back exactly as it was written (rank summaries): serde_json's own number
/// parser can be one unit in the last place off on 17-digit numbers, so each value is parsed
/// from its text by the standard library, which rounds correctly.
impl<'de> Deserialize<'de> for Stat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stat, D::Error> {
        use serde_json::value::RawValue;
        #[derive(Deserialize)]
        struct Written {
            n: usize,
            median: Box<RawValue>,
            p10: Box<RawValue>,
            p90: Box<RawValue>,
            min: Box<RawValue>,
            max: Box<RawValue>,
        }
        let w = Written::deserialize(d)?;
        Ok(Stat {
            n: w.n,
            median: exact(&w.median)?,
            p10: exact(&w.p10)?,
            p90: exact(&w.p90)?,
            min: exact(&w.min)?,
            max: exact(&w.max)?,
        })
    }
}

/// A JSON number's text as the f64 it was written from.
fn exact<E: serde::de::Error>(raw: &serde_json::value::RawValue) -> Result<f64, E> {
    raw.get()
        .parse::<f64>()
        .map_err(|_| E::custom(format!("expected a number, found {}", raw.get())))
}

/// `deserialize_with` for a list of f64 written by serde_json, read back exactly (see
/// [`Stat`]'s `Deserialize`).
pub fn exact_f64s<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let raw: Vec<Box<serde_json::value::RawValue>> = Vec::deserialize(d)?;
    raw.iter().map(|r| exact(r)).collect()
}

/// Linear-interpolated quantile of sorted data.
fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Medians of up to `blocks` consecutive blocks of `values` (each ≥ 5 values): the spread of
/// these is the run-to-run spread of the median.
pub fn block_medians(values: &[f64], blocks: usize) -> Vec<f64> {
    let blocks = blocks.min(values.len() / 5);
    if blocks < 2 {
        return Vec::new();
    }
    let size = values.len() / blocks;
    values
        .chunks(size)
        .take(blocks)
        .filter_map(|c| Stat::of(&mut c.to_vec()).map(|s| s.median))
        .collect()
}

/// Geometric mean of positive ratios with their range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Geomean {
    pub n: usize,
    pub value: f64,
    pub min: f64,
    pub max: f64,
}

impl Geomean {
    pub fn of(ratios: &[f64]) -> Option<Geomean> {
        let valid: Vec<f64> = ratios
            .iter()
            .copied()
            .filter(|r| r.is_finite() && *r > 0.0)
            .collect();
        if valid.is_empty() {
            return None;
        }
        let log_mean = valid.iter().map(|r| r.ln()).sum::<f64>() / valid.len() as f64;
        Some(Geomean {
            n: valid.len(),
            value: log_mean.exp(),
            min: valid.iter().copied().fold(f64::INFINITY, f64::min),
            max: valid.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// Whether `head` differs from `base` by more than the run-to-run spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    NoChange,
    Slower,
    Faster,
}

impl Change {
    /// A difference of medians no larger than the wider of the two p10–p90 spreads is
    /// "no change".
    pub fn between(base: &Stat, head: &Stat) -> Change {
        let noise = base.spread().max(head.spread());
        let delta = head.median - base.median;
        if delta.abs() <= noise {
            Change::NoChange
        } else if delta > 0.0 {
            Change::Slower
        } else {
            Change::Faster
        }
    }

    /// From run-to-run samples (e.g. block medians) of each side: every head sample minus
    /// every base sample; slower when even the p10 of these differences is above zero, faster
    /// when the p90 is below zero, else no change. `None` with fewer than 2 samples a side.
    pub fn from_runs(base: &[f64], head: &[f64]) -> Option<Change> {
        if base.len() < 2 || head.len() < 2 {
            return None;
        }
        let mut diffs: Vec<f64> = head
            .iter()
            .flat_map(|h| base.iter().map(move |b| h - b))
            .collect();
        let d = Stat::of(&mut diffs)?;
        Some(if d.p10 > 0.0 {
            Change::Slower
        } else if d.p90 < 0.0 {
            Change::Faster
        } else {
            Change::NoChange
        })
    }

    /// From per-window medians of each side (the measured windows of an untraced period):
    /// slower when a head window beats a base window in at least [`WINDOWS_SUPERIORITY`] of
    /// all pairs (ties count half), faster when in at most 1 − that, else no change — a rank
    /// comparison, so that one window slowed by the host (a slow process draws several) does
    /// not outweigh the others as it does an extreme difference. `None` with fewer than
    /// [`MIN_WINDOWS`] windows a side.
    pub fn from_windows(base: &[f64], head: &[f64]) -> Option<Change> {
        if base.len() < MIN_WINDOWS || head.len() < MIN_WINDOWS {
            return None;
        }
        let wins: f64 = head
            .iter()
            .flat_map(|h| {
                base.iter().map(move |b| match h.total_cmp(b) {
                    std::cmp::Ordering::Greater => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Less => 0.0,
                })
            })
            .sum();
        let share = wins / (base.len() * head.len()) as f64;
        Some(if share >= WINDOWS_SUPERIORITY {
            Change::Slower
        } else if share <= 1.0 - WINDOWS_SUPERIORITY {
            Change::Faster
        } else {
            Change::NoChange
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            Change::NoChange => "no change",
            Change::Slower => "slower",
            Change::Faster => "faster",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_known_sample() {
        let s = Stat::of(&mut [5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.median, 3.0);
        assert_eq!((s.min, s.max), (1.0, 5.0));
        assert!((s.p10 - 1.4).abs() < 1e-12 && (s.p90 - 4.6).abs() < 1e-12);
        assert!(Stat::of(&mut []).is_none());
        assert!(Stat::of(&mut [1.0, f64::NAN]).is_none());
    }

    #[test]
    fn too_few_steps_for_a_spread_a_verdict_or_a_remedy() {
        let two = Stat::of(&mut [1.0, 2.0]).unwrap();
        let three = Stat::of(&mut [1.0, 2.0, 3.0]).unwrap();
        assert!(!two.has_spread() && three.has_spread());
        assert_eq!(
            too_few_steps(2, "a verdict").as_deref(),
            Some(
                "a verdict needs ≥ 3 steps with a period, this has 2 (a cell's first step has none)"
            )
        );
        assert_eq!(too_few_steps(3, "a verdict"), None);
        assert_eq!(
            why_no_period(1),
            "one step with device work: a period needs ≥ 2"
        );
        assert!(why_no_period(5).starts_with("5 steps, none right after another"));
    }

    #[test]
    fn geomean_and_range() {
        let g = Geomean::of(&[1.0, 4.0]).unwrap();
        assert!((g.value - 2.0).abs() < 1e-12);
        assert_eq!((g.min, g.max, g.n), (1.0, 4.0, 2));
    }

    #[test]
    fn change_inside_spread_is_no_change() {
        let base = Stat::of(&mut [10.0, 11.0, 12.0, 13.0, 14.0]).unwrap();
        let near = Stat::of(&mut [11.0, 12.0, 13.0, 14.0, 15.0]).unwrap();
        let far = Stat::of(&mut [20.0, 21.0, 22.0, 23.0, 24.0]).unwrap();
        assert_eq!(Change::between(&base, &near), Change::NoChange);
        assert_eq!(Change::between(&base, &far), Change::Slower);
        assert_eq!(Change::between(&far, &base), Change::Faster);
    }

    #[test]
    fn runs_decide_change_even_with_wide_per_step_spread() {
        // Head runs all above base runs, though each head run is noisy.
        let base = [153.0, 153.5, 152.8, 153.2];
        let head = [180.0, 230.0, 195.0, 210.0];
        assert_eq!(Change::from_runs(&base, &head), Some(Change::Slower));
        assert_eq!(Change::from_runs(&head, &base), Some(Change::Faster));
        let overlapping = [152.9, 153.4, 153.1, 152.7];
        assert_eq!(
            Change::from_runs(&base, &overlapping),
            Some(Change::NoChange)
        );
        assert_eq!(Change::from_runs(&base, &[1.0]), None);
        assert_eq!(block_medians(&[1.0; 9], 10).len(), 0);
        assert_eq!(
            block_medians(&(0..100).map(f64::from).collect::<Vec<_>>(), 10).len(),
            10
        );
    }
}
