//! What moving from one cell to another saves a step, with its spread: the figure a remedy
//! predicts and a comparison measures.
#![forbid(unsafe_code)]

use super::cell::CellAnalysis;
use super::stats::Stat;
use serde::Serialize;

/// Time saved per step, ns (positive = faster): median, p10–p90 and the steps behind it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Saving {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    /// Steps behind the figure (for a difference of two cells, the smaller side's).
    pub n: usize,
}

impl Saving {
    /// A per-step sample of saved time, minus a constant (e.g. the latency that would remain).
    pub fn from_stat_minus(s: &Stat, remaining: f64) -> Saving {
        Saving {
            median: s.median - remaining,
            p10: s.p10 - remaining,
            p90: s.p90 - remaining,
            n: s.n,
        }
    }

    /// `from − to`: the median is the difference of the medians. The spread is that of every
    /// pairwise difference of run-block medians (the run-to-run spread, as
    /// [`super::stats::Change::from_runs`] judges changes) when both sides have ≥ 2 blocks,
    /// else the widest per-step one: `from.p10 − to.p90` to `from.p90 − to.p10`.
    pub fn difference(from: &Stat, from_runs: &[f64], to: &Stat, to_runs: &[f64]) -> Saving {
        let mut pairwise: Vec<f64> = from_runs
            .iter()
            .flat_map(|f| to_runs.iter().map(move |t| f - t))
            .collect();
        let runs = (from_runs.len() >= 2 && to_runs.len() >= 2)
            .then(|| Stat::of(&mut pairwise))
            .flatten();
        let (p10, p90) = match runs {
            Some(r) => (r.p10, r.p90),
            None => (from.p10 - to.p90, from.p90 - to.p10),
        };
        Saving {
            median: from.median - to.median,
            p10,
            p90,
            n: from.n.min(to.n),
        }
    }

    /// What moving from cell `from` to cell `to` saves a step, from their untraced periods
    /// (each measured window a run), when both have one.
    pub fn between_untraced_periods(from: &CellAnalysis, to: &CellAnalysis) -> Option<Saving> {
        Some(Saving::difference(
            from.untraced_period.as_ref()?,
            &from.untraced_window_medians,
            to.untraced_period.as_ref()?,
            &to.untraced_window_medians,
        ))
    }

    /// What moving from cell `from` to cell `to` saves a step, from their untraced host step
    /// periods (the tracers' shares), when both have one and no device-side untraced period
    /// was measured. The host periods carry no run blocks, and their per-step spreads say
    /// nothing of how well the difference is known: the spread is the traced periods' run
    /// blocks' ([`Saving::between_periods`]), set around the untraced difference.
    pub fn between_untraced_host_periods(from: &CellAnalysis, to: &CellAnalysis) -> Option<Saving> {
        let median =
            from.tracer_share.as_ref()?.untraced.median - to.tracer_share.as_ref()?.untraced.median;
        let traced = Saving::between_periods(from, to)?;
        Some(Saving {
            median,
            p10: median - (traced.median - traced.p10),
            p90: median + (traced.p90 - traced.median),
            n: traced.n,
        })
    }

    /// What moving from cell `from` to cell `to` saves a step, from their steady periods.
    pub fn between_periods(from: &CellAnalysis, to: &CellAnalysis) -> Option<Saving> {
        Some(Saving::difference(
            from.period.as_ref()?,
            &from.period_block_medians,
            to.period.as_ref()?,
            &to.period_block_medians,
        ))
    }

    pub fn spread(&self) -> f64 {
        self.p90 - self.p10
    }

    /// Whether the saving has a spread to give ([`super::thresholds::MIN_STEPS_TO_JUDGE`]).
    pub fn has_spread(&self) -> bool {
        self.n >= super::thresholds::MIN_STEPS_TO_JUDGE
    }
}
