//! `gapscope try`: the verdict on each variant of a program (an environment setting, or a group
//! of them) against the program as given (BASE), per cell, from interleaved rounds of recorded
//! runs. The command line runs the rounds and reads the traces; everything it then prints —
//! the words, the figures, the headline, whether `--expect-fix` held — is decided here.
//!
//! A run's traces are analysed as any other ([`super::analyze`]); [`RunFigures::of`] keeps what
//! the verdict needs of each cell, so a try of many rounds holds one analysis at a time.
#![forbid(unsafe_code)]

use super::analyzer::Analysis;
use super::model::CauseKind;
use super::remedy::RemedyKind;
use super::stats::{Stat, us};
use super::thresholds::{MIN_ROUNDS_FOR_SPREAD, REMOVED_SHARE, RESOLUTION_NS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The label of the program as given, the baseline every variant is judged against.
pub const BASE_LABEL: &str = "BASE";

/// The version of `try-plan.json`; bump on any change an older gapscope would misread.
pub const PLAN_VERSION: u32 = 1;

/// One variant: its label and the environment settings it adds (none for BASE).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub label: String,
    pub settings: Vec<EnvSetting>,
}

/// `NAME=VALUE` added to a run's environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvSetting {
    pub name: String,
    pub value: String,
}

impl Variant {
    /// `NAME=VALUE NAME2=VALUE2`, or "the command as given" for BASE.
    pub fn describe(&self) -> String {
        if self.settings.is_empty() {
            return "the command as given".to_owned();
        }
        let parts: Vec<String> = self
            .settings
            .iter()
            .map(|s| format!("{}={}", s.name, s.value))
            .collect();
        parts.join(" ")
    }
}

/// One run of one variant in one round, as the command line recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// 1-based.
    pub round: usize,
    pub variant: String,
    /// The run's folder, relative to the try folder.
    pub folder: String,
    /// The recorder's exit status (the program's, 128 + N for a signal); `None` when it
    /// could not be started.
    pub exit_code: Option<i32>,
    /// The last line the run wrote on stderr (the program's, else the recorder's).
    pub last_stderr: Option<String>,
    pub seconds: f64,
    /// The trace files it wrote, relative to its folder.
    pub traces: Vec<String>,
    /// Stopped by a signal sent to `gapscope try`: not judged.
    #[serde(default)]
    pub interrupted: bool,
}

impl RunRecord {
    /// Why this run gives no figures, when it gives none: a non-zero exit (with its last
    /// stderr line) or no trace.
    pub fn failure(&self) -> Option<String> {
        let last = self
            .last_stderr
            .as_deref()
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        match self.exit_code {
            None => Some(format!("could not be started{last}")),
            Some(0) if self.traces.is_empty() => Some(format!("no trace{last}")),
            Some(0) => None,
            Some(code) => Some(format!("exit code {code}{last}")),
        }
    }
}

/// `try-plan.json`: what was asked and every run so far, so that `try --from DIR` judges the
/// same runs again without running anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub gapscope_try: u32,
    pub command: Vec<String>,
    pub rounds: usize,
    /// BASE first.
    pub variants: Vec<Variant>,
    pub runs: Vec<RunRecord>,
    /// Set when a signal stopped the try: what and when.
    #[serde(default)]
    pub interrupted: Option<String>,
    /// The try folder's absolute path where the runs were recorded, so that `try --from`
    /// tells a folder recorded elsewhere (another folder or machine), whose command's paths
    /// are not this machine's. Older plans have none ([`Plan::recorded_in`] infers it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_in: Option<String>,
}

/// The most rounds a try takes: each is a run of the program per variant, so more is a mistake
/// (a number meant for something else), not a measurement.
pub const MAX_ROUNDS: usize = 1000;

/// Why `rounds` is not a number of rounds, if it is not.
pub fn bad_rounds(rounds: usize) -> Option<String> {
    (!(1..=MAX_ROUNDS).contains(&rounds)).then(|| {
        format!("{rounds} rounds: expected 1 to {MAX_ROUNDS} (3 or more measure the spread)")
    })
}

impl Plan {
    /// Why the plan cannot be judged, if it cannot (an edited or damaged `try-plan.json`): a
    /// number of rounds out of range, no BASE first, a label twice, or a run of a round or a
    /// variant the plan does not have.
    pub fn problem(&self) -> Option<String> {
        if let Some(why) = bad_rounds(self.rounds) {
            return Some(why);
        }
        if self.variants.first().is_none_or(|v| v.label != BASE_LABEL) {
            return Some(format!("the first variant is not {BASE_LABEL}"));
        }
        let mut labels = std::collections::BTreeSet::new();
        if let Some(v) = self
            .variants
            .iter()
            .find(|v| !labels.insert(v.label.as_str()))
        {
            return Some(format!("the variant {} is listed twice", v.label));
        }
        self.runs.iter().find_map(|r| {
            if !(1..=self.rounds).contains(&r.round) {
                Some(format!(
                    "a run of round {}, of {} rounds",
                    r.round, self.rounds
                ))
            } else if !labels.contains(r.variant.as_str()) {
                Some(format!(
                    "a run of variant {}, which the plan does not list",
                    r.variant
                ))
            } else {
                None
            }
        })
    }

