#![forbid(unsafe_code)]
//! The rank merge behind `gapscope merge`: per-rank traces (one file per process, e.g.
//! `trace-0.json` and `trace-1.json` written by `gapscope record` under torchrun) put on one
//! clock ([`ClockAlignment`]), analysed rank by rank, with a row per rank and the slowest rank
//! of each cell marked ([`Merged`]). Its report (Markdown, JSON, the merged Perfetto trace) is
//! rendered by [`crate::report::merge`] and written by [`crate::report::output_set`].
//!
//! # Per-rank figures
//!
//! Each rank's trace is analysed on its own ([`crate::analysis::analyze`]), exactly as
//! `gapscope analyze` would; the report puts the steady-state step period of every cell side by
//! side. For each cell label, the rank with the highest median period is the **slowest**; the
//! spread across ranks is max/min of the medians, and whether the slowest differs from the
//! fastest beyond the run-to-run spread is judged as everywhere else in gapscope (block medians,
//! else the p10–p90 widths). Step periods do not depend on the clock offset, so the
//! alignment below never changes these figures.
//!
//! # Clock alignment
//!
//! CUPTI timestamps are CLOCK_REALTIME-based: ranks on one host share that clock and need no
//! alignment. Ranks on different hosts (the host is `metadata.workload["host"]` when a trace
//! has it; without it every trace is assumed to come from one host) differ by their hosts'
//! clock offsets, which NTP/PTP keep only to within microseconds to milliseconds.
//!
//! Such traces are aligned on collectives. A collective kernel (found by its name starting
//! with `nccl`, e.g. `ncclDevKernel_AllGather_RING_LL` or `ncclKernel_…`: the name only picks
//! alignment anchors, it is never used as a cause of anything) cannot finish on any rank before
//! the last rank has contributed its data, and finishes on every rank at nearly the same
//! instant. So, with rank 0 (the lowest rank present) as the reference, and the k-th collective
//! kernel of a given name on rank r matched with the k-th kernel of that name on the reference,
//! each matched instance gives one estimate `end_ref − end_r`; the offset of rank r is the
//! **median** of these estimates (robust to a few instances whose ends differ, e.g. by a
//! rank's proxy latency), and its p10–p90 and min–max over the instances are reported with it.
//! The offset is added to every timestamp of rank r (kernels, copies, API calls,
//! synchronisations, event records, markers) before the merged Perfetto trace is written
//! (minus the smallest offset of all ranks, a common shift that keeps every timestamp
//! non-negative and changes nothing relative).
//!
//! `--clock collectives|none` ([`ClockAlignment`]) overrides the choice; the default is `collectives` when the
//! traces name more than one host, else `none`. Aligning on collectives needs at least one
//! matched collective per rank (else the merge is refused: exit 2). The k-th-instance matching
//! assumes every trace starts at the same collective: traces whose collective counts differ
//! get a warning, and a wide spread of the per-instance estimates shows a mismatch.

use super::analyzer::{self, Analysis};
use super::cause::AnalysisOptions;
use super::thresholds::OFFSET_SPREAD_WARN_NS;
use crate::analysis::rank_summary::RankSummary;
pub use crate::analysis::rank_summary::{COLLECTIVE_PREFIX, collective_ends, host};
use crate::analysis::stats::{Change, Stat};
use crate::trace::{Source, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How rank clocks are put on one time base (`merge --clock`; the report's JSON key is
/// `align`, kept for its readers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockAlignment {
    /// Shift each rank so its collective kernels end when the reference rank's do.
    Collectives,
    /// Use the recorded timestamps (ranks on one host share CLOCK_REALTIME).
    None,
}

/// Why a merge was refused; each displays as one line. All are bad input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("merge needs at least one trace")]
    Empty,
    #[error(
        "{second} and {first} both hold rank {rank}: merge takes one trace per rank (re-record, or pass one of them)"
    )]
    DuplicateRank {
        rank: u32,
        first: String,
        second: String,
    },
    #[error(
        "{path} (rank {rank}): no collective kernel (name starting with \"{COLLECTIVE_PREFIX}\") matches one of reference rank {reference} ({reference_path}), so its clock cannot be aligned{hint}"
    )]
    NoAnchors {
        rank: u32,
        path: String,
        reference: u32,
        reference_path: String,
        hint: &'static str,
    },
    #[error(
        "--clock collectives: the reference rank {rank} ({path}) has no collective kernel (name starting with \"{COLLECTIVE_PREFIX}\") to align the other ranks on; use --clock none"
    )]
    ReferenceWithoutCollectives { rank: u32, path: String },
    #[error(
        "{path} (rank {rank}): its clock is {seconds:.0} s away from reference rank {reference}'s, more than a day: not traces of the same run"
    )]
    ImplausibleOffset {
        rank: u32,
        path: String,
        reference: u32,
        seconds: f64,
    },
}

