//! Remedies: for an idle cause with a known fix, the fix and the saving it predicts, with the
//! basis of the prediction; and, in `compare BASE HEAD`, whether HEAD realised it.
//!
//! The remedies are data: [`REMEDIES`] holds, per [`RemedyKind`], the action and the evidence
//! a cell must show before the remedy is given. Renderers only print [`Remedy`] values.
#![forbid(unsafe_code)]

use super::cell::CellAnalysis;
use super::cell_comparison::{CellComparison, Paired};
use super::model::{CauseKind, Regime};
use super::saving::Saving;
use super::stats::Stat;
use super::thresholds::{
    FRESH_GRAPH_MIN_EXCESS_NS, FRESH_GRAPH_MIN_RATIO, MATERIAL_SHARE_OF_STEP, MIN_STEPS_TO_JUDGE,
    RESOLUTION_NS,
};
use serde::Serialize;

/// A fix gapscope knows for a cause it attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RemedyKind {
    /// External event-wait nodes created inside an NCCL collective: NCCL graph usage mode 2.
    GraphUsageMode,
    /// An eager step whose largest idle cause is the host launching too late.
    CaptureInGraph,
    /// First launches of new executable graphs far slower than replays of the same workload.
    WarmUpFreshGraphs,
    /// A graphed step whose largest idle cause is the host's graph launch call.
    LaunchBound,
    /// A graphed step whose largest idle cause is host code run before the graph launch call
    /// (the gap is mostly not the call itself).
    HostCodeBeforeLaunch,
}

impl RemedyKind {
    /// This kind's entry of [`REMEDIES`].
    pub fn spec(self) -> &'static RemedySpec {
        REMEDIES
            .iter()
            .find(|s| s.kind == self)
            .expect("REMEDIES has an entry per kind")
    }

    pub fn label(self) -> &'static str {
        match self {
            RemedyKind::GraphUsageMode => "NCCL graph usage mode 1",
            RemedyKind::CaptureInGraph => "capture in a CUDA graph",
            RemedyKind::WarmUpFreshGraphs => "warm up fresh graphs",
            RemedyKind::LaunchBound => "graph launch-bound",
            RemedyKind::HostCodeBeforeLaunch => "host code before the launch",
        }
    }
}

/// One remedy and the evidence a cell must show for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemedySpec {
    pub kind: RemedyKind,
    pub action: &'static str,
    /// The action in a few words, for a line of a screen.
    pub short: &'static str,
    /// Regime of the cells it applies to.
    pub regime: Regime,
    /// The idle causes it removes (any one of them); empty when it comes from other figures.
    pub causes: &'static [CauseKind],
    /// One of the causes must be the cell's largest idle cause, not merely present.
    pub largest_cause_only: bool,
    /// Needs the graph DAG (which call created each node); Kineto imports have none.
    pub needs_dag: bool,
    /// Needs first launches of executable graphs and steady replays of the same workload.
    pub needs_first_launches: bool,
}

/// Every remedy gapscope gives, one entry per [`RemedyKind`].
pub const REMEDIES: [RemedySpec; 5] = [
    RemedySpec {
        kind: RemedyKind::GraphUsageMode,
        action: "create this communicator with `ncclConfig_t.graphUsageMode = 1` (NCCL ≥ 2.29) or `NCCL_GRAPH_MIXING_SUPPORT=0` (older)",
        short: "NCCL graph usage mode 1 for this communicator",
        regime: Regime::Graphed,
        causes: &[CauseKind::ExternalEventWait],
        largest_cause_only: false,
        needs_dag: true,
        needs_first_launches: false,
    },
    RemedySpec {
        kind: RemedyKind::CaptureInGraph,
        action: "capture the step in a CUDA graph",
        short: "capture the step in a CUDA graph",
        regime: Regime::Eager,
        causes: &[CauseKind::HostLaunchBound],
        largest_cause_only: true,
        needs_dag: false,
        needs_first_launches: false,
    },
    RemedySpec {
        kind: RemedyKind::WarmUpFreshGraphs,
        action: "instantiate once and replay, or warm up (launch each new executable graph once) before timing",
        short: "instantiate once and replay, or warm up",
        regime: Regime::Graphed,
        causes: &[],
        largest_cause_only: false,
        needs_dag: false,
        needs_first_launches: true,
    },
    RemedySpec {
        kind: RemedyKind::LaunchBound,
        action: "the host's graph launch call bounds the step: launch from a thread that is not busy, or batch steps into one graph",
        short: "launch from a free thread, or batch steps",
        regime: Regime::Graphed,
        causes: &[CauseKind::GraphLaunchHostBound],
        largest_cause_only: true,
        needs_dag: false,
        needs_first_launches: false,
    },
    RemedySpec {
        kind: RemedyKind::HostCodeBeforeLaunch,
        action: "the host runs other code before its launches while the device waits: take that code off the step's path (run it while the graph replays, or capture its work in the graph)",
        short: "take the host code before the launches off the step's path",
        regime: Regime::Graphed,
        causes: &[CauseKind::GraphLaunchHostBound, CauseKind::HostLaunchBound],
        largest_cause_only: true,
        needs_dag: false,
        needs_first_launches: false,
    },
];

