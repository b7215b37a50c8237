//! Every threshold a verdict of gapscope's is judged against, in one place, each with why it
//! has its value. The analysis modules judge with these; the reports print what was judged and
//! read none of them (the rules they state come from the analysis too:
//! [`super::remedy::given_only_when`], [`super::trial::beyond_spread_rule`],
//! [`super::compare::unjudged_note`]).
#![forbid(unsafe_code)]

// ---- Steps and spreads: when a figure may be judged at all ----

/// The fewest steps a figure needs before gapscope gives its spread, judges a change on it (a
/// verdict) or gives a remedy from it: of one or two steps, p10 and p90 are those steps
/// themselves, not a spread, and a difference between them is not beyond one.
pub const MIN_STEPS_TO_JUDGE: usize = 3;

/// Share of (head, base) window pairs in which the head is slower for
/// [`super::stats::Change::from_windows`] to call it slower: with 6 windows a side, about a
/// one-sided rank-sum test at 5 %.
pub const WINDOWS_SUPERIORITY: f64 = 0.8;

/// Fewest windows a side for [`super::stats::Change::from_windows`].
pub const MIN_WINDOWS: usize = 4;

/// Smallest period, gap or kernel-duration change called a change, ns: CUPTI's timestamps of
/// kernels resolve no finer. The kernel-duration check, the remedies' realised savings and
/// `try`'s verdicts share this floor.
pub const RESOLUTION_NS: f64 = 100.0;

/// Fewest host periods on each side for a tracer's share to be stated.
pub const TRACER_SHARE_MIN_PERIODS: usize = 5;

/// Fewest measured periods for a cell's untraced period to be stated.
pub const UNTRACED_MIN_PERIODS: usize = 5;

// ---- What a comparison says ----

/// Gap growth by cause under this (ns, either sign) is rounding, not a cause that moved: left
/// out of [`super::CellComparison::gap_growth_by_cause`]. The same floor says whether the ops
/// in one regime only ([`super::CellComparison::one_sided_ops_moved`]) or `try`'s idle time by
/// cause ([`super::trial::GapChange::moved`]) changed: under a nanosecond is the sum's rounding.
pub const GAP_GROWTH_MIN_NS: f64 = 1.0;

/// A gap before an aligned op that changed by less than this (ns) is not listed among the
/// gaps that changed most ([`super::CellComparison::top_gap_deltas`]): a few ns is the
/// clock's, not the change's.
pub const GAP_DELTA_SHOWN_NS: f64 = 5.0;

/// A slower cell whose period grew at least this share in host launch-bound gaps gets the
/// host-bound caution ([`super::CellComparison::host_bound_slowdown`]): then most of the
/// slowdown is the host launching later, not GPU work.
pub const HOST_BOUND_SHARE: f64 = 0.5;

// ---- What a report lists ----

/// How many of the largest gaps every report lists (the screen and the Markdown alike,
/// [`super::Analysis::largest_gaps`], [`super::CellAnalysis::largest_gaps_listed`]): the few
/// that hold most of a step's idle time, on one screen; the JSON keeps every gap.
pub const LARGEST_GAPS_LISTED: usize = 5;

/// How many of the gaps that changed most a comparison lists under each matched cell
/// ([`super::CellComparison::gap_deltas_listed`]): the report explains every cell, so a few each.
pub const GAP_DELTAS_LISTED: usize = 3;

// ---- Remedies ----

/// First launches count as far above replays (a fresh graph each step) from this ratio of
/// their medians …
pub const FRESH_GRAPH_MIN_RATIO: f64 = 1.5;

/// … and this many ns above them.
pub const FRESH_GRAPH_MIN_EXCESS_NS: f64 = 5_000.0;

/// A predicted saving is material from this share of the cell's step period on.
pub const MATERIAL_SHARE_OF_STEP: f64 = 0.01;

// ---- `try` ----

/// Fewest rounds a side for the spread across rounds to decide a verdict. With 3 rounds a side,
/// "every round of the variant beyond every round of BASE" happens by chance, in one given
/// direction, once in C(6, 3) = 20 tries of a variant that changes nothing (a one-sided rank
/// test at 5 %); with 2 it would be once in 6, and 1 round has no spread at all. Below this
/// the verdict also asks for a change wider than the steps' own p10–p90 spread, which a
/// round's median varies far less than: conservative, and said on every such verdict.
pub const MIN_ROUNDS_FOR_SPREAD: usize = 3;

/// A BASE cause counts as removed by a variant when every round of the variant keeps at most
/// this share of BASE's least idle time per step (a removed external event-wait node leaves 0;
/// a gap that merely shrank keeps more) and every round of BASE had at least
/// [`RESOLUTION_NS`] of it.
pub const REMOVED_SHARE: f64 = 0.1;

// ---- Inputs ----

/// A share of the windows' device work left out from which a cell says so: under it, stray
/// work (a copy launched between two steps) is not worth a warning.
pub const LEFT_OUT_MIN_SHARE: f64 = 0.01;

/// A spread of a merge's per-instance clock-offset estimates above this (p10–p90, ns) gets a
/// warning.
pub const OFFSET_SPREAD_WARN_NS: f64 = 5_000.0;

/// Overlap of consecutive kernels on one stream that is only the clock's: real H200 traces show
/// up to 257 ns (`traces/torch-compile-fallback-record-h200.json.gz`).
pub const CLOCK_JITTER_NS: u64 = 1_000;

/// The longest overlap taken for programmatic dependent launch (the next kernel started early
/// and waited for its predecessor's tail).
pub const DEPENDENT_LAUNCH_OVERLAP_NS: u64 = 1_000_000;