/// Ranks of one run are recorded within seconds of each other; an offset beyond this is a
/// wrong input (or a clock value that makes no sense), not a clock difference.
const MAX_CLOCK_OFFSET_NS: i64 = 86_400 * 1_000_000_000;

/// The offset applied to one rank's clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClockOffset {
    /// Added to every timestamp of this rank to put it on the reference rank's clock (ns).
    pub offset_ns: i64,
    /// Collective instances matched with the reference (0 when not aligned on collectives).
    pub instances: usize,
    /// The per-instance estimates `end_ref − end_r` (ns): n, median, p10–p90, min–max.
    pub per_instance: Option<Stat>,
}

impl ClockOffset {
    const ZERO: ClockOffset = ClockOffset {
        offset_ns: 0,
        instances: 0,
        per_instance: None,
    };
}

/// One cell of one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankCell {
    pub label: String,
    /// Steady-state step period (ns), as `gapscope analyze` reports it.
    pub period: Option<Stat>,
    /// Medians of consecutive blocks of steps: the run-to-run spread.
    pub period_block_medians: Vec<f64>,
    /// The slowest rank of this cell label (highest median period, two ranks or more).
    pub slowest: bool,
    /// Why it has no period, when it has none ([`super::stats::why_no_period`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_period: Option<String>,
}

impl RankCell {
    fn new(
        label: &str,
        period: Option<Stat>,
        period_block_medians: &[f64],
        steps: usize,
    ) -> RankCell {
        RankCell {
            label: label.to_owned(),
            period,
            period_block_medians: period_block_medians.to_vec(),
            slowest: false,
            no_period: period.is_none().then(|| super::stats::why_no_period(steps)),
        }
    }
}

/// One rank: a row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankRow {
    pub rank: u32,
    pub world: u32,
    pub path: String,
    pub host: Option<String>,
    pub source: Source,
    pub dropped_records: u64,
    /// Collective kernels (alignment anchors) in the trace.
    pub collective_kernels: usize,
    pub clock: ClockOffset,
    pub cells: Vec<RankCell>,
}

/// One cell label across the ranks that have it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellAcrossRanks {
    pub label: String,
    /// Ranks with a period for this cell.
    pub ranks: usize,
    pub slowest_rank: Option<u32>,
    pub fastest_rank: Option<u32>,
    /// Slowest median period / fastest median period.
    pub max_over_min: Option<f64>,
    /// Slowest vs fastest, judged against the run-to-run spread.
    pub change: Option<Change>,
}