/// A remedy for one cell, with its predicted saving.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Remedy {
    pub kind: RemedyKind,
    /// Index into [`Analysis::cells`](super::analyzer::Analysis::cells).
    pub cell: usize,
    pub action: String,
    /// The cause (its label) or figures the remedy was derived from.
    pub evidence: String,
    pub predicted_saving_ns: Option<Saving>,
    /// Where the prediction comes from, or why there is none.
    pub basis: String,
}

/// When a remedy is given, as the reports say it beside the remedies withheld.
pub fn given_only_when() -> String {
    format!(
        "a remedy is given only from at least {MIN_STEPS_TO_JUDGE} steps with a period, when it predicts a saving beyond its spread and at least {:.0} % of the step, and not as a graph capture of a step that runs as a graph already",
        MATERIAL_SHARE_OF_STEP * 100.0
    )
}

/// A remedy whose evidence the analysis shows but which is not given: its cell has too few
/// steps to judge, or its predicted saving is inside its own spread or immaterial.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Withheld {
    pub remedy: Remedy,
    pub why: String,
    /// Withheld for too few steps ([`super::thresholds::MIN_STEPS_TO_JUDGE`]): the screen says so,
    /// where a remedy is looked for first.
    pub too_few_steps: bool,
}

/// Every remedy whose evidence the analysis shows, by cell, in [`REMEDIES`] order: those given,
/// and those withheld because the figures behind them come from fewer than
/// [`super::thresholds::MIN_STEPS_TO_JUDGE`] steps, or they predict no saving, or their predicted
/// saving is not beyond its spread (its p10 is not above zero) or under
/// [`MATERIAL_SHARE_OF_STEP`] of the step, or they would capture in a graph a step whose graphed
/// twin is in the analysis already (the eager ↔ graphed comparison is the finding then).
pub fn remedies(a: &Paired) -> (Vec<Remedy>, Vec<Withheld>) {
    let mut given = Vec::new();
    let mut withheld = Vec::new();
    for r in candidates(a) {
        let Some(cell) = a.cells.get(r.cell) else {
            continue;
        };
        if let Some(why) = super::stats::too_few_steps(steps_behind(&r, cell), "a remedy") {
            withheld.push(Withheld {
                remedy: r,
                why,
                too_few_steps: true,
            });
        } else if let Some(why) = graphed_twin(a, &r).or_else(|| match judged_by_pair(a, &r) {
            Some(Ok(())) => immaterial(&r, cell),
            Some(Err(not_slower)) => Some(not_slower),
            None => why_withheld(&r, cell),
        }) {
            withheld.push(Withheld {
                remedy: r,
                why,
                too_few_steps: false,
            });
        } else {
            given.push(r);
        }
    }
    (given, withheld)
}

/// The steps behind a remedy: its predicted saving's, else its cell's steps with a period (the
/// steps its idle figures come from).
fn steps_behind(r: &Remedy, cell: &CellAnalysis) -> usize {
    match &r.predicted_saving_ns {
        Some(saving) => saving.n,
        None => cell.idle.as_ref().map_or(0, |idle| idle.n),
    }
}

/// Why a capture remedy is not one: the step's graphed twin is in the analysis already.
fn graphed_twin(a: &Paired, r: &Remedy) -> Option<String> {
    if r.kind != RemedyKind::CaptureInGraph {
        return None;
    }
    let pair = a.regime_pairs.iter().find(|p| p.base == r.cell)?;
    Some(format!(
        "the step runs as a graph already (`{}`): the eager ↔ graphed comparison is the finding",
        a.cells[pair.head].label
    ))
}

/// A graph usage mode fix whose two sides the trace holds (mode 2 and its mode-1 twin) is
/// beyond its spread exactly when their pair is slower, so that the fix and the mode line give
/// one answer: `Some(Ok)` when the pair is slower, `Some(Err(why))` when not; `None` for any
/// other remedy.
fn judged_by_pair(a: &Paired, r: &Remedy) -> Option<Result<(), String>> {
    if r.kind != RemedyKind::GraphUsageMode {
        return None;
    }
    let pair = a.mode_pairs.iter().find(|p| p.head == r.cell)?;
    if pair.within_tracer_effect == Some(true) {
        return Some(Err(
            "mode 2's traced difference is within what tracing adds to a step: not a finding"
                .to_owned(),
        ));
    }
    Some(match pair.change {
        Some(super::stats::Change::Slower) => Ok(()),
        change => Err(format!(
            "mode 2 is not slower than mode 1 (`{}`) beyond the run-to-run spread ({})",
            pair.base_label,
            change.map_or("no verdict", super::stats::Change::label)
        )),
    })
}

/// Why `r`'s predicted saving does not earn it a place, if it does not.
fn why_withheld(r: &Remedy, cell: &CellAnalysis) -> Option<String> {
    let Some(saving) = r.predicted_saving_ns.as_ref() else {
        return Some(format!("no saving predicted: {}", r.basis));
    };
    if saving.p10 <= 0.0 {
        let us = super::stats::us;
        return Some(format!(
            "predicted saving {} [{}–{}] is within its spread (p10 not above zero)",
            us(saving.median),
            us(saving.p10),
            us(saving.p90)
        ));
    }
    immaterial(r, cell)
}

