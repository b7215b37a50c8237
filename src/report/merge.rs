#![forbid(unsafe_code)]
//! The report of `gapscope merge` ([`Merged`]): Markdown with a row per rank and the spread
//! across ranks, the JSON report (`"kind": "merge"`), and the merged Perfetto trace (a process
//! per rank and cell, every rank on the reference clock).

use super::{PerfettoFormat, PerfettoOptions, md_cell, ratio, stat_us};
use crate::analysis::merge::{COLLECTIVE_PREFIX, ClockAlignment, Merged};
use crate::analysis::stats::Change;
use crate::trace::Source;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io;

/// Offset in µs with three decimals and a sign ("+1234.000", "−0.125").
fn us3_signed(ns: f64) -> String {
    let s = format!("{:+.3}", ns / 1000.0);
    s.replacen('-', "−", 1)
}

/// The report as Markdown (a PR comment).
pub fn merge_markdown(merged: &Merged) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## gapscope merge: {} ranks\n", merged.ranks.len());
    if merged.ranks.iter().any(|r| r.source == Source::Synthetic) {
        let _ = writeln!(
            s,
            "> **Synthetic input**: some traces were generated, not recorded on a GPU.\n"
        );
    }
    let _ = writeln!(
        s,
        "Clock alignment: **{}**: {}; reference rank {}.{}\n",
        match merged.clock_alignment {
            ClockAlignment::Collectives => "collectives",
            ClockAlignment::None => "none",
        },
        md_cell(&merged.clock_alignment_reason),
        merged.reference_rank,
        match merged.clock_alignment {
            ClockAlignment::Collectives => format!(
                " Each rank's offset (added to its timestamps) is the median over matched \
                 collective kernels (`{COLLECTIVE_PREFIX}*`, k-th vs the reference's k-th) \
                 of reference end − rank end; [p10–p90] and n are over those instances."
            ),
            ClockAlignment::None => String::new(),
        }
    );

    ranks_table(&mut s, merged);
    spread_table(&mut s, merged);
    if !merged.warnings.is_empty() {
        let _ = writeln!(s, "### Warnings\n");
        for w in &merged.warnings {
            let _ = writeln!(s, "- {}", md_cell(w));
        }
    }
    s.truncate(s.trim_end().len());
    s.push('\n');
    crate::report::printable_report(s)
}

/// One row per rank: its trace, host, clock offset, dropped records and each cell's period.
fn ranks_table(s: &mut String, merged: &Merged) {
    // Columns: one per cell label.
    let labels: Vec<&str> = merged.cells.iter().map(|c| c.label.as_str()).collect();
    let _ = write!(
        s,
        "| rank | trace | host | clock offset µs | dropped records | cells |"
    );
    for l in &labels {
        let _ = write!(s, " {} period |", md_cell(l));
    }
    let _ = write!(s, "\n|--:|---|---|--:|--:|--:|");
    for _ in &labels {
        let _ = write!(s, "--:|");
    }
    s.push('\n');
    for r in &merged.ranks {
        let offset = offset_text(merged, r);
        let _ = write!(
            s,
            "| {} | `{}` | {} | {} | {} | {} |",
            r.rank,
            md_cell(&r.path),
            r.host.as_deref().map_or("—".to_owned(), md_cell),
            offset,
            r.dropped_records,
            r.cells.len()
        );
        for l in &labels {
            let cell = r.cells.iter().find(|c| c.label == *l);
            let text = match cell {
                None => "—".to_owned(),
                Some(c) => match (&c.period, c.slowest) {
                    (None, _) => match &c.no_period {
                        Some(why) => format!("no period ({})", md_cell(why)),
                        None => "no period".to_owned(),
                    },
                    (Some(p), true) => format!("**{} slowest**", stat_us(p)),
                    (Some(p), false) => stat_us(p),
                },
            };
            let _ = write!(s, " {text} |");
        }
        s.push('\n');
    }
    s.push('\n');
}

/// A rank's clock offset in µs: "reference", "+12.000 [p10–p90] n=N" or "0 (not aligned)".
fn offset_text(merged: &Merged, r: &crate::analysis::merge::RankRow) -> String {
    match (&r.clock.per_instance, r.rank == merged.reference_rank) {
        (_, true) if merged.clock_alignment == ClockAlignment::Collectives => {
            "reference".to_owned()
        }
        (Some(p), _) => format!(
            "{} [{}–{}] n={}",
            us3_signed(r.clock.offset_ns as f64),
            us3_signed(p.p10),
            us3_signed(p.p90),
            p.n
        ),
        (None, _) => "0 (not aligned)".to_owned(),
    }
}

/// How far apart a cell's slowest and fastest ranks are, in words.
fn spread_words(change: Option<Change>) -> &'static str {
    match change {
        Some(Change::NoChange) => "inside the run-to-run spread",
        Some(Change::Slower) => "slower beyond the run-to-run spread",
        Some(Change::Faster) => "inconsistent: block medians disagree with the medians",
        None => "—",
    }
}