/// The merged traces and their report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Merged {
    /// The clock alignment applied (`--clock`), and why (JSON keys `clock`, `clock_reason`).
    #[serde(rename = "clock")]
    pub clock_alignment: ClockAlignment,
    #[serde(rename = "clock_reason")]
    pub clock_alignment_reason: String,
    /// The rank whose clock the others are put on.
    pub reference_rank: u32,
    /// One per trace, by rank.
    pub ranks: Vec<RankRow>,
    /// One per cell label, in order of first appearance.
    pub cells: Vec<CellAcrossRanks>,
    pub warnings: Vec<String>,
    /// The traces on the common clock, cells labelled "rank R: …" (same order as `ranks`).
    #[serde(skip)]
    pub traces: Vec<Trace>,
    /// Their analyses concatenated (cell `trace` indexes `traces`), for the Perfetto trace.
    #[serde(skip)]
    pub analysis: Analysis,
}

/// The offset to add to `trace`'s timestamps to put them on `reference`'s clock: the median
/// over matched collective instances (k-th kernel of a name vs the reference's k-th of that
/// name) of `end_ref − end`. `None` when no instance matches.
pub fn clock_offset(reference: &Trace, trace: &Trace) -> Option<ClockOffset> {
    offset_between(&collective_ends(reference), &collective_ends(trace))
}

/// [`clock_offset`] from the two traces' [`collective_ends`].
fn offset_between<K: Ord>(
    refs: &BTreeMap<K, Vec<u64>>,
    mine: &BTreeMap<K, Vec<u64>>,
) -> Option<ClockOffset> {
    let mut estimates: Vec<f64> = Vec::new();
    for (name, ends) in mine {
        if let Some(ref_ends) = refs.get(name) {
            estimates.extend(
                ref_ends
                    .iter()
                    .zip(ends)
                    .map(|(&r, &e)| (i128::from(r) - i128::from(e)) as f64),
            );
        }
    }
    let per_instance = Stat::of(&mut estimates)?;
    Some(ClockOffset {
        offset_ns: per_instance.median.round() as i64,
        instances: per_instance.n,
        per_instance: Some(per_instance),
    })
}

/// A copy of `trace` with every timestamp moved by `by` ns (saturating at 0 and `u64::MAX`).
/// Zero timestamps (records CUPTI left without one) stay zero.
pub fn shift_trace(trace: &Trace, by: i64) -> Trace {
    let mut t = trace.clone();
    shift_in_place(&mut t, by);
    t
}

/// [`shift_trace`] without the copy.
pub fn shift_in_place(t: &mut Trace, by: i64) {
    if by == 0 {
        return;
    }
    let sh = |t: &mut u64| {
        if *t != 0 {
            *t = t.saturating_add_signed(by);
        }
    };
    for k in &mut t.kernels {
        sh(&mut k.start);
        sh(&mut k.end);
    }
    for m in t.memcpys.iter_mut().chain(t.memsets.iter_mut()) {
        sh(&mut m.start);
        sh(&mut m.end);
    }
    for a in &mut t.api_calls {
        sh(&mut a.start);
        sh(&mut a.end);
    }
    for s in &mut t.syncs {
        sh(&mut s.start);
        sh(&mut s.end);
    }
    for e in &mut t.event_records {
        sh(&mut e.device_ts);
    }
    for m in &mut t.markers {
        sh(&mut m.start);
        sh(&mut m.end);
    }
}

/// One rank given to [`merge_inputs`]: its trace, or its summary ([`RankSummary`], made by
/// `analyze --summary`), which gives the same report but no merged Perfetto trace.
pub enum RankInput {
    // Boxed: a handful of these are moved, and a trace's own records are on the heap anyway.
    Trace(Box<Trace>),
    Summary(RankSummary),
}

impl RankInput {
    fn rank(&self) -> u32 {
        match self {
            RankInput::Trace(t) => t.metadata.rank,
            RankInput::Summary(s) => s.rank,
        }
    }

    fn world(&self) -> u32 {
        match self {
            RankInput::Trace(t) => t.metadata.world,
            RankInput::Summary(s) => s.world,
        }
    }

    fn host(&self) -> Option<&str> {
        match self {
            RankInput::Trace(t) => host(t),
            RankInput::Summary(s) => s.host.as_deref(),
        }
    }