/// Why `r`'s predicted saving is too small to give, if it is: under
/// [`MATERIAL_SHARE_OF_STEP`] of the step.
fn immaterial(r: &Remedy, cell: &CellAnalysis) -> Option<String> {
    let saving = r.predicted_saving_ns.as_ref()?;
    let step = cell.period.or(cell.first_launch_period)?.median;
    if saving.median < MATERIAL_SHARE_OF_STEP * step {
        return Some(format!(
            "predicted saving {:.2} µs is under {:.0} % of the {:.2} µs step",
            saving.median / 1e3,
            MATERIAL_SHARE_OF_STEP * 100.0,
            step / 1e3
        ));
    }
    None
}

/// Every remedy whose evidence the analysis shows, given or not.
fn candidates(a: &Paired) -> Vec<Remedy> {
    let mut out = Vec::new();
    for (index, cell) in a.cells.iter().enumerate() {
        for spec in &REMEDIES {
            if !shows_evidence(spec, cell) {
                continue;
            }
            let found = match spec.kind {
                RemedyKind::GraphUsageMode => graph_usage_mode(a, index, cell),
                RemedyKind::CaptureInGraph => capture_in_graph(a, index, cell),
                RemedyKind::WarmUpFreshGraphs => warm_up_fresh_graphs(a, cell),
                RemedyKind::LaunchBound => launch_bound(cell),
                RemedyKind::HostCodeBeforeLaunch => host_code_before_launch(cell),
            };
            if let Some((evidence, predicted_saving_ns, basis)) = found {
                out.push(Remedy {
                    kind: spec.kind,
                    cell: index,
                    action: spec.action.to_owned(),
                    evidence,
                    predicted_saving_ns,
                    basis,
                });
            }
        }
    }
    out
}

/// The evidence [`RemedySpec`] asks for; kind-specific checks follow in each remedy's function.
fn shows_evidence(spec: &RemedySpec, cell: &CellAnalysis) -> bool {
    if cell.observed.regime != Some(spec.regime) || (spec.needs_dag && !has_dag(cell)) {
        return false;
    }
    if spec.needs_first_launches && cell.first_launch_period.is_none() {
        return false;
    }
    if spec.causes.is_empty() {
        return true;
    }
    if spec.largest_cause_only {
        return cell
            .idle_by_cause
            .first()
            .is_some_and(|t| spec.causes.contains(&t.cause));
    }
    spec.causes
        .iter()
        .any(|&kind| cause_total(cell, kind).is_some())
}

fn has_dag(cell: &CellAnalysis) -> bool {
    cell.observed
        .graph_usage_mode
        .as_deref()
        .is_some_and(|m| !m.starts_with("unknown"))
}

fn cause_total(cell: &CellAnalysis, kind: CauseKind) -> Option<&super::cell::CauseTotal> {
    cell.idle_by_cause.iter().find(|t| t.cause == kind)
}

fn has_steady_steps(cell: &CellAnalysis) -> bool {
    cell.steps
        .iter()
        .any(|s| !s.first_launch && s.period.is_some())
}

type Found = Option<(String, Option<Saving>, String)>;

fn graph_usage_mode(a: &Paired, index: usize, cell: &CellAnalysis) -> Found {
    // Mode 2 as observed: external event-wait nodes created inside an NCCL call; or external
    // waits made elsewhere (NCCL's serial-event shape built by hand) where the same workload
    // ran without them too, which shows what mode 1 would save.
    let pair = a.mode_pairs.iter().find(|p| p.head == index);
    let mode_2 = cell.observed.graph_usage_mode_short() == Some("2");
    if !(mode_2 && (cell.observed.external_nodes_from_nccl || pair.is_some())) {
        return None;
    }
    let evidence = cause_total(cell, CauseKind::ExternalEventWait)?
        .example
        .clone();
    if let Some(pair) = pair {
        let base = &a.cells[pair.base];
        let mode = base
            .requested_mode()
            .map_or("1".to_owned(), |m| m.to_string());
        // The pair's own figures, the program's where known (the headline's cost is the same
        // figure: `PairPeriods`).
        let periods = super::cell_comparison::PairPeriods::of(pair, base, cell);
        let (saving, measured) = (periods.saving(cell, base), periods.describe());
        let basis = format!(
            "the {measured} of mode-{mode} cell `{}` of the same workload, measured",
            base.label
        );
        return Some((evidence, saving, basis));
    }
    // No mode-1 cell measured: the wait's gap, less the latency any graph edge has.
    let Some(wait) = cell
        .sequence
        .iter()
        .find(|e| e.gap_cause == CauseKind::ExternalEventWait)
    else {
        let basis = "none: no op position is preceded by the external wait in most steps";
        return Some((evidence, None, basis.to_owned()));
    };
    let mut dependency: Vec<f64> = cell
        .sequence
        .iter()
        .filter(|e| e.gap_cause == CauseKind::GraphDependency)
        .map(|e| e.gap_before.median)
        .collect();
    let latency = Stat::of(&mut dependency).map_or(0.0, |s| s.median);
    let basis = format!(
        "the gap itself minus the graph's own dependency latency ({:.2} µs)",
        latency / 1e3
    );
    Some((
        evidence,
        Some(Saving::from_stat_minus(&wait.gap_before, latency)),
        basis,
    ))
}