/// The terminal's form of the report: plain lines, no Markdown tables (those are for
/// `report.md`), wrapped to the screen's width by the caller ([`super::summary::fit_screen`]).
pub fn merge_summary(merged: &Merged) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "gapscope merge: {} ranks", merged.ranks.len());
    if merged.ranks.iter().any(|r| r.source == Source::Synthetic) {
        let _ = writeln!(
            s,
            "Synthetic input: some traces were generated, not recorded on a GPU."
        );
    }
    let _ = writeln!(
        s,
        "Clock alignment: {}: {}; reference rank {}.",
        match merged.clock_alignment {
            ClockAlignment::Collectives => "collectives",
            ClockAlignment::None => "none",
        },
        merged.clock_alignment_reason,
        merged.reference_rank
    );
    let _ = writeln!(s, "\nRanks:");
    for r in &merged.ranks {
        let host = r
            .host
            .as_deref()
            .map_or(String::new(), |h| format!("host {h}, "));
        let clock = match offset_text(merged, r) {
            o if r.clock.per_instance.is_some() => format!("clock offset {o} µs"),
            o if o == "reference" => "reference clock".to_owned(),
            _ => "clock not aligned".to_owned(),
        };
        let _ = writeln!(
            s,
            "  rank {}: {} ({host}{clock}, {} cells, {} dropped records)",
            r.rank,
            r.path,
            r.cells.len(),
            r.dropped_records
        );
    }
    let rank = |r: Option<u32>| r.map_or("—".to_owned(), |r| format!("rank {r}"));
    let _ = writeln!(s, "\nCells (period per rank):");
    for c in &merged.cells {
        let _ = writeln!(
            s,
            "  {}: {} ranks, slowest {}, fastest {}, max/min {}: {}",
            c.label,
            c.ranks,
            rank(c.slowest_rank),
            rank(c.fastest_rank),
            c.max_over_min.map_or("—".to_owned(), ratio),
            spread_words(c.change)
        );
        for r in &merged.ranks {
            let Some(cell) = r.cells.iter().find(|x| x.label == c.label) else {
                continue;
            };
            let text = match (&cell.period, cell.slowest) {
                (None, _) => match &cell.no_period {
                    Some(why) => format!("no period ({why})"),
                    None => "no period".to_owned(),
                },
                (Some(p), true) => format!("{} (slowest)", stat_us(p)),
                (Some(p), false) => stat_us(p),
            };
            let _ = writeln!(s, "      rank {}: {text}", r.rank);
        }
    }
    if !merged.warnings.is_empty() {
        let _ = writeln!(s, "\nWarnings:");
        for w in &merged.warnings {
            let _ = writeln!(s, "  {w}");
        }
    }
    s.truncate(s.trim_end().len());
    crate::report::printable_report(s)
}

/// One row per cell: its slowest and fastest ranks and how far apart they are.
fn spread_table(s: &mut String, merged: &Merged) {
    let _ = writeln!(s, "### Spread across ranks\n");
    let _ = writeln!(
        s,
        "| cell | ranks | slowest | fastest | max/min period | slowest vs fastest |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|---|");
    for c in &merged.cells {
        let rank = |r: Option<u32>| r.map_or("—".to_owned(), |r| format!("rank {r}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            md_cell(&c.label),
            c.ranks,
            rank(c.slowest_rank),
            rank(c.fastest_rank),
            c.max_over_min.map_or("—".to_owned(), ratio),
            spread_words(c.change)
        );
    }
    s.push('\n');
}

/// The report as pretty JSON: `{"gapscope_report_version", "kind": "merge", ...}`.
pub fn merge_json(merged: &Merged) -> String {
    let mut doc = serde_json::Map::new();
    doc.insert(
        "gapscope_report_version".into(),
        json!(super::json::REPORT_VERSION),
    );
    doc.insert("kind".into(), json!("merge"));
    doc.insert(
        "tool".into(),
        json!(format!("gapscope {}", env!("CARGO_PKG_VERSION"))),
    );
    if let Ok(Value::Object(body)) = serde_json::to_value(merged) {
        doc.extend(body);
    }
    let mut s =
        serde_json::to_string_pretty(&Value::Object(doc)).unwrap_or_else(|_| "null".to_owned());
    s.push('\n');
    s
}

/// The merged Perfetto trace in `format`: one process per (rank, cell), named
/// "rank R: `<cell label>` …", every rank on the reference clock.
pub fn write_merge_trace(
    merged: &Merged,
    format: PerfettoFormat,
    w: &mut dyn io::Write,
) -> io::Result<()> {
    super::perfetto::write_trace(
        w,
        format,
        &merged.traces,
        &merged.analysis,
        &PerfettoOptions::default(),
    )
}