    /// The names the runs' stderr lines give the try folder: the text before a run's own
    /// folder (`/tmp/w1/try-serial` of `/tmp/w1/try-serial/runs/1-0-BASE/trace.json`), as
    /// plans written before stderr paths were stored relative to the try folder have them.
    fn folder_names_in_stderr(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for r in &self.runs {
            let Some(line) = &r.last_stderr else {
                continue;
            };
            let own = format!("/{}", r.folder);
            for (at, _) in line.match_indices(&own) {
                let after = line[at + own.len()..].chars().next();
                if after.is_some_and(is_path_char) && after != Some('/') {
                    continue;
                }
                let start = line[..at].rfind(|c: char| !is_path_char(c)).map_or(0, |i| {
                    i + line[i..].chars().next().map_or(1, char::len_utf8)
                });
                let name = &line[start..at];
                if !name.is_empty() && !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
        }
        names
    }

    /// The try folder's absolute path where the runs were recorded: as the plan says, else
    /// as an older plan's stderr lines name it; `None` when unknown.
    pub fn recorded_in(&self) -> Option<String> {
        self.recorded_in.clone().or_else(|| {
            self.folder_names_in_stderr()
                .into_iter()
                .find(|n| n.starts_with('/'))
        })
    }

    /// Rewrites the runs' stderr lines with the paths inside the try folder relative to it
    /// (`runs/1-0-BASE/trace.json`), as `gapscope try` now stores them: an older plan's
    /// name the folder as it was where it was recorded.
    pub fn stderr_relative(&mut self) {
        let mut names = self.folder_names_in_stderr();
        names.extend(self.recorded_in.clone());
        for r in &mut self.runs {
            if let Some(line) = &r.last_stderr {
                r.last_stderr = Some(relative_to_folder(line, &names));
            }
        }
    }

    /// The rounds whose every run finished (an interrupted round is left out whole, so every
    /// variant is judged on the same rounds).
    pub fn complete_rounds(&self) -> Vec<usize> {
        (1..=self.rounds)
            .filter(|&r| {
                self.variants.iter().all(|v| {
                    self.runs
                        .iter()
                        .any(|x| x.round == r && x.variant == v.label && !x.interrupted)
                })
            })
            .collect()
    }
}

/// Whether `c` may be part of a path in a line of text.
fn is_path_char(c: char) -> bool {
    !c.is_whitespace() && !"'\"`()[]{}<>,;|".contains(c)
}

/// `line` with every path under a folder named by one of `names` (each as given, or
/// absolute) relative to that folder: `/tmp/t/runs/1-0-BASE/x.json` → `runs/1-0-BASE/x.json`
/// for `/tmp/t`. A name counts only as a whole path's start (`/tmp/t` is not in `/tmp/tt/…`
/// nor in `/x/tmp/t/…`).
pub fn relative_to_folder(line: &str, names: &[String]) -> String {
    let mut out = line.to_owned();
    for name in names {
        let name = name.trim_end_matches('/');
        if name.is_empty() {
            continue;
        }
        let prefix = format!("{name}/");
        let mut kept = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(&prefix) {
            let starts_path = rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !is_path_char(c));
            kept.push_str(&rest[..at]);
            if !starts_path {
                kept.push_str(&prefix);
            }
            rest = &rest[at + prefix.len()..];
        }
        kept.push_str(rest);
        out = kept;
    }
    out
}

/// What a cell's verdict needs of one run: its periods, its idle time per step by cause and
/// the savings the analysis predicted for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CellFigures {
    /// Regime, workload and occurrence: the same cell in every run (as `compare` matches).
    pub key: String,
    pub label: String,
    pub traced: Option<Stat>,
    pub untraced: Option<Stat>,
    /// Median idle time per step by cause, ns.
    pub gaps: Vec<(CauseKind, f64)>,
    /// Each cause's evidence as the analysis names it in the first step that has it (the
    /// nodes, the call that made them, the library setting behind them).
    pub evidence: BTreeMap<CauseKind, String>,
    /// Predicted saving per step (median, ns) of each remedy the analysis gives the cell.
    pub predicted: Vec<(RemedyKind, f64)>,
}

/// The cells of one run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunFigures {
    pub cells: Vec<CellFigures>,
}

impl RunFigures {
    /// The figures of every cell of `a`, keyed as `compare` matches cells
    /// ([`super::CellAnalysis::match_key`]; the n-th cell of a key matches the n-th).
    pub fn of(a: &Analysis) -> RunFigures {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let cells = a
            .cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (regime, workload) = c.match_key();
                let base = format!("{}|{workload}", regime.map_or("?", |r| r.label()));
                let n = seen.entry(base.clone()).or_default();
                *n += 1;
                CellFigures {
                    key: format!("{base}#{n}"),
                    label: c.label.clone(),
                    traced: c.period,
                    untraced: c.untraced_period,
                    gaps: c
                        .idle_by_cause
                        .iter()
                        .map(|t| (t.cause, t.per_step.median))
                        .collect(),
                    evidence: c
                        .idle_by_cause
                        .iter()
                        .map(|t| (t.cause, t.example.clone()))
                        .collect(),
                    // The headline's fix for its cell (one answer: mode 2's cost is fixed by
                    // the graph usage mode, whatever else predicts more), else every fix.
                    predicted: a
                        .remedies
                        .iter()
                        .enumerate()
                        .filter(|(k, r)| {
                            r.cell == i
                                && a.headline
                                    .as_ref()
                                    .filter(|h| h.cell == i && h.fix.is_some())
                                    .is_none_or(|h| h.fix == Some(*k))
                        })
                        .filter_map(|(_, r)| Some((r.kind, r.predicted_saving_ns?.median)))
                        .collect(),
                }
            })
            .collect();
        RunFigures { cells }
    }
}

/// What one run gave the verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum RunResult {
    Figures(RunFigures),
    /// Why it gave none ([`RunRecord::failure`], or a trace that could not be read).
    Failed(String),
}

/// The one word a variant gets for a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Word {
    /// A BASE cause's idle time gone in every round ([`GapChange::removed`]) and the period
    /// not longer beyond the spread: the gap is gone whether or not the period moved beyond
    /// the rounds' spread ([`CellVerdict::period_beyond_spread`] says which), since a period
    /// bound by the host moves with each process's host speed more than by one gap.
    Removes,
    /// Shorter beyond the spread.
    Helps,
    /// Within the spread.
    NoEffect,
    /// Longer beyond the spread.
    Hurts,
    /// A run of the variant exited non-zero or wrote no trace.
    Failed,
    /// The cell is in BASE's traces, not in the variant's.
    NotCompared,
}

impl Word {
    pub fn label(self) -> &'static str {
        match self {
            Word::Removes => "removes",
            Word::Helps => "helps",
            Word::NoEffect => "no effect",
            Word::Hurts => "hurts",
            Word::Failed => "failed",
            Word::NotCompared => "not compared",
        }
    }
}

/// Which period a cell was judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeriodBasis {
    /// The period the program ran untraced ([`super::CellAnalysis::untraced_period`]), which
    /// every run of both sides measured: tracing judges no variant.
    Untraced,
    /// The traced period: a run of either side measured no untraced one.
    Traced,
}

/// The idle time per step of one cause, BASE against the variant (medians over rounds, ns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapChange {
    pub cause: CauseKind,
    pub name: &'static str,
    /// Its evidence as BASE's analysis named it where BASE had it (so a removed cause is
    /// named as BASE knew it), else as the variant's did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    pub base_ns: f64,
    pub variant_ns: f64,
    /// Gone beyond the spread: at least [`RESOLUTION_NS`] a step in every round of BASE, at
    /// most [`REMOVED_SHARE`] of BASE's least in every round of the variant.
    pub removed: bool,
}