fn capture_in_graph(a: &Paired, index: usize, cell: &CellAnalysis) -> Found {
    let host_bound = cause_total(cell, CauseKind::HostLaunchBound)?;
    let evidence = format!(
        "{}: {:.2} µs idle per step (largest cause)",
        host_bound.example,
        host_bound.per_step.median / 1e3
    );
    // The graphed cell of the same workload, replays before first launches.
    let pairs: Vec<&CellComparison> = a.regime_pairs.iter().filter(|p| p.base == index).collect();
    let graphed = pairs
        .iter()
        .find(|p| has_steady_steps(&a.cells[p.head]))
        .or(pairs.first())
        .map(|p| &a.cells[p.head]);
    if let Some(g) = graphed
        && let Some(saving) = Saving::between_periods(cell, g)
    {
        let basis = format!("measured graphed cell `{}`", g.label);
        return Some((evidence, Some(saving), basis));
    }
    Some((
        evidence,
        Some(Saving::from_stat_minus(&host_bound.per_step, 0.0)),
        "the host launch-bound idle time".to_owned(),
    ))
}

fn warm_up_fresh_graphs(a: &Paired, cell: &CellAnalysis) -> Found {
    let first = cell.first_launch_period.as_ref()?;
    let (replays, saving, basis) = if has_steady_steps(cell) {
        let replays = cell.period.as_ref()?;
        let saving = Saving::difference(first, &[], replays, &cell.period_block_medians);
        (replays, saving, "measured replays of this cell".to_owned())
    } else {
        let other = replay_cell(a, cell)?;
        // Every step is a first launch: the cell's period and its runs are first launches.
        let saving = Saving::between_periods(cell, other)?;
        let basis = format!("measured replays `{}` of the same workload", other.label);
        (other.period.as_ref()?, saving, basis)
    };
    let far_above = first.median >= FRESH_GRAPH_MIN_RATIO * replays.median
        && first.median - replays.median >= FRESH_GRAPH_MIN_EXCESS_NS;
    if !far_above {
        return None;
    }
    let evidence = format!(
        "first launches {:.2} µs vs replays {:.2} µs a step ({:.2}×)",
        first.median / 1e3,
        replays.median / 1e3,
        first.median / replays.median
    );
    Some((evidence, Some(saving), basis))
}

/// A graphed cell of the same workload with steady replays, same observed graph usage mode
/// first (a mode-2 graph's first launches are not judged against mode-1 replays).
fn replay_cell<'a>(a: &'a Paired, cell: &CellAnalysis) -> Option<&'a CellAnalysis> {
    let key = cell.workload_key_without(&["launch"]);
    let candidates: Vec<&CellAnalysis> = a
        .cells
        .iter()
        .filter(|c| {
            c.observed.regime == Some(Regime::Graphed)
                && has_steady_steps(c)
                && c.period.is_some()
                && c.workload_key_without(&["launch"]) == key
        })
        .collect();
    candidates
        .iter()
        .find(|c| c.observed.graph_usage_mode == cell.observed.graph_usage_mode)
        .or(candidates.first())
        .copied()
}

