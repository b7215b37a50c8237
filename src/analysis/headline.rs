//! The answer a screen and a report lead with: the cell the user can gain most on, its largest
//! idle cause, the fix for it (or none needed), and the step a picture of it should draw.
//! Decided here, once; the renderers print it.
#![forbid(unsafe_code)]

use super::cell::CellAnalysis;
use super::cell_comparison::{CellComparison, Paired};
use super::model::CauseKind;
use super::remedy::{Remedy, RemedyKind};
use super::stats::Stat;
use serde::Serialize;

/// Why the headline's cell leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// It is mode 2 of a mode pair (a graph with external event nodes and its twin without),
    /// slower than its twin beyond the spread: what mode 2 costs leads, whatever else a fix
    /// predicts, since it is the question a program with both modes asks.
    ModeCost,
    /// A fix is given for it, with the largest predicted saving of any cell.
    PredictedSaving,
    /// No fix is given anywhere; it is the slowest beyond the spread against its twin (eager
    /// vs graphed, or mode 2 vs mode 1).
    SlowerThanTwin,
    /// No fix, no slowdown: the cell with the largest share of its step idle.
    MostIdle,
}

impl Basis {
    /// What the headline calls its cell: the worst one only where it has something to gain.
    pub fn title(self) -> &'static str {
        match self {
            Basis::ModeCost => "Mode 2 costs",
            Basis::PredictedSaving | Basis::SlowerThanTwin => "Worst cell",
            Basis::MostIdle => "Most idle cell",
        }
    }
}

/// The headline cell's largest idle cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeadingCause {
    pub cause: CauseKind,
    /// The cause as the largest gap of that cause names it.
    pub example: String,
    /// Idle time of this cause per step (ns).
    pub per_step: Stat,
    /// Its median as a share (0–1) of the cell's median step period, when it has one.
    pub share_of_step: Option<f64>,
}

/// The step a picture of the headline draws: step `step` (a position in each cell's steps) of the
/// eager ↔ graphed pair `pair` (an index into
/// [`Analysis::regime_pairs`](super::analyzer::Analysis::regime_pairs)): the step whose periods are
/// closest to both cells' medians.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Picture {
    pub pair: usize,
    pub step: usize,
}

/// See the module doc.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headline {
    /// Index into [`Analysis::cells`](super::analyzer::Analysis::cells).
    pub cell: usize,
    pub basis: Basis,
    /// What the user can gain on the cell a step (ns): the fix's predicted saving, else the
    /// slowdown against its twin, else 0.
    pub gain_ns: f64,
    /// The twin the cell is slower than (an index into
    /// [`Analysis::cells`](super::analyzer::Analysis::cells)), for [`Basis::SlowerThanTwin`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub twin: Option<usize>,
    pub cause: Option<LeadingCause>,
    /// The fix: an index into [`Analysis::remedies`](super::analyzer::Analysis::remedies); `None`:
    /// no change needed (no fix gapscope knows predicts a saving beyond its spread).
    pub fix: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub picture: Option<Picture>,
    /// For [`Basis::ModeCost`]: what mode 2 costs and what the cost is made of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode_cost: Option<ModeCost>,
}

/// What mode 2 costs a step over mode 1, as its pair
/// ([`Analysis::mode_pairs`](super::analyzer::Analysis::mode_pairs)) judged it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeCost {
    /// Index into [`Analysis::mode_pairs`](super::analyzer::Analysis::mode_pairs).
    pub pair: usize,
    /// Mode 2 − mode 1 on the periods the verdict was judged on (ns).
    pub delta_ns: f64,
    /// The mode-1 and mode-2 medians behind it (ns).
    pub base_ns: f64,
    pub head_ns: f64,
    /// Whether those are the untraced periods (else the traced). The parts of the difference
    /// are the pair's ([`CellComparison::gap_growth_by_cause`]).
    pub untraced: bool,
}

impl ModeCost {
    /// The cost as a share of mode 1's period; `None` without one.
    pub fn share_of_base(&self) -> Option<f64> {
        (self.base_ns > 0.0).then(|| self.delta_ns / self.base_ns)
    }
}