impl GapChange {
    /// Whether the idle time of this cause changed at all between BASE and the variant (at
    /// least [`super::thresholds::GAP_GROWTH_MIN_NS`] either way).
    pub fn moved(&self) -> bool {
        (self.variant_ns - self.base_ns).abs() >= super::thresholds::GAP_GROWTH_MIN_NS
    }
}

/// A variant's verdict on one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellVerdict {
    pub cell: String,
    pub word: Word,
    /// The BASE cause the variant removed (with [`Word::Removes`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<&'static str>,
    /// Why it failed or was not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    pub basis: PeriodBasis,
    /// Each round's median period, ns, BASE's and the variant's (rounds that gave figures).
    pub base_rounds: Vec<f64>,
    pub variant_rounds: Vec<f64>,
    /// Median over rounds, ns.
    pub base_period: Option<f64>,
    pub variant_period: Option<f64>,
    /// variant − BASE of the medians, ns.
    pub change_ns: Option<f64>,
    /// How the change was held against the spread, in words.
    pub spread: String,
    /// Whether the period's change is beyond the spread ([`beyond_spread`]).
    pub period_beyond_spread: bool,
    /// The spread across rounds, ns: BASE's and the variant's widest less narrowest round
    /// period; `None` with fewer than [`MIN_ROUNDS_FOR_SPREAD`] rounds a side (unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds_spread_ns: Option<[f64; 2]>,
    pub gaps: Vec<GapChange>,
    /// BASE's fix for the cell (the one most of its runs gave, median saving over them, ns),
    /// beside the measured one (−[`Self::change_ns`]) where the variant removes or helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Predicted>,
}

/// A predicted saving, from BASE's "What to change".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Predicted {
    pub kind: RemedyKind,
    pub fix: &'static str,
    pub saving_ns: f64,
}

/// A variant's verdicts, and its one word over all cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantVerdict {
    pub label: String,
    pub settings: String,
    /// Failed if any run failed, else hurts if any cell is hurt, else removes, helps, no
    /// effect as the best cell has it.
    pub word: Word,
    /// The first failed run: round, exit code and last stderr line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    pub cells: Vec<CellVerdict>,
}

/// `--expect-fix LABEL` judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpectFix {
    pub label: String,
    pub met: bool,
    pub why: String,
}

/// Everything `gapscope try` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialReport {
    pub command: String,
    pub rounds: usize,
    pub rounds_judged: Vec<usize>,
    /// Set when a signal stopped the try: the report covers the finished rounds only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// The runs were recorded in another folder or on another machine (`try --from` of a
    /// folder recorded elsewhere): the command's paths are as given there.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recorded_elsewhere: bool,
    /// The first line of every output: which variant removed a gap, if one did.
    pub headline: String,
    /// BASE's failed runs, one line each.
    pub base_failures: Vec<String>,
    pub variants: Vec<VariantVerdict>,
    /// Cells some variant has and BASE has not (labels).
    pub variant_only: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_fix: Option<ExpectFix>,
}

impl TrialReport {
    /// The variants whose every cell is within the spread ("Ruled out with no effect").
    pub fn no_effect(&self) -> Vec<&VariantVerdict> {
        self.variants
            .iter()
            .filter(|v| v.word == Word::NoEffect)
            .collect()
    }
}

/// Whether `try -o` draws a variant against BASE (its `try-VARIANT.svg` and
/// `try-VARIANT.perfetto-trace`): its word says the change did something.
pub fn pictured(v: &VariantVerdict) -> bool {
    matches!(v.word, Word::Removes | Word::Helps | Word::Hurts)
}

/// The round whose BASE and `variant` runs a picture of the variant draws: the first judged
/// round in which both gave figures.
pub fn picture_round(plan: &Plan, results: &[RunResult], variant: &str) -> Option<usize> {
    let gave = |label: &str, round: usize| {
        plan.runs.iter().zip(results).any(|(r, res)| {
            r.variant == label && r.round == round && matches!(res, RunResult::Figures(_))
        })
    };
    plan.complete_rounds()
        .into_iter()
        .find(|&round| gave(BASE_LABEL, round) && gave(variant, round))
}

/// The cell a picture of `v` leads with: of the cells whose word is the variant's, the one
/// whose period changed most.
pub fn picture_cell(v: &VariantVerdict) -> Option<&str> {
    v.cells
        .iter()
        .filter(|c| c.word == v.word)
        .max_by(|x, y| {
            let moved = |c: &CellVerdict| c.change_ns.unwrap_or(0.0).abs();
            moved(x).total_cmp(&moved(y))
        })
        .map(|c| c.cell.as_str())
}

/// What a picture of `v` drawn from `round` says of itself: the variant's word over the
/// rounds, not one round's.
pub fn picture_verdict(v: &VariantVerdict, round: usize) -> String {
    format!(
        "{} over the rounds judged (round {round} drawn)",
        v.word.label()
    )
}

/// The runs of one variant that count: (round, result).
type Runs<'a> = Vec<(usize, &'a RunResult)>;

/// Judges every variant of `plan` against BASE on the complete rounds. `results[i]` is what
/// `plan.runs[i]` gave. `expect_fix`: the label whose verdict must be **removes**.
pub fn judge(plan: &Plan, results: &[RunResult], expect_fix: Option<&str>) -> TrialReport {
    let rounds = plan.complete_rounds();
    let runs_of = |label: &str| -> Runs<'_> {
        plan.runs
            .iter()
            .zip(results)
            .filter(|(r, _)| r.variant == label && rounds.contains(&r.round))
            .map(|(r, res)| (r.round, res))
            .collect()
    };
    let base = runs_of(BASE_LABEL);
    let base_cells = cells_in_order(&base);
    let mut variant_only = Vec::new();
    let variants: Vec<VariantVerdict> = plan
        .variants
        .iter()
        .filter(|v| v.label != BASE_LABEL)
        .map(|v| {
            let runs = runs_of(&v.label);
            for (key, label) in cells_in_order(&runs) {
                if !base_cells.iter().any(|(k, _)| *k == key) && !variant_only.contains(&label) {
                    variant_only.push(label);
                }
            }
            judge_variant(v, &base, &runs, &base_cells)
        })
        .collect();
    let expect_fix = expect_fix.map(|label| expect(label, &variants));
    TrialReport {
        command: shell_line(&plan.command),
        rounds: plan.rounds,
        headline: headline(&variants, &base, &rounds),
        partial: plan.interrupted.as_ref().map(|why| {
            format!(
                "partial: {why}; judged on the {} round(s) every variant finished",
                rounds.len()
            )
        }),
        rounds_judged: rounds,
        recorded_elsewhere: false,
        base_failures: failures(&base),
        variants,
        variant_only,
        expect_fix,
    }
}

