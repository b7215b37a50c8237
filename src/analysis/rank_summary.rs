//! Per-rank summaries: what `gapscope merge` needs of one rank, in a file about 1 % of its
//! trace's size or less (`gapscope analyze TRACE --summary FILE`), so that the ranks of a large
//! job are analysed where they were recorded (one batch task per rank) and merged in seconds.
//!
//! A summary holds the rank's identity (rank, world, host, source, dropped records), the end
//! times of its collective kernels (the clock alignment's anchors, see
//! [`super::merge`]), and per cell the figures `analyze` reports, exactly (they are computed
//! from the whole trace, never estimated): the steady-state period with its block medians,
//! busy and idle time, idle time by cause, and per position of the cell's op sequence the
//! op's duration and the gap before it. `merge` reads a summary as it reads the trace it was
//! made from and gives the same report (it compares ranks by their period figures, which a
//! summary holds as they are); only the merged Perfetto trace needs the traces themselves.
#![forbid(unsafe_code)]

use super::analyzer::Analysis;
use super::model::{CauseKind, OpKind};
use super::stats::Stat;
use crate::trace::{Source, Trace};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The version a summary file carries as its first key; a reader refuses others.
pub const SUMMARY_VERSION: u32 = 1;

/// The key a summary file starts with (how `merge` tells it from a trace).
pub const SUMMARY_KEY: &str = "gapscope_summary_version";

/// One rank's summary (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub gapscope_summary_version: u32,
    /// The gapscope that wrote it.
    pub tool: String,
    /// The trace it summarises, as it was named to `analyze`: the merge report names it.
    pub trace: String,
    pub rank: u32,
    pub world: u32,
    pub host: Option<String>,
    pub source: Source,
    pub dropped_records: u64,
    /// Per collective kernel name, the end times of its kernels in start order (ns), the
    /// first as it is and each next one as its difference to the one before (small numbers:
    /// a tenth of the size).
    pub collective_ends: BTreeMap<String, Vec<i64>>,
    pub cells: Vec<SummaryCell>,
}

/// One cell of a rank, with the figures `analyze` reports for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryCell {
    pub label: String,
    /// Steady-state step period (ns).
    pub period: Option<Stat>,
    /// Medians of consecutive blocks of steps: the run-to-run spread.
    #[serde(deserialize_with = "super::stats::exact_f64s")]
    pub period_block_medians: Vec<f64>,
    pub first_launch_period: Option<Stat>,
    pub steps: usize,
    pub busy: Option<Stat>,
    pub idle: Option<Stat>,
    /// Idle time per step of each cause (ns).
    pub idle_by_cause: Vec<SummaryCause>,
    /// Per position of the cell's canonical op sequence.
    pub ops: Vec<SummaryOp>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryCause {
    pub cause: CauseKind,
    pub per_step: Stat,
}

/// One position of a cell's op sequence: the op's duration and the gap before it, over steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryOp {
    pub name: String,
    pub kind: OpKind,
    pub duration: Stat,
    pub gap_before: Stat,
    /// The gap's most frequent cause.
    pub gap_cause: CauseKind,
}

/// Errors reading a summary; each displays as one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a usable gapscope summary: {message}")]
    Malformed { path: String, message: String },
}

impl RankSummary {
    /// The summary of the one trace `analysis` was made from (`trace` before the analysis
    /// took its device records, or after: only its metadata, kernels for the collectives and
    /// counts are read; `collectives` are its [`collective_ends`], taken before).
    pub fn new(
        trace: &Trace,
        path: &str,
        collectives: BTreeMap<String, Vec<u64>>,
        analysis: &Analysis,
    ) -> RankSummary {
        let collective_ends = collectives
            .into_iter()
            .map(|(name, ends)| {
                let mut last = 0i64;
                let deltas = ends
                    .into_iter()
                    .map(|end| {
                        let end = end as i64;
                        let d = end - last;
                        last = end;
                        d
                    })
                    .collect();
                (name, deltas)
            })
            .collect();
        RankSummary {
            gapscope_summary_version: SUMMARY_VERSION,
            tool: format!("gapscope {}", env!("CARGO_PKG_VERSION")),
            trace: path.to_owned(),
            rank: trace.metadata.rank,
            world: trace.metadata.world,
            host: host(trace).map(str::to_owned),
            source: trace.metadata.source,
            dropped_records: trace.dropped_records,
            collective_ends,
            cells: analysis
                .cells
                .iter()
                .map(|c| SummaryCell {
                    label: c.label.clone(),
                    period: c.period,
                    period_block_medians: c.period_block_medians.clone(),
                    first_launch_period: c.first_launch_period,
                    steps: c.steps.len(),
                    busy: c.busy,
                    idle: c.idle,
                    idle_by_cause: c
                        .idle_by_cause
                        .iter()
                        .map(|t| SummaryCause {
                            cause: t.cause,
                            per_step: t.per_step,
                        })
                        .collect(),
                    ops: c
                        .sequence
                        .iter()
                        .map(|e| SummaryOp {
                            name: e.name.clone(),
                            kind: e.kind,
                            duration: e.duration,
                            gap_before: e.gap_before,
                            gap_cause: e.gap_cause,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The collective end times (ns) per kernel name, decoded.
    pub fn collective_ends(&self) -> BTreeMap<String, Vec<u64>> {
        self.collective_ends
            .iter()
            .map(|(name, deltas)| {
                let mut at = 0i64;
                let ends = deltas
                    .iter()
                    .map(|d| {
                        at += d;
                        at as u64
                    })
                    .collect();
                (name.clone(), ends)
            })
            .collect()
    }

    /// The summary as compact JSON (its first key is [`SUMMARY_KEY`]).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| "null".to_owned());
        s.push('\n');
        s
    }

    /// Parses a summary file's bytes; `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &str) -> Result<RankSummary, SummaryError> {
        let malformed = |message: String| SummaryError::Malformed {
            path: path.to_owned(),
            message,
        };
        #[derive(Deserialize)]
        struct VersionOnly {
            gapscope_summary_version: Option<u64>,
        }
        let version: VersionOnly =
            serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
        match version.gapscope_summary_version {
            Some(v) if v == u64::from(SUMMARY_VERSION) => {}
            Some(v) => {
                return Err(malformed(format!(
                    "summary version {v} is not supported (this gapscope reads version {SUMMARY_VERSION}); make it again with this gapscope's `analyze --summary`"
                )));
            }
            None => return Err(malformed(format!("no \"{SUMMARY_KEY}\""))),
        }
        serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))
    }

    /// Reads a summary file.
    pub fn read(path: &Path) -> Result<RankSummary, SummaryError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| SummaryError::Io {
            path: name.clone(),
            source,
        })?;
        RankSummary::parse(&bytes, &name)
    }
}