/// The headline of `a` (its remedies and pairs made); `None` without cells.
pub fn headline(a: &Paired, remedies: &[Remedy]) -> Option<Headline> {
    if let Some((cell, twin, mode_cost)) = by_mode_cost(a) {
        // The fix of mode 2 itself: the graph usage mode, when it is given.
        let fix = remedies
            .iter()
            .position(|r| r.cell == cell && r.kind == RemedyKind::GraphUsageMode);
        return Some(Headline {
            cell,
            basis: Basis::ModeCost,
            gain_ns: mode_cost.delta_ns,
            twin: Some(twin),
            cause: leading_cause_of(&a.cells[cell], CauseKind::ExternalEventWait)
                .or_else(|| leading_cause(&a.cells[cell])),
            fix,
            picture: picture(a, cell),
            mode_cost: Some(mode_cost),
        });
    }
    let (cell, basis, gain_ns, twin, fix) = by_fix(remedies)
        .or_else(|| by_slowdown(a))
        .or_else(|| by_idle(a))?;
    let cause = leading_cause(&a.cells[cell]);
    Some(Headline {
        cell,
        basis,
        gain_ns,
        twin,
        cause,
        fix,
        picture: picture(a, cell),
        mode_cost: None,
    })
}

/// The mode pair whose mode 2 is slower beyond the spread by most (and not within what tracing
/// adds, which the mode line calls no finding): its mode-2 cell, its twin and the cost.
fn by_mode_cost(a: &Paired) -> Option<(usize, usize, ModeCost)> {
    let (pair, p, _) = a
        .mode_pairs
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.change == Some(super::stats::Change::Slower) && p.within_tracer_effect != Some(true)
        })
        .filter_map(|(i, p)| Some((i, p, judged_delta(p)?)))
        .filter(|(_, _, d)| *d > 0.0)
        .max_by(|x, y| x.2.total_cmp(&y.2))?;
    let (base, head) = (&a.cells[p.base], &a.cells[p.head]);
    let periods = super::cell_comparison::PairPeriods::of(p, base, head);
    let cost = ModeCost {
        pair,
        delta_ns: periods.saving(head, base)?.median,
        base_ns: periods.median(base)?,
        head_ns: periods.median(head)?,
        untraced: periods.untraced(),
    };
    Some((p.head, p.base, cost))
}

type Choice = (usize, Basis, f64, Option<usize>, Option<usize>);

/// The given fix with the largest predicted saving, and its cell.
fn by_fix(remedies: &[Remedy]) -> Option<Choice> {
    remedies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, r.cell, r.predicted_saving_ns?.median)))
        .max_by(|x, y| x.2.total_cmp(&y.2).then(y.0.cmp(&x.0)))
        .map(|(fix, cell, gain)| (cell, Basis::PredictedSaving, gain, None, Some(fix)))
}

/// The pair (eager ↔ graphed, mode 1 ↔ mode 2) whose head is slower beyond the spread by most.
fn by_slowdown(a: &Paired) -> Option<Choice> {
    a.regime_pairs
        .iter()
        .chain(a.mode_pairs)
        .filter(|p| p.change == Some(super::stats::Change::Slower))
        .filter_map(|p| Some((p, judged_delta(p)?)))
        .filter(|(_, d)| *d > 0.0)
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(p, d)| (p.head, Basis::SlowerThanTwin, d, Some(p.base), None))
}

/// Head − base on the periods the pair's change was judged on.
fn judged_delta(p: &CellComparison) -> Option<f64> {
    if p.judged_untraced {
        p.untraced_period_delta.or(p.period_delta)
    } else {
        p.period_delta
    }
}

/// The cell with the largest share of its step idle, an eager cell whose graphed twin is
/// faster last (the user has the better version already); else the first.
fn by_idle(a: &Paired) -> Option<Choice> {
    let replaced = |i: usize| {
        a.regime_pairs
            .iter()
            .any(|p| p.base == i && p.change == Some(super::stats::Change::Faster))
    };
    let share = |i: usize, c: &CellAnalysis| match (&c.idle, c.period.or(c.first_launch_period)) {
        (Some(idle), Some(p)) if p.median > 0.0 && !replaced(i) => idle.median / p.median,
        (Some(_), Some(_)) => -0.5,
        _ => -1.0,
    };
    let (cell, _) = a.cells.iter().enumerate().max_by(|x, y| {
        share(x.0, x.1)
            .total_cmp(&share(y.0, y.1))
            .then(y.0.cmp(&x.0))
    })?;
    Some((cell, Basis::MostIdle, 0.0, None, None))
}

fn leading_cause(c: &CellAnalysis) -> Option<LeadingCause> {
    cause_entry(c, c.idle_by_cause.first()?)
}

/// The cell's idle time of cause `kind`, as a leading cause.
fn leading_cause_of(c: &CellAnalysis, kind: CauseKind) -> Option<LeadingCause> {
    cause_entry(c, c.idle_by_cause.iter().find(|t| t.cause == kind)?)
}