    fn collective_ends(&self) -> BTreeMap<String, Vec<u64>> {
        match self {
            RankInput::Trace(t) => super::rank_summary::owned_collective_ends(t),
            RankInput::Summary(s) => s.collective_ends(),
        }
    }
}

/// Merges per-rank traces (`paths` name them in reports). `clock`: `None` picks
/// [`ClockAlignment::Collectives`] when the traces name more than one host, else [`ClockAlignment::None`].
pub fn merge(
    traces: Vec<Trace>,
    paths: Vec<String>,
    clock: Option<ClockAlignment>,
) -> Result<Merged, MergeError> {
    merge_inputs(
        traces
            .into_iter()
            .map(|t| RankInput::Trace(Box::new(t)))
            .collect(),
        paths,
        clock,
    )
}

/// [`merge`] of traces and summaries. A summary names its rank by the trace it was made
/// from, so the report is the one its trace gives; the merged Perfetto trace (`traces`, and
/// `analysis`'s timelines) is left empty unless every input is a trace.
pub fn merge_inputs(
    ranks: Vec<RankInput>,
    paths: Vec<String>,
    clock: Option<ClockAlignment>,
) -> Result<Merged, MergeError> {
    let inputs = ordered_inputs(ranks, paths)?;
    let all_traces = inputs.iter().all(|(r, _)| matches!(r, RankInput::Trace(_)));
    let mut warnings = Vec::new();
    let reference_rank = inputs[0].0.rank();
    if reference_rank != 0 {
        warnings.push(format!(
            "no trace of rank 0: rank {reference_rank} is the clock reference"
        ));
    }
    rank_warnings(&inputs, &mut warnings);
    let (clock_alignment, clock_alignment_reason) = choose_clock(&inputs, clock, &mut warnings);
    // Each rank's collectives, found once: for the offsets, the count warnings and the rows.
    let ends: Vec<BTreeMap<String, Vec<u64>>> =
        inputs.iter().map(|(r, _)| r.collective_ends()).collect();
    let offsets = clock_offsets(&inputs, &ends, clock_alignment)?;
    if clock_alignment == ClockAlignment::Collectives {
        collective_warnings(&inputs, &ends, &offsets, &mut warnings);
    }
    // Shifting keeps every timestamp that is not zero above zero: the counts stand.
    let collective_counts: Vec<usize> = ends
        .iter()
        .map(|e| e.values().map(Vec::len).sum())
        .collect();
    drop(ends);

    // Shift every rank by its offset minus the smallest one, so no timestamp goes below zero
    // (a common shift of all ranks changes nothing relative).
    let base = offsets.iter().map(|o| o.offset_ns).min().unwrap_or(0);
    let mut rows = Vec::with_capacity(inputs.len());
    let mut combined = Combined {
        keep: all_traces,
        ..Default::default()
    };
    for (i, ((input, path), offset)) in inputs.into_iter().zip(offsets).enumerate() {
        let (rank, cells) = rank_cells(input, &path, i, offset.offset_ns - base, &mut combined);
        rows.push(RankRow {
            rank: rank.rank,
            world: rank.world,
            path,
            host: rank.host,
            source: rank.source,
            dropped_records: rank.dropped_records,
            collective_kernels: collective_counts[i],
            clock: offset,
            cells,
        });
    }
    let cells = compare_ranks(&mut rows);
    Ok(Merged {
        clock_alignment,
        clock_alignment_reason,
        reference_rank,
        ranks: rows,
        cells,
        warnings,
        traces: combined.traces,
        analysis: combined.analysis,
    })
}