/// Whether the start of a file (its first bytes) is a summary's: `{` and the summary key
/// first (as [`RankSummary::to_json`] writes it).
pub fn looks_like_summary(head: &[u8]) -> bool {
    let rest = head.trim_ascii_start();
    rest.strip_prefix(b"{")
        .map(|r| r.trim_ascii_start())
        .is_some_and(|r| r.starts_with(format!("\"{SUMMARY_KEY}\"").as_bytes()))
}

/// [`collective_ends`] with owned names, as a summary keeps them.
pub fn owned_collective_ends(trace: &Trace) -> BTreeMap<String, Vec<u64>> {
    collective_ends(trace)
        .into_iter()
        .map(|(name, ends)| (name.to_owned(), ends))
        .collect()
}

/// Kernel names starting with this are collective kernels: alignment anchors only.
pub const COLLECTIVE_PREFIX: &str = "nccl";

/// The host a trace was recorded on: `metadata.workload["host"]` when it is a string.
pub fn host(trace: &Trace) -> Option<&str> {
    trace.metadata.workload.get("host").and_then(Value::as_str)
}

/// End times of the collective kernels (name starting with [`COLLECTIVE_PREFIX`]), per kernel
/// name, in start order. Kernels without timestamps are left out.
pub fn collective_ends(trace: &Trace) -> BTreeMap<&str, Vec<u64>> {
    let mut by_name: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for k in &trace.kernels {
        if k.end == 0 {
            continue;
        }
        let name = trace.str(k.name);
        if name.starts_with(COLLECTIVE_PREFIX) {
            by_name.entry(name).or_default().push((k.start, k.end));
        }
    }
    by_name
        .into_iter()
        .map(|(name, mut v)| {
            v.sort_unstable();
            (name, v.into_iter().map(|(_, end)| end).collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_ends_round_trip_through_deltas_and_json() {
        let mut t = crate::trace::synthetic::emu_experiment(3);
        let coll = t.strings.iter().position(|s| s == "coll").unwrap();
        t.strings[coll] = "ncclKernel_AllGather".into();
        let ends = owned_collective_ends(&t);
        assert!(!ends.is_empty());
        let a = super::super::analyze(
            std::slice::from_ref(&t),
            &["t.json".to_owned()],
            &Default::default(),
        );
        let s = RankSummary::new(&t, "t.json", ends.clone(), &a);
        let back = RankSummary::parse(s.to_json().as_bytes(), "s.json").unwrap();
        assert_eq!(back, s);
        assert_eq!(back.collective_ends(), ends);
        assert!(looks_like_summary(s.to_json().as_bytes()));
        assert!(!looks_like_summary(br#"{"schema_version":1}"#));
    }

    #[test]
    fn figures_read_back_to_the_bit() {
        // 17-digit values serde_json's own parser reads one unit in the last place off.
        let values = vec![
            53675.198554992676,
            57027.52232551575,
            57545.602321624756,
            0.1,
        ];
        let stat = Stat::of(&mut values.clone()).unwrap();
        let back: Stat = serde_json::from_str(&serde_json::to_string(&stat).unwrap()).unwrap();
        assert_eq!(back, stat);
        #[derive(Deserialize)]
        struct Medians(#[serde(deserialize_with = "crate::analysis::stats::exact_f64s")] Vec<f64>);
        let text = serde_json::to_string(&values).unwrap();
        let Medians(back) = serde_json::from_str(&text).unwrap();
        assert_eq!(back, values);
    }

    #[test]
    fn other_versions_are_refused_with_the_reason() {
        let e = RankSummary::parse(br#"{"gapscope_summary_version":99}"#, "x.json").unwrap_err();
        assert!(e.to_string().contains("version 99 is not supported"), "{e}");
        let e = RankSummary::parse(br#"{"a":1}"#, "x.json").unwrap_err();
        assert!(
            e.to_string().contains("no \"gapscope_summary_version\""),
            "{e}"
        );
    }
}