/// Whether the host-bound graph launches' gaps are mostly the launch calls themselves
/// ([`RemedyKind::LaunchBound`]) rather than host code run before them
/// ([`RemedyKind::HostCodeBeforeLaunch`]): the median launch call against the median host
/// time a step before the launches (one graph launch a step, as replay loops have).
fn launch_calls_dominate(cell: &CellAnalysis) -> bool {
    match (cell.host_bound_launch_calls, cell.host_before_launch) {
        (Some(calls), Some(before)) => before.median <= calls.median,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn launch_bound(cell: &CellAnalysis) -> Found {
    if !launch_calls_dominate(cell) {
        return None;
    }
    let launch_calls = cell.host_bound_launch_calls?;
    let evidence = format!(
        "graph launch host-bound: the launch call ran {:.2} µs [{:.2}–{:.2}] n={}",
        launch_calls.median / 1e3,
        launch_calls.p10 / 1e3,
        launch_calls.p90 / 1e3,
        launch_calls.n
    );
    let basis = "none predicted: the launch call's own duration bounds the step, and how much \
                 faster the host can issue it is not in the trace"
        .to_owned();
    Some((evidence, None, basis))
}

/// The host time before the launch calls is the saving, less what tracing adds to the period
/// where the run measured it (the tracer's callbacks slow the host code in between): the
/// prediction is then the program's, not the tracer's.
fn host_code_before_launch(cell: &CellAnalysis) -> Found {
    if launch_calls_dominate(cell) {
        return None;
    }
    let before = cell.host_before_launch?;
    let calls = cell
        .host_bound_launch_calls
        .map(|c| {
            format!(
                "; its host-bound graph launch calls ran {:.2} µs [{:.2}–{:.2}] n={}",
                c.median / 1e3,
                c.p10 / 1e3,
                c.p90 / 1e3,
                c.n
            )
        })
        .unwrap_or_default();
    // The code the host samples name in those gaps, where there are enough of them.
    let named = cell.host_time.as_ref().filter(|t| !t.named().is_empty());
    let sampled = named
        .map(|t| format!("; sampled there: {}", t.describe()))
        .unwrap_or_default();
    let evidence = format!(
        "{}: the host ran other code for {:.2} µs [{:.2}–{:.2}] n={} a step before launches while the device waited{calls}{sampled}",
        cell.idle_by_cause
            .first()
            .map_or("host-bound", |t| t.cause.label()),
        before.median / 1e3,
        before.p10 / 1e3,
        before.p90 / 1e3,
        before.n,
    );
    // Only untraced time is a saving: the host time as traced less what tracing adds to the
    // step, and no more than the untraced step leaves the device idle (no host code removed
    // makes a step faster than its device work: in a tight replay loop the host time before
    // a launch is mostly the launch call's and the tracer's).
    let (Some(traced), Some(untraced)) = (cell.period, cell.untraced_period) else {
        let basis = "none predicted: the host time before the launches was measured only as traced (a Kineto import, or a recording without untraced steps), and tracing lengthens it by an amount this run did not measure";
        return Some((evidence, None, basis.to_owned()));
    };
    // Without host samples naming the code in those gaps, the host time before a launch can
    // be the launch path itself (a replay loop's own Python, the replay call, event records):
    // nothing a user could take off the path is known.
    if named.is_none() {
        let basis = "none predicted: no host samples name the code in these gaps, and in a replay loop the host time before a launch is mostly the launch path itself (the loop, the replay call, event records)";
        return Some((evidence, None, basis.to_owned()));
    }
    let added = (traced.median - untraced.median).max(0.0);
    let mut saving = Saving::from_stat_minus(&before, added);
    let mut basis = if added > 0.0 {
        format!(
            "the host time before the launches, less the {:.2} µs tracing adds to the step",
            added / 1e3
        )
    } else {
        "the host time before the launches (tracing adds nothing to the step)".to_owned()
    };
    if let Some(busy) = cell.busy {
        let idle = (untraced.median - busy.median).max(0.0);
        if saving.median > idle {
            saving = Saving {
                median: idle,
                p10: saving.p10.min(idle),
                p90: saving.p90.min(idle),
                n: saving.n,
            };
            basis.push_str(&format!(
                ", at most the {:.2} µs the untraced step leaves the device idle",
                idle / 1e3
            ));
        }
    }
    Some((evidence, Some(saving), basis))
}

/// Whether HEAD realised the saving a remedy predicted for BASE: one judgement per compared
/// pair, the pair's own [`CellComparison::change`], so that the change, the measured saving and
/// this verdict never disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Realisation {
    /// HEAD is faster beyond the spread, by the predicted saving or more.
    Realised,
    /// HEAD is faster beyond the spread, but by less than predicted beyond the combined spread.
    NotRealised,
    /// The difference is inside the run-to-run spread: no saving.
    WithinSpread,
    /// HEAD is slower beyond the spread.
    Slower,
    /// HEAD's cell still shows the cause the remedy removes: the fix is not in HEAD.
    NotApplied,
    /// A period or a verdict is missing on either side.
    Unknown,
}

impl Realisation {
    pub fn label(self) -> &'static str {
        match self {
            Realisation::Realised => "realised",
            Realisation::NotRealised => "not realised (less than predicted)",
            Realisation::WithinSpread => "not realised (within spread)",
            Realisation::Slower => "not realised (head slower)",
            Realisation::NotApplied => "not applied",
            Realisation::Unknown => "unknown",
        }
    }
}

/// One matched cell pair of `compare BASE HEAD` whose BASE cell had a predicted saving.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemedyCheck {
    pub kind: RemedyKind,
    /// Indices into the base's and the head's cells.
    pub base: usize,
    pub head: usize,
    pub base_label: String,
    pub head_label: String,
    pub predicted_ns: Saving,
    /// base − head period (positive = saved), spread run to run, on the periods the pair's
    /// change was judged on (the untraced ones where both cells have them); `None` without
    /// periods.
    pub measured_ns: Option<Saving>,
    pub verdict: Realisation,
    pub why: String,
}

/// Whether HEAD's cell no longer shows the cause `kind` removes: the fix is in HEAD.
fn applied(kind: RemedyKind, head: &CellAnalysis) -> Result<(), &'static str> {
    match kind {
        RemedyKind::GraphUsageMode if head.observed.external_wait_nodes > 0 => {
            Err("HEAD's graph still holds the external event-wait node")
        }
        RemedyKind::CaptureInGraph if head.observed.regime != Some(Regime::Graphed) => {
            Err("HEAD's step is still eager")
        }
        RemedyKind::WarmUpFreshGraphs if !has_steady_steps(head) => {
            Err("HEAD's steps are still first launches of new graphs")
        }
        _ => Ok(()),
    }
}