/// The inputs with their paths (a summary names its trace), one per rank, by rank; the stable
/// sort keeps input order among equal ranks, so the refusal names the files in the order
/// given.
fn ordered_inputs(
    ranks: Vec<RankInput>,
    paths: Vec<String>,
) -> Result<Vec<(RankInput, String)>, MergeError> {
    if ranks.is_empty() {
        return Err(MergeError::Empty);
    }
    let mut inputs: Vec<(RankInput, String)> = ranks
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let p = match &r {
                RankInput::Summary(s) => s.trace.clone(),
                RankInput::Trace(_) => paths
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("trace {i}")),
            };
            (r, p)
        })
        .collect();
    inputs.sort_by_key(|(r, _)| r.rank());
    for w in inputs.windows(2) {
        if w[0].0.rank() == w[1].0.rank() {
            return Err(MergeError::DuplicateRank {
                rank: w[0].0.rank(),
                first: w[0].1.clone(),
                second: w[1].1.clone(),
            });
        }
    }
    Ok(inputs)
}

/// How the ranks' clocks are aligned, and why: as asked, else by the hosts the traces name.
fn choose_clock(
    inputs: &[(RankInput, String)],
    clock: Option<ClockAlignment>,
    warnings: &mut Vec<String>,
) -> (ClockAlignment, String) {
    let hosts: BTreeSet<&str> = inputs.iter().filter_map(|(r, _)| r.host()).collect();
    let host_list = hosts.iter().copied().collect::<Vec<_>>().join(", ");
    match clock {
        Some(ClockAlignment::Collectives) => (
            ClockAlignment::Collectives,
            "--clock collectives".to_owned(),
        ),
        Some(ClockAlignment::None) => {
            if hosts.len() > 1 {
                warnings.push(format!(
                    "--clock none with traces from several hosts ({host_list}): timestamps of different hosts are as recorded, not aligned"
                ));
            }
            (ClockAlignment::None, "--clock none".to_owned())
        }
        None if hosts.len() > 1 => (
            ClockAlignment::Collectives,
            format!("traces from {} hosts: {host_list}", hosts.len()),
        ),
        None if hosts.is_empty() => (
            ClockAlignment::None,
            "no host in the traces' metadata: assumed one host, one clock".to_owned(),
        ),
        None => (
            ClockAlignment::None,
            format!("one host ({host_list}): ranks share its clock"),
        ),
    }
}

/// Each rank's offset to the reference's (the first input's) clock.
fn clock_offsets(
    inputs: &[(RankInput, String)],
    ends: &[BTreeMap<String, Vec<u64>>],
    alignment: ClockAlignment,
) -> Result<Vec<ClockOffset>, MergeError> {
    let reference = &inputs[0];
    let mut offsets = Vec::with_capacity(inputs.len());
    for (i, (r, p)) in inputs.iter().enumerate() {
        let offset = match alignment {
            ClockAlignment::None => ClockOffset::ZERO,
            ClockAlignment::Collectives => {
                let offset = offset_between(&ends[0], &ends[i]).ok_or_else(|| {
                    if i == 0 {
                        MergeError::ReferenceWithoutCollectives {
                            rank: r.rank(),
                            path: p.clone(),
                        }
                    } else {
                        MergeError::NoAnchors {
                            rank: r.rank(),
                            path: p.clone(),
                            reference: reference.0.rank(),
                            reference_path: reference.1.clone(),
                            hint: "; use --clock none",
                        }
                    }
                })?;
                if offset.offset_ns.unsigned_abs() > MAX_CLOCK_OFFSET_NS as u64 {
                    return Err(MergeError::ImplausibleOffset {
                        rank: r.rank(),
                        path: p.clone(),
                        reference: reference.0.rank(),
                        seconds: offset.offset_ns as f64 / 1e9,
                    });
                }
                offset
            }
        };
        offsets.push(offset);
    }
    Ok(offsets)
}

/// What a rank row says of its input besides its cells.
struct RankMeta {
    rank: u32,
    world: u32,
    host: Option<String>,
    source: Source,
    dropped_records: u64,
}

/// The traces on the common clock and their analyses concatenated, kept when every input is
/// a trace (`keep`).
#[derive(Default)]
struct Combined {
    keep: bool,
    analysis: Analysis,
    traces: Vec<Trace>,
}