/// `args` as a shell would take them back: each argument with characters other than
/// letters, digits and `-_=./:,@%+` in single quotes.
pub fn shell_line(args: &[String]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| crate::messages::shell_word(a))
        .collect();
    quoted.join(" ")
}

/// "round 2: exit code 1: <line>" for each failed run.
fn failures(runs: &Runs<'_>) -> Vec<String> {
    runs.iter()
        .filter_map(|(round, r)| match r {
            RunResult::Failed(why) => Some(format!("round {round}: {why}")),
            RunResult::Figures(_) => None,
        })
        .collect()
}

/// Every cell key of the runs with its label (the first run's), in the order they appear.
fn cells_in_order(runs: &Runs<'_>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (_, r) in runs {
        if let RunResult::Figures(f) = r {
            for c in &f.cells {
                if !out.iter().any(|(k, _)| *k == c.key) {
                    out.push((c.key.clone(), c.label.clone()));
                }
            }
        }
    }
    out
}

/// The figures of cell `key` in each run that has it.
fn figures_of<'a>(runs: &Runs<'a>, key: &str) -> Vec<&'a CellFigures> {
    runs.iter()
        .filter_map(|(_, r)| match r {
            RunResult::Figures(f) => f.cells.iter().find(|c| c.key == key),
            RunResult::Failed(_) => None,
        })
        .collect()
}

fn judge_variant(
    v: &Variant,
    base: &Runs<'_>,
    runs: &Runs<'_>,
    base_cells: &[(String, String)],
) -> VariantVerdict {
    let failed = failures(runs).into_iter().next();
    let cells: Vec<CellVerdict> = base_cells
        .iter()
        .map(|(key, label)| {
            let mut verdict = judge_cell(label, &figures_of(base, key), &figures_of(runs, key));
            if let Some(why) = &failed {
                verdict.word = Word::Failed;
                verdict.removed = None;
                verdict.why = Some(why.clone());
            }
            verdict
        })
        .collect();
    let words: Vec<Word> = cells.iter().map(|c| c.word).collect();
    let word = if failed.is_some() {
        Word::Failed
    } else if words.contains(&Word::Hurts) {
        Word::Hurts
    } else {
        // Removes < Helps < NoEffect < … : the best cell's word.
        words.iter().copied().min().unwrap_or(Word::NotCompared)
    };
    VariantVerdict {
        label: v.label.clone(),
        settings: v.describe(),
        word,
        failed,
        cells,
    }
}