/// base − head on the periods `pair`'s change was judged on: the untraced ones where both
/// cells have them, else the traced.
fn measured_saving(pair: &CellComparison, b: &CellAnalysis, h: &CellAnalysis) -> Option<Saving> {
    if pair.judged_untraced {
        return Some(Saving::difference(
            b.untraced_period.as_ref()?,
            &b.untraced_window_medians,
            h.untraced_period.as_ref()?,
            &h.untraced_window_medians,
        ));
    }
    Saving::between_periods(b, h)
}

/// For every matched pair whose BASE cell has a remedy with a predicted saving: predicted vs
/// measured saving, or `NotApplied` when HEAD's cell still shows the cause.
pub fn realised(
    base: &[CellAnalysis],
    base_remedies: &[Remedy],
    head: &[CellAnalysis],
    matched: &[CellComparison],
) -> Vec<RemedyCheck> {
    let mut checks = Vec::new();
    for pair in matched {
        let (b, h) = (&base[pair.base], &head[pair.head]);
        for remedy in base_remedies.iter().filter(|r| r.cell == pair.base) {
            let Some(predicted) = remedy.predicted_saving_ns else {
                continue;
            };
            let measured = measured_saving(pair, b, h);
            let (verdict, why) = match applied(remedy.kind, h) {
                Ok(()) => judge(&predicted, measured.as_ref(), pair),
                Err(why) => (Realisation::NotApplied, why.to_owned()),
            };
            checks.push(RemedyCheck {
                kind: remedy.kind,
                base: pair.base,
                head: pair.head,
                base_label: b.label.clone(),
                head_label: h.label.clone(),
                predicted_ns: predicted,
                measured_ns: measured,
                verdict,
                why,
            });
        }
    }
    checks
}