/// One input's rank figures and cells: a trace shifted by `shift_ns` and analysed (added to
/// `combined` as input `i`), or a summary as it stands.
fn rank_cells(
    input: RankInput,
    path: &str,
    i: usize,
    shift_ns: i64,
    combined: &mut Combined,
) -> (RankMeta, Vec<RankCell>) {
    match input {
        RankInput::Trace(s) => {
            let mut s = *s;
            shift_in_place(&mut s, shift_ns);
            let a = analyzer::analyze(
                std::slice::from_ref(&s),
                &[path.to_owned()],
                &AnalysisOptions::default(),
            );
            let rank = s.metadata.rank;
            let meta = RankMeta {
                rank,
                world: s.metadata.world,
                host: host(&s).map(str::to_owned),
                source: s.metadata.source,
                dropped_records: s.dropped_records,
            };
            let cells = a
                .cells
                .iter()
                .map(|c| RankCell::new(&c.label, c.period, &c.period_block_medians, c.steps.len()))
                .collect();
            if combined.keep {
                combined.analysis.inputs.extend(a.inputs);
                combined.analysis.timelines.extend(a.timelines);
                combined
                    .analysis
                    .cells
                    .extend(a.cells.into_iter().map(|mut c| {
                        c.trace = i;
                        c.label = format!("rank {rank}: {}", c.label);
                        c
                    }));
                combined.traces.push(s);
            }
            (meta, cells)
        }
        RankInput::Summary(s) => {
            let cells = s
                .cells
                .iter()
                .map(|c| RankCell::new(&c.label, c.period, &c.period_block_medians, c.steps))
                .collect();
            let meta = RankMeta {
                rank: s.rank,
                world: s.world,
                host: s.host,
                source: s.source,
                dropped_records: s.dropped_records,
            };
            (meta, cells)
        }
    }
}

