#![forbid(unsafe_code)]
//! The Perfetto trace of a comparison (`compare.perfetto-trace`, and `try`'s per judged
//! variant), in the TrackEvent protobuf of `trace.perfetto-trace` and through its writer:
//! - two processes, BASE above HEAD (pid 1 and 2);
//! - per compared cell the step [`crate::analysis::compare::pair_picture`] chose on each side,
//!   both put at one origin; the cells follow one another in time, each on its own tracks
//!   ("`<cell label>`: stream 7", "…: gaps", …);
//! - one flow arrow between each pair of ops the alignment matched (the same ops `compare`
//!   pairs), in time order whichever side runs first;
//! - each gap a slice named by its cause, with the base → head medians of the gap before the
//!   same aligned op (`base_to_head`, `base_median_ns`, `head_median_ns`); the gap that changed
//!   most ([`crate::analysis::compare::PairPicture::largest_gap_change`]) is named with
//!   [`LARGEST_CHANGE_PREFIX`] and annotated `largest_change`.

use super::track_event::{PacketWriter, Provenance};
use super::{Annotate, PerfettoOptions, Plan, Shift, cell_earliest};
use crate::analysis::compare::PairPicture;
use crate::analysis::{Analysis, CellAnalysis, Comparison};
use crate::report::{step_op_at, us2, us2_signed};
use crate::trace::Trace;
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::io::{self, Write};

/// The comparison trace's name in `compare`'s output set.
pub const COMPARISON_FILE: &str = "compare.perfetto-trace";

/// How the slice of the gap that changed most begins.
pub const LARGEST_CHANGE_PREFIX: &str = "largest change: ";

/// What a comparison adds to one side's step.
#[derive(Default)]
pub(super) struct Compared {
    /// The cross-side flow of each matched op (by timeline index).
    pub(super) flows: FxHashMap<usize, u64>,
    /// By (step, gap) of the laid-out cell: the gap before the same aligned op on both sides.
    pub(super) gaps: FxHashMap<(usize, usize), GapChange>,
}

/// The median gap before one aligned op on each side (ns; `None` where that side lacks the op).
pub(super) struct GapChange {
    base_ns: Option<f64>,
    head_ns: Option<f64>,
    pub(super) largest: bool,
}

impl GapChange {
    pub(super) fn annotate(&self, a: &mut dyn Annotate) {
        let us = |ns: Option<f64>| ns.map_or("—".to_owned(), |ns| format!("{} µs", us2(ns)));
        let mut text = format!("{} → {}", us(self.base_ns), us(self.head_ns));
        if let (Some(b), Some(h)) = (self.base_ns, self.head_ns) {
            text += &format!(" ({} µs)", us2_signed(h - b));
        }
        a.str("base_to_head", &text);
        if let Some(b) = self.base_ns {
            a.num("base_median_ns", b.max(0.0).round() as u64);
        }
        if let Some(h) = self.head_ns {
            a.num("head_median_ns", h.max(0.0).round() as u64);
        }
        if self.largest {
            a.bool("largest_change", true);
        }
    }
}

/// `cell` holding only its step `k`.
fn one_step(cell: &CellAnalysis, k: usize) -> Option<CellAnalysis> {
    let step = cell.steps.get(k)?.clone();
    let mut copy = cell.clone();
    copy.steps = vec![step];
    Some(copy)
}

/// The flows (numbered from 0) and gap changes of one picture's two one-step cells; returns
/// them with the number of flows.
fn compare_sides(
    c: &Comparison,
    p: &PairPicture,
    traces: [&[Trace]; 2],
    cells: [&CellAnalysis; 2],
) -> ([Compared; 2], u64) {
    let pair = &c.cells[p.cell];
    let analyses = [&c.base, &c.head];
    let ops = |s: usize| {
        analyses[s]
            .timelines
            .get(cells[s].trace)
            .map_or(&[][..], |t| t.ops.as_slice())
    };
    let mut out: [Compared; 2] = Default::default();
    let mut aligned_of: [FxHashMap<usize, usize>; 2] = Default::default();
    let mut next = 0;
    for (ai, a) in pair.aligned.iter().enumerate() {
        let found: Vec<Option<usize>> = [a.base, a.head]
            .iter()
            .enumerate()
            .map(|(s, pos)| step_op_at(traces[s], ops(s), cells[s], &cells[s].steps[0], (*pos)?))
            .collect();
        for (s, op) in found.iter().enumerate() {
            if let Some(op) = op {
                aligned_of[s].insert(*op, ai);
            }
        }
        if let [Some(b), Some(h)] = found[..] {
            out[0].flows.insert(b, next);
            out[1].flows.insert(h, next);
            next += 1;
        }
    }
    let median =
        |s: usize, pos: Option<usize>| Some(cells[s].sequence.get(pos?)?.gap_before.median);
    for s in 0..2 {
        for (gi, g) in cells[s].steps[0].gaps.iter().enumerate() {
            let Some(&ai) = aligned_of[s].get(&g.after) else {
                continue;
            };
            let a = &pair.aligned[ai];
            out[s].gaps.insert(
                (0, gi),
                GapChange {
                    base_ns: median(0, a.base),
                    head_ns: median(1, a.head),
                    largest: p.largest_gap_change == Some(ai),
                },
            );
        }
    }
    (out, next)
}