/// The lowest of `values` (+∞ when empty).
fn lo(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The highest of `values` (−∞ when empty).
fn hi(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// The highest less the lowest of `values`.
fn range(values: &[f64]) -> f64 {
    hi(values) - lo(values)
}

/// Median of `values` (0 when empty).
fn median(values: &[f64]) -> f64 {
    Stat::of(&mut values.to_vec()).map_or(0.0, |s| s.median)
}

/// The periods a cell is judged on.
struct Periods {
    basis: PeriodBasis,
    /// Each run's median period, BASE's and the variant's.
    base: Vec<f64>,
    variant: Vec<f64>,
    /// The widest p10–p90 of the runs' steps.
    step_spread: f64,
}

impl Periods {
    /// The untraced periods where every run of both sides has one, else the traced.
    fn of(base: &[&CellFigures], variant: &[&CellFigures]) -> Periods {
        let basis = if base.iter().chain(variant).all(|c| c.untraced.is_some()) {
            PeriodBasis::Untraced
        } else {
            PeriodBasis::Traced
        };
        let period = |c: &&CellFigures| match basis {
            PeriodBasis::Untraced => c.untraced,
            PeriodBasis::Traced => c.traced,
        };
        let medians = |side: &[&CellFigures]| -> Vec<f64> {
            side.iter().filter_map(period).map(|p| p.median).collect()
        };
        Periods {
            basis,
            base: medians(base),
            variant: medians(variant),
            step_spread: base
                .iter()
                .chain(variant)
                .filter_map(period)
                .map(|p| p.spread())
                .fold(0.0, f64::max),
        }
    }
}

/// One cell: `base` and `variant` are its figures in each run of either side that has it.
pub fn judge_cell(label: &str, base: &[&CellFigures], variant: &[&CellFigures]) -> CellVerdict {
    let p = Periods::of(base, variant);
    let mut verdict = CellVerdict {
        cell: label.to_owned(),
        word: Word::NotCompared,
        removed: None,
        why: None,
        basis: p.basis,
        base_period: (!p.base.is_empty()).then(|| median(&p.base)),
        variant_period: (!p.variant.is_empty()).then(|| median(&p.variant)),
        change_ns: None,
        spread: String::new(),
        period_beyond_spread: false,
        rounds_spread_ns: None,
        gaps: if variant.is_empty() {
            Vec::new()
        } else {
            gap_changes(base, variant)
        },
        predicted: predicted(base),
        base_rounds: p.base.clone(),
        variant_rounds: p.variant.clone(),
    };
    if p.base.is_empty() || p.variant.is_empty() {
        verdict.why = Some(if variant.is_empty() {
            "the cell is not in this variant's traces".to_owned()
        } else {
            "no period on one side (too few steps)".to_owned()
        });
        return verdict;
    }
    let change = median(&p.variant) - median(&p.base);
    let (beyond, spread) = beyond_spread(&p.base, &p.variant, change, p.step_spread);
    verdict.change_ns = Some(change);
    verdict.spread = spread;
    verdict.period_beyond_spread = beyond;
    verdict.rounds_spread_ns = (p.base.len().min(p.variant.len()) >= MIN_ROUNDS_FOR_SPREAD)
        .then(|| [range(&p.base), range(&p.variant)]);
    (verdict.word, verdict.removed) = word(beyond, change, &verdict.gaps);
    // BASE's prediction is set beside what a variant did that its fix would do: a removed
    // cause the fix removes, or a period that shrank; never beside a cell left alone.
    let fix_does_it = |p: &Predicted| match verdict.word {
        Word::Helps => true,
        Word::Removes => {
            largest_removed(&verdict.gaps).is_some_and(|g| p.kind.spec().causes.contains(&g.cause))
        }
        _ => false,
    };
    if !verdict.predicted.as_ref().is_some_and(fix_does_it) {
        verdict.predicted = None;
    }
    verdict
}

/// The removed BASE cause of the most idle time per step ([`GapChange::removed`]).
fn largest_removed(gaps: &[GapChange]) -> Option<&GapChange> {
    gaps.iter()
        .filter(|g| g.removed)
        .max_by(|x, y| x.base_ns.total_cmp(&y.base_ns))
}

/// The word for a period change (beyond the spread or not), with the BASE cause removed: the
/// one of the most idle time per step in BASE among those gone ([`GapChange::removed`]).
fn word(beyond: bool, change: f64, gaps: &[GapChange]) -> (Word, Option<&'static str>) {
    if beyond && change > 0.0 {
        return (Word::Hurts, None);
    }
    let removed = largest_removed(gaps).map(|g| g.name);
    match (removed, beyond) {
        (Some(_), _) => (Word::Removes, removed),
        (None, true) => (Word::Helps, None),
        (None, false) => (Word::NoEffect, None),
    }
}

/// Whether a change of the median period by `change` ns is beyond the spread of the rounds'
/// periods `base` and `variant`, and how it was judged, in words. Beyond: every round of one
/// side beyond every round of the other, in the direction of the change, by at least
/// [`RESOLUTION_NS`]; with fewer than [`MIN_ROUNDS_FOR_SPREAD`] rounds a side, also wider than
/// `step_spread` (the widest p10–p90 of the runs' steps).
pub fn beyond_spread(
    base: &[f64],
    variant: &[f64],
    change: f64,
    step_spread: f64,
) -> (bool, String) {
    let separated = if change < 0.0 {
        hi(variant) < lo(base)
    } else {
        lo(variant) > hi(base)
    };
    let big_enough = change.abs() >= RESOLUTION_NS;
    let n = base.len().min(variant.len());
    if n >= MIN_ROUNDS_FOR_SPREAD {
        let words = format!(
            "{} rounds; spread across rounds BASE {}, variant {}: {}",
            n,
            us(range(base)),
            us(range(variant)),
            if separated {
                "every round of one side beyond every round of the other"
            } else {
                "the rounds overlap"
            }
        );
        return (separated && big_enough, words);
    }
    let wide = change.abs() > step_spread;
    (
        separated && big_enough && wide,
        format!(
            "spread unknown ({n} round(s) a side, {MIN_ROUNDS_FOR_SPREAD} needed): judged on the steps' p10–p90 ({}), {}",
            us(step_spread),
            if wide {
                "which the change exceeds"
            } else {
                "which the change does not exceed"
            }
        ),
    )
}

/// Idle time per step by cause, BASE against the variant (medians over the runs; a run
/// without the cause counts 0), largest change first.
fn gap_changes(base: &[&CellFigures], variant: &[&CellFigures]) -> Vec<GapChange> {
    let per_run_all = |side: &[&CellFigures], kind: CauseKind| -> Vec<f64> {
        side.iter()
            .map(|c| {
                c.gaps
                    .iter()
                    .filter(|g| g.0 == kind)
                    .map(|g| g.1)
                    .sum::<f64>()
            })
            .collect()
    };
    let per_run = |side: &[&CellFigures], kind: CauseKind| median(&per_run_all(side, kind));
    let mut out: Vec<GapChange> = CauseKind::ALL
        .into_iter()
        .filter(|k| {
            base.iter()
                .chain(variant)
                .any(|c| c.gaps.iter().any(|g| g.0 == *k))
        })
        .map(|cause| {
            let (base_ns, variant_ns) = (per_run(base, cause), per_run(variant, cause));
            let evidence = base
                .iter()
                .chain(variant)
                .find_map(|c| c.evidence.get(&cause).cloned());
            // Gone beyond the spread: in every round of BASE, in none of the variant's.
            let (base_least, variant_most) = (
                per_run_all(base, cause)
                    .into_iter()
                    .fold(f64::INFINITY, f64::min),
                per_run_all(variant, cause).into_iter().fold(0.0, f64::max),
            );
            GapChange {
                cause,
                name: cause.label(),
                evidence,
                base_ns,
                variant_ns,
                removed: base_least >= RESOLUTION_NS && variant_most <= REMOVED_SHARE * base_least,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        (y.variant_ns - y.base_ns)
            .abs()
            .total_cmp(&(x.variant_ns - x.base_ns).abs())
    });
    out
}

/// BASE's fix for the cell, one answer over its runs: the fix most of BASE's runs gave the
/// cell (more than half of them), with its saving's median over those runs. Runs that
/// disagree (mode 2's cost in some, the host code before the launches in others) give none,
/// rather than whichever predicted most.
fn predicted(base: &[&CellFigures]) -> Option<Predicted> {
    let mut by_kind: BTreeMap<RemedyKind, Vec<f64>> = BTreeMap::new();
    for c in base {
        for (kind, ns) in &c.predicted {
            by_kind.entry(*kind).or_default().push(*ns);
        }
    }
    by_kind
        .into_iter()
        .filter(|(_, v)| 2 * v.len() > base.len())
        .map(|(kind, v)| (v.len(), kind, median(&v)))
        .max_by(|x, y| x.0.cmp(&y.0).then(x.2.total_cmp(&y.2)))
        .map(|(_, kind, saving_ns)| Predicted {
            kind,
            fix: kind.spec().short,
            saving_ns,
        })
}

fn expect(label: &str, variants: &[VariantVerdict]) -> ExpectFix {
    let Some(v) = variants.iter().find(|v| v.label == label) else {
        return ExpectFix {
            label: label.to_owned(),
            met: false,
            why: format!("no variant is labelled {label}"),
        };
    };
    let met = v.word == Word::Removes;
    ExpectFix {
        label: label.to_owned(),
        met,
        why: if met {
            format!("{label} removes a gap, as expected")
        } else {
            format!(
                "{label} was expected to remove a gap: it is **{}**",
                v.word.label()
            )
        },
    }
}

/// The first line of every output.
fn headline(variants: &[VariantVerdict], base: &Runs<'_>, rounds: &[usize]) -> String {
    if rounds.is_empty() {
        return "no round finished: nothing judged".to_owned();
    }
    if base.iter().all(|(_, r)| matches!(r, RunResult::Failed(_))) {
        return format!(
            "BASE failed in every round, nothing judged ({})",
            failures(base).first().map_or("", String::as_str)
        );
    }
    fn saving(v: &VariantVerdict, word: Word) -> Option<(f64, &CellVerdict)> {
        v.cells
            .iter()
            .filter(|c| c.word == word)
            .filter_map(|c| Some((-c.change_ns?, c)))
            .max_by(|x, y| x.0.total_cmp(&y.0))
    }
    for word in [Word::Removes, Word::Helps] {
        let best = variants
            .iter()
            .filter(|v| v.word == word)
            .filter_map(|v| saving(v, word).map(|(s, c)| (s, c, v)))
            .max_by(|x, y| x.0.total_cmp(&y.0));
        if let Some((s, c, v)) = best {
            let period = |p: Option<f64>| p.map_or("—".to_owned(), us);
            let what = match c.removed {
                Some(cause) => format!("removes the {cause} gap"),
                None => "helps (no BASE cause gone)".to_owned(),
            };
            let lead = if word == Word::Removes {
                String::new()
            } else {
                "No variant removed a gap; ".to_owned()
            };
            // Which figure decided: a removal rests on the gap gone, whether or not the
            // period's change stands out of the rounds' spread.
            let change = match (c.period_beyond_spread, word) {
                (true, _) => format!("−{} a step", us(s)),
                (false, Word::Removes) => {
                    "the gap is gone; the period's change is within the run-to-run spread"
                        .to_owned()
                }
                (false, _) => "within the run-to-run spread".to_owned(),
            };
            return format!(
                "{lead}{} {what} in {}: period {} → {} ({change})",
                v.label,
                c.cell,
                period(c.base_period),
                period(c.variant_period),
            );
        }
    }
    "No variant removed a gap or helped beyond the run-to-run spread".to_owned()
}

/// The rule a variant's change is judged by, as `try.md` states it under its verdicts.
pub fn beyond_spread_rule() -> String {
    format!(
        "A change is beyond the spread when every round of one side is beyond every round of the other, by at least {:.2} µs; with fewer than {MIN_ROUNDS_FOR_SPREAD} rounds the spread is unknown and the change must also exceed the steps' p10–p90.",
        RESOLUTION_NS / 1000.0
    )
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_fix_is_the_one_most_of_its_runs_gave() {
        let with = |predicted: Vec<(RemedyKind, f64)>| CellFigures {
            predicted,
            ..cell(20_000.0, &[])
        };
        let mode = |ns| (RemedyKind::GraphUsageMode, ns);
        let host = |ns| (RemedyKind::HostCodeBeforeLaunch, ns);
        let runs = [
            with(vec![mode(2_000.0)]),
            with(vec![mode(3_000.0)]),
            with(vec![host(10_000.0)]),
        ];
        let p = predicted(&runs.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(p.fix, RemedyKind::GraphUsageMode.spec().short);
        assert_eq!(p.saving_ns, 2_500.0);
        // Split runs give no fix, however much one of them predicted.
        let split = [with(vec![mode(2_000.0)]), with(vec![host(10_000.0)])];
        assert_eq!(predicted(&split.iter().collect::<Vec<_>>()), None);
    }

    /// A cell's figures for one run: untraced period around `period` ns (p10–p90 ± 2 %),
    /// `gaps` by cause.
    fn cell(period: f64, gaps: &[(CauseKind, f64)]) -> CellFigures {
        let mut v: Vec<f64> = (0..50)
            .map(|i| period * (0.98 + 0.04 * (i as f64) / 49.0))
            .collect();
        CellFigures {
            key: "graphed|T=1#1".into(),
            label: "graphed T=1".into(),
            traced: Stat::of(&mut v.clone().iter().map(|x| x * 1.5).collect::<Vec<_>>()),
            untraced: Stat::of(&mut v),
            gaps: gaps.to_vec(),
            evidence: gaps
                .iter()
                .map(|(k, _)| (*k, format!("{} (this run's evidence)", k.label())))
                .collect(),
            predicted: Vec::new(),
        }
    }

    const WAIT: CauseKind = CauseKind::ExternalEventWait;
    const ORDER: CauseKind = CauseKind::StreamOrderLatency;

    fn cells(periods: &[f64], gaps: &[(CauseKind, f64)]) -> Vec<CellFigures> {
        periods.iter().map(|&p| cell(p, gaps)).collect()
    }

    fn verdict(base: &[CellFigures], variant: &[CellFigures]) -> CellVerdict {
        let b: Vec<&CellFigures> = base.iter().collect();
        let v: Vec<&CellFigures> = variant.iter().collect();
        judge_cell("graphed T=1", &b, &v)
    }

    #[test]
    fn bases_fix_stands_beside_a_removal_only_when_it_removes_that_cause() {
        let base_with = |kind: RemedyKind| -> Vec<CellFigures> {
            cells(&[20_000.0, 20_100.0, 19_900.0], &[(WAIT, 2_000.0)])
                .into_iter()
                .map(|c| CellFigures {
                    predicted: vec![(kind, 2_000.0)],
                    ..c
                })
                .collect()
        };
        let gone = cells(&[18_000.0, 18_100.0, 17_900.0], &[]);
        let mode = verdict(&base_with(RemedyKind::GraphUsageMode), &gone);
        assert_eq!(mode.word, Word::Removes);
        assert_eq!(mode.predicted.unwrap().kind, RemedyKind::GraphUsageMode);
        // A fix for other code says nothing about the wait the variant removed.
        let host = verdict(&base_with(RemedyKind::HostCodeBeforeLaunch), &gone);
        assert_eq!(host.word, Word::Removes);
        assert_eq!(host.predicted, None);
        // Nor beside a cell the variant left alone.
        let same = cells(&[20_000.0, 20_100.0, 19_900.0], &[(WAIT, 2_000.0)]);
        let untouched = verdict(&base_with(RemedyKind::GraphUsageMode), &same);
        assert_eq!(untouched.word, Word::NoEffect);
        assert_eq!(untouched.predicted, None);
    }

    #[test]
    fn a_change_inside_the_spread_across_rounds_is_no_effect() {
        let base = cells(&[25_000.0, 25_400.0, 25_800.0], &[(ORDER, 700.0)]);
        // The median 300 ns shorter, but one round inside BASE's rounds.
        let v = verdict(
            &base,
            &cells(&[24_700.0, 25_100.0, 25_500.0], &[(ORDER, 700.0)]),
        );
        assert_eq!(v.word, Word::NoEffect, "{v:?}");
        assert_eq!(v.change_ns, Some(-300.0));
        assert!(v.spread.contains("the rounds overlap"), "{}", v.spread);
        assert_eq!(v.rounds_spread_ns, Some([800.0, 800.0]));
        assert_eq!(v.basis, PeriodBasis::Untraced);
    }

    #[test]
    fn helps_and_hurts_start_where_every_round_is_beyond_every_round_of_base() {
        let base = cells(&[25_000.0, 25_100.0, 25_200.0], &[(ORDER, 700.0)]);
        let helps = verdict(
            &base,
            &cells(&[24_700.0, 24_800.0, 24_990.0], &[(ORDER, 600.0)]),
        );
        assert_eq!(helps.word, Word::Helps, "{helps:?}");
        assert_eq!(helps.removed, None);
        let hurts = verdict(
            &base,
            &cells(&[25_210.0, 25_400.0, 25_500.0], &[(ORDER, 900.0)]),
        );
        assert_eq!(hurts.word, Word::Hurts, "{hurts:?}");
        // One round touching BASE's best: no longer beyond.
        let touching = verdict(
            &base,
            &cells(&[24_700.0, 24_800.0, 25_000.0], &[(ORDER, 650.0)]),
        );
        assert_eq!(touching.word, Word::NoEffect, "{touching:?}");
        // Separated, but by less than the timestamps resolve.
        let base = cells(&[25_000.0, 25_001.0, 25_002.0], &[]);
        let tiny = verdict(&base, &cells(&[24_950.0, 24_951.0, 24_952.0], &[]));
        assert_eq!(tiny.word, Word::NoEffect, "{tiny:?}");
    }

    #[test]
    fn a_cause_gone_in_every_round_is_named_by_bases_name_unless_the_period_got_longer() {
        let base = cells(
            &[25_400.0, 25_500.0, 25_600.0],
            &[(WAIT, 1_100.0), (ORDER, 700.0)],
        );
        // The variant's gaps have other causes only: the wait is gone.
        let v = verdict(
            &base,
            &cells(&[24_800.0, 24_850.0, 24_900.0], &[(ORDER, 720.0)]),
        );
        assert_eq!(v.word, Word::Removes, "{v:?}");
        assert_eq!(v.removed, Some("external event wait"));
        let gap = v.gaps.iter().find(|g| g.cause == WAIT).unwrap();
        assert_eq!(
            (gap.base_ns, gap.variant_ns, gap.removed),
            (1_100.0, 0.0, true)
        );
        assert!(v.period_beyond_spread);
        // Gone in every round, the period inside the spread (a host-bound step whose process
        // speeds vary): still removes, and says the period did not move beyond the spread.
        let v = verdict(
            &base,
            &cells(&[25_300.0, 25_500.0, 25_700.0], &[(ORDER, 720.0)]),
        );
        assert_eq!(
            (v.word, v.removed, v.period_beyond_spread),
            (Word::Removes, Some("external event wait"), false),
            "{v:?}"
        );
        // Gone in two rounds of three: not beyond the spread, no effect.
        let mut some = cells(&[25_300.0, 25_500.0, 25_700.0], &[(ORDER, 720.0)]);
        some[2].gaps.push((WAIT, 900.0));
        let v = verdict(&base, &some);
        assert_eq!((v.word, v.removed), (Word::NoEffect, None), "{v:?}");
        // Gone but longer beyond the spread: hurts.
        let v = verdict(
            &base,
            &cells(&[26_800.0, 26_850.0, 26_900.0], &[(ORDER, 720.0)]),
        );
        assert_eq!(v.word, Word::Hurts, "{v:?}");
        // Shrunk by half, not gone: helps.
        let v = verdict(
            &base,
            &cells(
                &[24_800.0, 24_850.0, 24_900.0],
                &[(WAIT, 550.0), (ORDER, 700.0)],
            ),
        );
        assert_eq!((v.word, v.removed), (Word::Helps, None), "{v:?}");
    }

    #[test]
    fn with_one_round_the_spread_is_unknown_and_the_steps_spread_decides() {
        let base = cells(&[25_000.0], &[]);
        // 400 ns is beyond the rounds (one each) but inside the steps' p10–p90 (≈ 760 ns).
        let v = verdict(&base, &cells(&[24_600.0], &[]));
        assert_eq!(v.word, Word::NoEffect, "{v:?}");
        assert!(
            v.spread.starts_with("spread unknown (1 round(s)"),
            "{}",
            v.spread
        );
        assert_eq!(v.rounds_spread_ns, None, "unknown with one round");
        let v = verdict(&base, &cells(&[23_000.0], &[]));
        assert_eq!(v.word, Word::Helps, "{v:?}");
    }

    #[test]
    fn the_traced_period_decides_when_a_run_measured_no_untraced_one() {
        let base = cells(&[25_000.0, 25_100.0, 25_200.0], &[]);
        let mut variant = cells(&[24_000.0, 24_100.0, 24_200.0], &[]);
        variant[1].untraced = None;
        let v = verdict(&base, &variant);
        assert_eq!(v.basis, PeriodBasis::Traced);
        // Traced periods are 1.5× the untraced ones in these figures.
        assert_eq!(v.base_period, Some(25_100.0 * 1.5));
    }

    fn plan(variants: &[&str], rounds: usize) -> Plan {
        let mut all = vec![BASE_LABEL];
        all.extend(variants);
        Plan {
            gapscope_try: PLAN_VERSION,
            command: vec!["prog".into()],
            rounds,
            variants: all
                .iter()
                .map(|l| Variant {
                    label: (*l).to_owned(),
                    settings: Vec::new(),
                })
                .collect(),
            runs: (1..=rounds)
                .flat_map(|round| {
                    all.iter().map(move |l| RunRecord {
                        round,
                        variant: (*l).to_owned(),
                        folder: format!("runs/{round}-{l}"),
                        exit_code: Some(0),
                        last_stderr: None,
                        seconds: 1.0,
                        traces: vec!["trace-0.json".into()],
                        interrupted: false,
                    })
                })
                .collect(),
            interrupted: None,
            recorded_in: None,
        }
    }

    #[test]
    fn paths_inside_the_try_folder_read_relative_to_it() {
        let names = ["/tmp/t".to_owned(), "out/".to_owned()];
        for (line, relative) in [
            (
                "cannot read /tmp/t/runs/1-0-BASE/x.json: no",
                "cannot read runs/1-0-BASE/x.json: no",
            ),
            ("'/tmp/t/a' and out/b", "'a' and b"),
            // Not the folder: another one, or the name inside another path.
            (
                "/tmp/tt/a /x/tmp/t/a about/b",
                "/tmp/tt/a /x/tmp/t/a about/b",
            ),
        ] {
            assert_eq!(relative_to_folder(line, &names), relative, "{line}");
        }
    }

    #[test]
    fn an_older_plan_names_where_it_was_recorded_in_its_stderr_lines() {
        let mut p = plan(&["A=1"], 1);
        assert_eq!(p.recorded_in(), None);
        p.runs[0].last_stderr = Some(
            "analyse with: gapscope analyze /tmp/w1/try/runs/1-BASE/trace-pid1.json.gz".into(),
        );
        p.runs[1].last_stderr = Some("RuntimeError: in try/runs/1-A=1/log".into());
        assert_eq!(p.recorded_in().as_deref(), Some("/tmp/w1/try"));
        p.stderr_relative();
        let lines: Vec<&str> = p
            .runs
            .iter()
            .flat_map(|r| r.last_stderr.as_deref())
            .collect();
        assert_eq!(
            lines,
            [
                "analyse with: gapscope analyze runs/1-BASE/trace-pid1.json.gz",
                "RuntimeError: in runs/1-A=1/log"
            ]
        );
        // A plan that says where it was recorded is taken at its word.
        p.recorded_in = Some("/home/u/try".into());
        assert_eq!(p.recorded_in().as_deref(), Some("/home/u/try"));
    }

    #[test]
    fn a_failed_variant_does_not_stop_the_others_and_the_expected_fix_is_checked() {
        let p = plan(&["A=1", "B=1", "C=1"], 3);
        let gaps = [(WAIT, 1_000.0), (ORDER, 700.0)];
        let results: Vec<RunResult> = p
            .runs
            .iter()
            .map(|r| match r.variant.as_str() {
                "A=1" if r.round == 2 => {
                    RunResult::Failed("exit code 1: RuntimeError: boom".into())
                }
                "B=1" => RunResult::Figures(RunFigures {
                    cells: vec![cell(24_000.0 + r.round as f64, &[(ORDER, 700.0)])],
                }),
                "C=1" => RunResult::Figures(RunFigures {
                    cells: vec![cell(25_000.0 + 10.0 * r.round as f64, &gaps)],
                }),
                _ => RunResult::Figures(RunFigures {
                    cells: vec![cell(25_000.0 + 20.0 * r.round as f64, &gaps)],
                }),
            })
            .collect();
        let report = judge(&p, &results, Some("B=1"));
        let word = |l: &str| report.variants.iter().find(|v| v.label == l).unwrap().word;
        assert_eq!(word("A=1"), Word::Failed);
        let a = &report.variants[0];
        assert_eq!(
            a.failed.as_deref(),
            Some("round 2: exit code 1: RuntimeError: boom")
        );
        assert_eq!(word("B=1"), Word::Removes);
        assert_eq!(word("C=1"), Word::NoEffect);
        assert_eq!(report.no_effect().len(), 1);
        assert!(
            report
                .headline
                .starts_with("B=1 removes the external event wait gap"),
            "{}",
            report.headline
        );
        assert!(report.expect_fix.as_ref().unwrap().met);
        assert!(!judge(&p, &results, Some("C=1")).expect_fix.unwrap().met);
        assert!(!judge(&p, &results, Some("A=1")).expect_fix.unwrap().met);
    }

    #[test]
    fn an_interrupted_round_is_left_out_for_every_variant() {
        let mut p = plan(&["A=1"], 3);
        // Round 3: BASE finished, A was stopped.
        p.runs.last_mut().unwrap().interrupted = true;
        p.interrupted = Some("stopped by SIGINT in round 3 of 3".into());
        assert_eq!(p.complete_rounds(), [1, 2]);
        let results: Vec<RunResult> = p
            .runs
            .iter()
            .map(|_| {
                RunResult::Figures(RunFigures {
                    cells: vec![cell(25_000.0, &[])],
                })
            })
            .collect();
        let report = judge(&p, &results, None);
        assert_eq!(report.rounds_judged, [1, 2]);
        assert!(
            report
                .partial
                .as_deref()
                .unwrap()
                .starts_with("partial: stopped by SIGINT")
        );
        assert_eq!(report.variants[0].cells[0].base_rounds.len(), 2);
    }

    #[test]
    fn cells_are_keyed_as_compare_matches_them_ranks_in_order() {
        use crate::trace::synthetic::{self, SyntheticCell};
        // Two ranks of one program: the same cells twice, told apart by their order.
        let cells = [
            SyntheticCell::emu(false, 2, 20),
            SyntheticCell::emu(true, 2, 20),
        ];
        let traces = [synthetic::trace(&cells, 1), synthetic::trace(&cells, 2)];
        let a = crate::analysis::analyze(
            &traces,
            &["r0".to_owned(), "r1".to_owned()],
            &Default::default(),
        );
        let keys: Vec<String> = RunFigures::of(&a)
            .cells
            .into_iter()
            .map(|c| c.key)
            .collect();
        assert_eq!(keys.len(), 4);
        assert!(
            keys[0].starts_with("eager|") && keys[0].ends_with("#1"),
            "{keys:?}"
        );
        assert!(
            keys[1].starts_with("graphed|") && keys[1].ends_with("#1"),
            "{keys:?}"
        );
        assert_eq!(keys[2], keys[0].replace("#1", "#2"));
        assert_eq!(keys[3], keys[1].replace("#1", "#2"));
        // compare pairs the same cells: the n-th of a key with the n-th.
        let c = crate::analysis::compare::compare(a.clone(), a, 1.02);
        let pairs: Vec<(usize, usize)> = c.cells.iter().map(|p| (p.base, p.head)).collect();
        assert_eq!(pairs, [(0, 0), (1, 1), (2, 2), (3, 3)]);
    }

    #[test]
    fn the_command_reads_as_a_shell_line() {
        let args = ["python3", "-c", "import sys; sys.exit(0)", "it's"].map(str::to_owned);
        assert_eq!(
            shell_line(&args),
            "python3 -c 'import sys; sys.exit(0)' 'it'\\''s'"
        );
    }

    #[test]
    fn a_run_fails_on_a_non_zero_exit_or_no_trace() {
        let mut r = plan(&[], 1).runs.remove(0);
        assert_eq!(r.failure(), None);
        r.traces.clear();
        r.last_stderr = Some("gapscope: note: no trace written".into());
        assert_eq!(
            r.failure().unwrap(),
            "no trace: gapscope: note: no trace written"
        );
        r.exit_code = Some(3);
        assert!(r.failure().unwrap().starts_with("exit code 3: "));
    }
}