/// World sizes that disagree, ranks outside the world, ranks missing from it.
fn rank_warnings(inputs: &[(RankInput, String)], warnings: &mut Vec<String>) {
    let worlds: BTreeSet<u32> = inputs.iter().map(|(r, _)| r.world()).collect();
    if worlds.len() > 1 {
        warnings.push(format!(
            "the traces disagree on the world size ({})",
            worlds
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let world = worlds.iter().copied().max().unwrap_or(1);
    let present: BTreeSet<u32> = inputs.iter().map(|(r, _)| r.rank()).collect();
    if let Some(&r) = present.iter().find(|&&r| r >= world) {
        warnings.push(format!("rank {r} is outside the world size {world}"));
    }
    let missing: Vec<String> = (0..world)
        .filter(|r| !present.contains(r))
        .map(|r| r.to_string())
        .collect();
    if !missing.is_empty() && missing.len() <= 64 {
        warnings.push(format!(
            "world size {world}, but no trace of rank {}",
            missing.join(", ")
        ));
    } else if !missing.is_empty() {
        warnings.push(format!(
            "world size {world}, but only {} ranks given",
            present.len()
        ));
    }
}

/// Collective counts that differ from the reference's, and wide per-instance spreads.
fn collective_warnings(
    inputs: &[(RankInput, String)],
    ends: &[BTreeMap<String, Vec<u64>>],
    offsets: &[ClockOffset],
    warnings: &mut Vec<String>,
) {
    let reference = &ends[0];
    for (((r, _), o), mine) in inputs.iter().zip(offsets).zip(ends).skip(1) {
        let rank = r.rank();
        for (name, mine) in mine {
            let n = mine.len();
            if let Some(r) = reference.get(name).map(Vec::len)
                && r != n
            {
                warnings.push(format!(
                    "rank {rank} has {n} {name} kernels, reference rank {} has {r}: the first {} of each are matched, which assumes both traces start at the same collective",
                    inputs[0].0.rank(),
                    n.min(r)
                ));
            }
        }
        if let Some(s) = &o.per_instance
            && s.spread() > OFFSET_SPREAD_WARN_NS
        {
            warnings.push(format!(
                "rank {rank}: the clock offset varies by {} µs (p10–p90) over {} collective instances: clock drift, or instances matched wrongly",
                format_args!("{:.2}", s.spread() / 1000.0),
                s.n
            ));
        }
    }
}

/// Marks the slowest rank of each cell label and summarises the spread across ranks.
fn compare_ranks(rows: &mut [RankRow]) -> Vec<CellAcrossRanks> {
    let mut labels: Vec<String> = Vec::new();
    for r in rows.iter() {
        for c in &r.cells {
            if !labels.contains(&c.label) {
                labels.push(c.label.clone());
            }
        }
    }
    let mut out = Vec::with_capacity(labels.len());
    for label in labels {
        // (row, cell) of every rank with a period for this label (first cell of that label).
        let with_period: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .filter_map(|(ri, r)| {
                let ci = r.cells.iter().position(|c| c.label == label)?;
                r.cells[ci].period.map(|_| (ri, ci))
            })
            .collect();
        let median = |&(ri, ci): &(usize, usize)| -> f64 {
            rows[ri].cells[ci].period.map_or(f64::NAN, |p| p.median)
        };
        let slowest = with_period
            .iter()
            .copied()
            .max_by(|a, b| median(a).total_cmp(&median(b)));
        let fastest = with_period
            .iter()
            .copied()
            .min_by(|a, b| median(a).total_cmp(&median(b)));
        let mut summary = CellAcrossRanks {
            label: label.clone(),
            ranks: with_period.len(),
            slowest_rank: None,
            fastest_rank: None,
            max_over_min: None,
            change: None,
        };
        if let (Some(s), Some(f)) = (slowest, fastest)
            && with_period.len() >= 2
        {
            let (sc, fc) = (&rows[s.0].cells[s.1], &rows[f.0].cells[f.1]);
            summary.slowest_rank = Some(rows[s.0].rank);
            summary.fastest_rank = Some(rows[f.0].rank);
            let (sm, fm) = (median(&s), median(&f));
            summary.max_over_min = (fm > 0.0).then_some(sm / fm);
            summary.change = Change::from_runs(&fc.period_block_medians, &sc.period_block_medians)
                .or_else(|| match (&fc.period, &sc.period) {
                    (Some(fp), Some(sp)) => Some(Change::between(fp, sp)),
                    _ => None,
                });
            rows[s.0].cells[s.1].slowest = true;
        }
        out.push(summary);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::synthetic::{self, SyntheticCell};

    #[test]
    fn shift_keeps_zero_timestamps_and_saturates() {
        let mut t = synthetic::trace(&[SyntheticCell::emu(false, 1, 3)], 1);
        t.kernels[0].start = 0;
        t.kernels[0].end = 0;
        let s = shift_trace(&t, -(t.kernels[1].start as i64) - 10);
        assert_eq!((s.kernels[0].start, s.kernels[0].end), (0, 0));
        assert_eq!(s.kernels[1].start, 0);
        let back = shift_trace(&shift_trace(&t, 1_234_000), -1_234_000);
        assert_eq!(back, t);
    }

    #[test]
    fn offset_is_the_median_over_instances() {
        let mut a = synthetic::trace(&[SyntheticCell::emu(false, 1, 5)], 1);
        let coll = a.strings.iter().position(|s| s == "coll").unwrap();
        a.strings[coll] = "ncclKernel_AllReduce".into();
        let mut b = shift_trace(&a, 1000);
        // One outlier instance does not move the median.
        let k = b
            .kernels
            .iter()
            .position(|k| k.name as usize == coll)
            .unwrap();
        b.kernels[k].end += 50_000;
        let o = clock_offset(&a, &b).unwrap();
        assert_eq!(o.instances, 5);
        assert_eq!(o.offset_ns, -1000);
        assert!(clock_offset(&synthetic::emu_experiment(2), &b).is_none());
    }
}