/// The pair's change decides: no change is no saving, slower is a loss; faster is realised
/// unless the measured saving falls short of the predicted one by more than the combined
/// spread (the predicted p10–p90 width plus the measured saving's run-to-run width, at least
/// the timestamp resolution).
pub fn judge(
    predicted: &Saving,
    measured: Option<&Saving>,
    pair: &CellComparison,
) -> (Realisation, String) {
    let Some(m) = measured else {
        return (
            Realisation::Unknown,
            "no steady period on one side".to_owned(),
        );
    };
    let us = super::stats::us;
    let figures = format!(
        "saved {} [{}–{}], predicted {}",
        us(m.median),
        us(m.p10),
        us(m.p90),
        us(predicted.median)
    );
    match pair.change {
        None => {
            let why = pair
                .no_verdict
                .clone()
                .unwrap_or_else(|| "no verdict on the periods".to_owned());
            (Realisation::Unknown, why)
        }
        Some(super::stats::Change::NoChange) => (
            Realisation::WithinSpread,
            format!("{figures}: the difference is inside the run-to-run spread"),
        ),
        Some(super::stats::Change::Slower) => (
            Realisation::Slower,
            format!("{figures}: HEAD is slower beyond the run-to-run spread"),
        ),
        Some(super::stats::Change::Faster) => {
            let tolerance = predicted.spread().max(0.0) + m.spread().max(0.0).max(RESOLUTION_NS);
            let short = predicted.median - m.median;
            if short <= tolerance {
                let why = format!("{figures}: within the combined spread ({})", us(tolerance));
                (Realisation::Realised, why)
            } else {
                let why = format!(
                    "{figures}: faster, but {} less than predicted, beyond the combined spread ({})",
                    us(short),
                    us(tolerance)
                );
                (Realisation::NotRealised, why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Analysis, AnalysisOptions, analyze};
    use crate::trace::synthetic::{self, SyntheticCell};

    fn analysis(cells: &[SyntheticCell]) -> Analysis {
        analyze(
            &[synthetic::trace(cells, 5)],
            &["synthetic".to_owned()],
            &AnalysisOptions::default(),
        )
    }

    fn saving(median: f64, p10: f64, p90: f64) -> Saving {
        Saving {
            median,
            p10,
            p90,
            n: 50,
        }
    }

    #[test]
    fn table_has_one_entry_per_kind() {
        for kind in [
            RemedyKind::GraphUsageMode,
            RemedyKind::CaptureInGraph,
            RemedyKind::WarmUpFreshGraphs,
            RemedyKind::LaunchBound,
            RemedyKind::HostCodeBeforeLaunch,
        ] {
            assert_eq!(REMEDIES.iter().filter(|s| s.kind == kind).count(), 1);
            assert_eq!(kind.spec().kind, kind);
        }
        assert!(RemedyKind::GraphUsageMode.spec().needs_dag);
        assert!(REMEDIES.iter().filter(|s| s.needs_dag).count() == 1);
    }

    #[test]
    fn difference_uses_run_blocks_else_the_widest_per_step_spread() {
        let from = Stat::of(&mut [10.0, 20.0, 30.0]).unwrap();
        let to = Stat::of(&mut [1.0, 2.0, 3.0, 4.0]).unwrap();
        let wide = Saving::difference(&from, &[], &to, &[]);
        assert_eq!(wide.median, 20.0 - 2.5);
        assert_eq!((wide.p10, wide.p90), (from.p10 - to.p90, from.p90 - to.p10));
        assert_eq!(wide.n, 3);
        let runs = Saving::difference(&from, &[19.0, 21.0], &to, &[2.0, 3.0]);
        // Pairwise: 16, 17, 18, 19.
        assert_eq!(runs.median, 17.5);
        assert!((runs.p10 - 16.3).abs() < 1e-9 && (runs.p90 - 18.7).abs() < 1e-9);
    }

    /// A compared pair whose change is `change`.
    fn pair(change: Option<crate::analysis::stats::Change>) -> CellComparison {
        let (_, a) = crate::report::fixtures::fixture();
        let mut p = crate::analysis::cell_comparison::compare_cells(0, 1, &a.cells[0], &a.cells[1]);
        p.change = change;
        p
    }

    #[test]
    fn judge_follows_the_pairs_change_and_accepts_within_combined_spread_only() {
        use crate::analysis::stats::Change;
        let predicted = saving(1_000.0, 900.0, 1_100.0);
        let close = saving(1_250.0, 1_200.0, 1_300.0);
        let faster = pair(Some(Change::Faster));
        assert_eq!(
            judge(&predicted, Some(&close), &faster).0,
            Realisation::Realised
        );
        let short = saving(300.0, 250.0, 350.0);
        let (verdict, why) = judge(&predicted, Some(&short), &faster);
        assert_eq!(verdict, Realisation::NotRealised);
        assert!(why.contains("0.70 µs less"), "{why}");
        // Close to the prediction, but the pair's change is "no change": not realised.
        let (verdict, why) = judge(&predicted, Some(&close), &pair(Some(Change::NoChange)));
        assert_eq!(verdict, Realisation::WithinSpread);
        assert!(why.contains("inside the run-to-run spread"), "{why}");
        assert_eq!(verdict.label(), "not realised (within spread)");
        let lost = saving(-100.0, -150.0, -50.0);
        let (verdict, why) = judge(&predicted, Some(&lost), &pair(Some(Change::Slower)));
        assert_eq!(verdict, Realisation::Slower);
        assert!(why.contains("saved −0.10 µs [−0.15 µs–−0.05 µs]"), "{why}");
        assert_eq!(judge(&predicted, None, &faster).0, Realisation::Unknown);
        assert_eq!(
            judge(&predicted, Some(&close), &pair(None)).0,
            Realisation::Unknown
        );
    }

    #[test]
    fn host_launch_bound_idle_that_is_not_the_largest_gets_no_capture_remedy() {
        let a = analysis(&[
            SyntheticCell::emu(false, 1, 30),
            SyntheticCell::emu(true, 1, 30),
        ]);
        let causes: Vec<CauseKind> = a.cells[0].idle_by_cause.iter().map(|t| t.cause).collect();
        // The synthetic host mostly runs ahead of the device: stream-order latency dominates.
        assert_eq!(causes[0], CauseKind::StreamOrderLatency);
        assert!(causes.contains(&CauseKind::HostLaunchBound), "{causes:?}");
        assert!(a.remedies.iter().all(|r| r.cell != 0), "{:?}", a.remedies);
    }

    /// The graphed cell of `a` copied as a cell of first launches whose periods are `factor`
    /// times the replays'.
    fn with_fresh_copy(mut a: Analysis, factor: f64) -> Analysis {
        let mut fresh = a.cells[0].clone();
        fresh.label = "graphed fresh".into();
        fresh.requested.insert("launch".into(), "fresh".into());
        for s in &mut fresh.steps {
            s.first_launch = true;
        }
        let periods: Vec<f64> = a.cells[0]
            .steps
            .iter()
            .filter_map(|s| s.period.map(|p| p as f64 * factor))
            .collect();
        fresh.period = Stat::of(&mut periods.clone());
        fresh.first_launch_period = fresh.period;
        fresh.period_block_medians = crate::analysis::stats::block_medians(&periods, 10);
        a.cells.push(fresh);
        (a.remedies, a.withheld_remedies) = remedies(&a.paired());
        a
    }

    #[test]
    fn fresh_graphs_far_above_replays_get_warm_up() {
        let a = with_fresh_copy(analysis(&[SyntheticCell::emu(true, 1, 60)]), 2.0);
        let warm: Vec<&Remedy> = a
            .remedies
            .iter()
            .filter(|r| r.kind == RemedyKind::WarmUpFreshGraphs)
            .collect();
        assert_eq!(warm.len(), 1);
        assert_eq!(warm[0].cell, 1);
        assert!(warm[0].basis.contains("`graphed mode=1 T=1 emu`"));
        let replay = a.cells[0].period.unwrap().median;
        let saved = warm[0].predicted_saving_ns.unwrap();
        // First launches at 2× the replays: the saving is about one replay period.
        assert!((saved.median - replay).abs() < 0.02 * replay, "{saved:?}");
        assert!(saved.p10 <= saved.median && saved.median <= saved.p90);
    }

    /// The graphed cell of `a`, made to lose its steps to host-bound graph launches: gaps whose
    /// host time before the launch call is `before_us` a step, calls of `calls_us`; untraced
    /// `untraced_us` a step when given. Its remedies, given and withheld.
    fn host_bound_graphed(
        before_us: f64,
        calls_us: f64,
        untraced_us: Option<f64>,
    ) -> (Vec<Remedy>, Vec<Withheld>) {
        host_bound_graphed_with(before_us, calls_us, untraced_us, true)
    }

    /// [`host_bound_graphed`], with host samples naming one code in the gaps or none.
    fn host_bound_graphed_with(
        before_us: f64,
        calls_us: f64,
        untraced_us: Option<f64>,
        named_code: bool,
    ) -> (Vec<Remedy>, Vec<Withheld>) {
        let mut a = analysis(&[SyntheticCell::emu(true, 1, 30)]);
        let stat = |us: f64| Stat {
            median: us * 1e3,
            p10: us * 0.9e3,
            p90: us * 1.2e3,
            min: us * 0.8e3,
            max: us * 1.5e3,
            n: 29,
        };
        let c = &mut a.cells[0];
        c.idle_by_cause.insert(
            0,
            super::super::CauseTotal {
                cause: CauseKind::GraphLaunchHostBound,
                example: "before k0 — graph launch host-bound".into(),
                per_step: stat(before_us + calls_us),
            },
        );
        c.host_bound_launch_calls = Some(stat(calls_us));
        c.host_before_launch = Some(stat(before_us));
        c.period = Some(stat(before_us + calls_us + 20.0));
        c.untraced_period = untraced_us.map(stat);
        c.host_time = named_code.then(|| super::super::host_samples::HostTime {
            gaps: 29,
            gap_ns: 29_000,
            per_step: None,
            samples: 40,
            exact: false,
            top: vec![super::super::host_samples::HostCode {
                code: "model.py:12 prepare_inputs".into(),
                calls: None,
                innermost: "model.py:12 prepare_inputs".into(),
                samples: 40,
                share: 1.0,
            }],
        });
        remedies(&a.paired())
    }

    #[test]
    fn host_code_before_the_launch_call_is_the_fix_when_it_outweighs_the_call() {
        // Host time measured only as traced is no saving: the fix is withheld, saying why.
        let (given, withheld) = host_bound_graphed(1_400.0, 90.0, None);
        assert!(given.is_empty(), "{given:?}");
        let w = &withheld[0];
        assert_eq!(w.remedy.kind, RemedyKind::HostCodeBeforeLaunch);
        assert!(w.remedy.predicted_saving_ns.is_none());
        assert!(w.why.contains("only as traced"), "{}", w.why);
        assert!(
            w.remedy.evidence.contains("1400.00 µs"),
            "{}",
            w.remedy.evidence
        );
        // What tracing adds to the step (traced 1510 µs, untraced 1410 µs) is not predicted.
        let (given, _) = host_bound_graphed(1_400.0, 90.0, Some(1_410.0));
        assert_eq!(given.len(), 1, "{given:?}");
        assert_eq!(given[0].kind, RemedyKind::HostCodeBeforeLaunch);
        let saving = given[0].predicted_saving_ns.unwrap();
        assert_eq!(saving.median, 1_300e3);
        assert!(given[0].basis.contains("less the 100.00 µs tracing adds"));
        // Only tracing's: the host time left is inside its spread, and nothing is given.
        let (given, withheld) = host_bound_graphed(100.0, 90.0, Some(120.0));
        assert!(given.is_empty(), "{given:?}");
        assert_eq!(withheld[0].remedy.kind, RemedyKind::HostCodeBeforeLaunch);
    }

    #[test]
    fn host_time_before_a_launch_that_no_sample_names_is_no_saving() {
        let (given, _) = host_bound_graphed(1_400.0, 90.0, Some(1_410.0));
        assert_eq!(given.len(), 1, "named code: {given:?}");
        // The same gaps with no host samples: they may be the replay loop's own launch path.
        let (given, withheld) = host_bound_graphed_with(1_400.0, 90.0, Some(1_410.0), false);
        assert!(given.is_empty(), "{given:?}");
        assert_eq!(withheld[0].remedy.kind, RemedyKind::HostCodeBeforeLaunch);
        assert!(
            withheld[0].why.contains("no host samples name the code"),
            "{}",
            withheld[0].why
        );
    }

    #[test]
    fn a_launch_call_longer_than_the_host_code_before_it_is_launch_bound() {
        let (given, withheld) = host_bound_graphed(30.0, 300.0, None);
        assert!(given.is_empty(), "launch-bound predicts nothing: {given:?}");
        let kinds: Vec<RemedyKind> = withheld.iter().map(|w| w.remedy.kind).collect();
        assert_eq!(kinds, [RemedyKind::LaunchBound]);
    }

    #[test]
    fn fresh_graphs_close_to_replays_get_no_warm_up() {
        let a = with_fresh_copy(analysis(&[SyntheticCell::emu(true, 1, 60)]), 1.3);
        assert!(
            a.remedies
                .iter()
                .all(|r| r.kind != RemedyKind::WarmUpFreshGraphs)
        );
    }
}
