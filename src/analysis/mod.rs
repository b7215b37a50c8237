//! `timeline` → `steps` (markers and graph launches → steps and cells; `discover` finds eager steps
//! in the kernel sequence when nothing marks them) → `align` (graphed ↔ eager kernels) → `cause`
//! (each gap's cause) → `stats`; `remedy` turns causes into changes to make, `merge` compares
//! ranks, `trial` judges `gapscope try`'s variants. The types every stage shares are in `model`;
//! `analyzer` runs the stages over each trace and holds what they found together (`Analysis`). Safe
//! Rust, no GPU needed.
#![forbid(unsafe_code)]

pub mod align;
pub mod analyzer;
pub mod cause;
mod cell;
pub mod cell_comparison;
pub mod compare;
pub mod completeness;
mod corr_set;
pub mod coverage;
pub mod discover;
pub mod headline;
pub mod host_samples;
mod lcs;
pub mod left_out;
pub mod merge;
mod model;
pub mod provenance;
pub mod rank_summary;
pub mod remedy;
pub mod saving;
pub mod stats;
pub mod steps;
pub mod thresholds;
pub mod timeline;
pub mod tracer_share;
pub mod trial;
pub mod untraced;
pub mod validate;

pub use align::{NotPaired, PairBasis, Pairing};
pub use analyzer::{Analysis, Analyzer, Detail, InputSummary, analyze};
pub use cause::AnalysisOptions;
pub use cell::*;
pub use cell_comparison::{AlignedOp, CellComparison, KernelDelta, KernelDurations, PeriodPart};
pub use compare::{Comparison, HostBoundSlowdown};
pub use model::*;