fn cause_entry(c: &CellAnalysis, top: &super::cell::CauseTotal) -> Option<LeadingCause> {
    let step = c.period.or(c.first_launch_period).map(|p| p.median);
    Some(LeadingCause {
        cause: top.cause,
        example: top.example.clone(),
        per_step: top.per_step,
        share_of_step: step.filter(|&s| s > 0.0).map(|s| top.per_step.median / s),
    })
}

/// The eager ↔ graphed pair `cell` is in (else the one losing most), and its most typical step.
fn picture(a: &Paired, cell: usize) -> Option<Picture> {
    let delta = |p: &CellComparison| p.period_delta.unwrap_or(f64::MIN);
    let (pair, p) = a
        .regime_pairs
        .iter()
        .enumerate()
        .filter(|(_, p)| p.head == cell || p.base == cell)
        .max_by(|x, y| delta(x.1).total_cmp(&delta(y.1)))
        .or_else(|| {
            a.regime_pairs
                .iter()
                .enumerate()
                .max_by(|x, y| delta(x.1).total_cmp(&delta(y.1)))
        })?;
    Some(Picture {
        pair,
        step: typical_step(&a.cells[p.base], &a.cells[p.head]),
    })
}

/// The step position whose periods in both cells are closest to their medians (each distance
/// relative to its median); step 1 when no position has both.
fn typical_step(base: &CellAnalysis, head: &CellAnalysis) -> usize {
    let (Some(bm), Some(hm)) = (base.period, head.period) else {
        return 1;
    };
    let off = |p: u64, m: &Stat| (p as f64 - m.median).abs() / m.median.max(1.0);
    base.steps
        .iter()
        .zip(&head.steps)
        .enumerate()
        .filter_map(|(k, (b, h))| Some((k, off(b.period?, &bm) + off(h.period?, &hm))))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .map_or(1, |(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{AnalysisOptions, analyze};
    use crate::trace::synthetic;

    #[test]
    fn the_headline_of_a_trace_with_both_modes_is_mode_2s_cost_and_its_fix() {
        let a = analyze(
            &[synthetic::emu_experiment(40)],
            &["t".to_owned()],
            &AnalysisOptions::default(),
        );
        let h = a.headline.as_ref().expect("a headline");
        assert_eq!(h.basis, Basis::ModeCost);
        let cost = h.mode_cost.as_ref().expect("the cost");
        let pair = &a.mode_pairs[cost.pair];
        assert_eq!((pair.head, Some(pair.base)), (h.cell, h.twin));
        assert_eq!(pair.change, Some(super::super::stats::Change::Slower));
        assert_eq!(Some(cost.delta_ns), judged_delta(pair));
        assert_eq!(cost.head_ns - cost.base_ns, cost.delta_ns);
        // One answer: the fix is the graph usage mode, predicting the pair's own difference.
        let fix = &a.remedies[h.fix.expect("a fix")];
        assert_eq!((fix.kind, fix.cell), (RemedyKind::GraphUsageMode, h.cell));
        assert_eq!(fix.predicted_saving_ns.unwrap().median, cost.delta_ns);
        assert_eq!(h.gain_ns, cost.delta_ns);
        assert_eq!(
            h.cause.as_ref().unwrap().cause,
            CauseKind::ExternalEventWait
        );
    }

    #[test]
    fn the_headline_is_the_fix_with_the_largest_saving_and_its_cells_largest_cause() {
        // Mode 2 only: no mode pair, so the largest predicted saving leads.
        let t = synthetic::trace(
            &[
                synthetic::SyntheticCell::emu(false, 2, 40),
                synthetic::SyntheticCell::emu(true, 2, 40),
            ],
            42,
        );
        let a = analyze(&[t], &["t".to_owned()], &AnalysisOptions::default());
        assert!(a.mode_pairs.is_empty());
        let h = a.headline.as_ref().expect("a headline");
        let fix = &a.remedies[h.fix.expect("a fix")];
        assert_eq!(fix.cell, h.cell);
        assert_eq!(h.basis, Basis::PredictedSaving);
        assert!(
            a.remedies
                .iter()
                .all(|r| r.predicted_saving_ns.unwrap().median <= h.gain_ns)
        );
        let cause = h.cause.as_ref().unwrap();
        assert_eq!(cause.cause, a.cells[h.cell].idle_by_cause[0].cause);
        let p = h.picture.expect("a picture");
        let pair = &a.regime_pairs[p.pair];
        assert!(pair.head == h.cell || pair.base == h.cell);
        assert!(a.cells[pair.head].steps[p.step].period.is_some());
    }
}