/// "BASE — traces/a.json, traces/b.json".
fn process_name(side: &str, analysis: &Analysis) -> String {
    let paths: Vec<&str> = analysis.inputs.iter().map(|i| i.path.as_str()).collect();
    format!("{side} — {}", paths.join(", "))
}

/// Streams the comparison trace of `pictures` (each a cell of `c`) to `w`: `traces` are the
/// base's and the head's, `sides` the names of their processes (e.g. "BASE", "HEAD").
pub fn write_comparison_trace(
    w: &mut dyn Write,
    c: &Comparison,
    traces: [&[Trace]; 2],
    sides: [&str; 2],
    pictures: &[PairPicture],
) -> io::Result<()> {
    let analyses = [&c.base, &c.head];
    let plans = [0, 1].map(|s| Plan::new(traces[s], analyses[s], &PerfettoOptions::default()));
    let cells: Vec<[Option<CellAnalysis>; 2]> = pictures
        .iter()
        .map(|p| {
            let pair = &c.cells[p.cell];
            [
                c.base
                    .cells
                    .get(pair.base)
                    .and_then(|x| one_step(x, p.base_step)),
                c.head
                    .cells
                    .get(pair.head)
                    .and_then(|x| one_step(x, p.head_step)),
            ]
        })
        .collect();
    // Each picture's origin: after the previous picture's longer step, with room for the launch
    // calls that precede its own steps' windows.
    let mut origins = Vec::with_capacity(pictures.len());
    let mut cursor = 0u64;
    for pair in &cells {
        let (mut lead, mut span) = (0u64, 0u64);
        for (s, cell) in pair.iter().enumerate() {
            let Some(cell) = cell else { continue };
            let step = &cell.steps[0];
            let earliest = cell_earliest(cell, analyses[s], plans[s].apis(cell.trace));
            lead = lead.max(
                step.window_start
                    .saturating_sub(earliest.unwrap_or(u64::MAX)),
            );
            span = span.max(step.end.saturating_sub(step.window_start));
        }
        let origin = cursor + lead;
        origins.push(origin);
        cursor = origin + span + (span / 4).max(1_000);
    }
    let mut out = PacketWriter::new(w);
    let mut compared: Vec<[Compared; 2]> = Vec::with_capacity(pictures.len());
    for (p, pair) in pictures.iter().zip(&cells) {
        let [Some(b), Some(h)] = pair else {
            compared.push(Default::default());
            continue;
        };
        let (mut sides, n) = compare_sides(c, p, traces, [b, h]);
        // Ids no launch flow of the file takes.
        let first = out.reserve_flows(n);
        for side in &mut sides {
            side.flows.values_mut().for_each(|id| *id += first);
        }
        compared.push(sides);
    }
    for s in 0..2 {
        let process = out.process(s as u64 + 1, &process_name(sides[s], analyses[s]))?;
        let mut provenance: HashMap<usize, Provenance<'_>> = HashMap::new();
        let mut rank_offset = 0;
        for (k, pair) in cells.iter().enumerate() {
            let Some(cell) = &pair[s] else { continue };
            let shift = Shift {
                sub: cell.steps[0].window_start,
                add: origins[k],
            };
            let Some(mut layout) = plans[s].layout_of(cell, shift) else {
                continue;
            };
            layout.compared = Some(std::mem::take(&mut compared[k][s]));
            layout.rank_offset = rank_offset;
            rank_offset += layout.tracks.len() as u64;
            for (_, name) in &mut layout.tracks {
                *name = format!("{}: {name}", cell.label);
            }
            let prov = provenance
                .entry(cell.trace)
                .or_insert_with(|| Provenance::new(traces[s].get(cell.trace)));
            out.cell(process, &layout, prov)?;
        }
    }
    out.finish()
}
