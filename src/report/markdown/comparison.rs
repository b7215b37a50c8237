#![forbid(unsafe_code)]
//! Markdown of `gapscope compare`: the full comparison report (`compare.md`) and the PR table
//! of `--format github`, both led by the threshold verdict.

use super::{
    comparison_change_label, duration_check, explain, geomean_line, inputs_section, opt_stat_cell,
    warnings_section,
};
use crate::analysis::{CellComparison, Comparison};
use crate::report::{md_cell, ratio, us2_signed};
use std::fmt::Write as _;

/// The report of `compare BASE HEAD`, with the threshold verdict first and last.
pub fn comparison_markdown(c: &Comparison) -> String {
    comparison_markdown_with(c, None)
}

/// `compare.md` of an output set that holds the picture ([`picture_line`]), shown under the
/// verdict.
pub fn comparison_markdown_pictured(c: &Comparison) -> String {
    comparison_markdown_with(c, Some(crate::report::output_set::COMPARISON_SVG))
}

/// `![…](path)`: the picture of the comparison's headline pair, at `path`; `None` without one.
pub fn picture_line(c: &Comparison, path: &str) -> Option<String> {
    let p = crate::analysis::compare::headline_picture(c)?;
    let m = &c.cells[p.cell];
    Some(format!(
        "![{} vs {}: one step of each, BASE above HEAD]({path})",
        md_cell(&m.base_label),
        md_cell(&m.head_label)
    ))
}

fn comparison_markdown_with(c: &Comparison, picture: Option<&str>) -> String {
    let mut s = String::new();
    let verdict = verdict_line(c);
    let _ = writeln!(s, "## gapscope compare: base vs head\n");
    let _ = writeln!(s, "**{verdict}**\n");
    if let Some(line) = picture.and_then(|path| picture_line(c, path)) {
        let _ = writeln!(s, "{line}\n");
    }
    for line in cautions(c) {
        let _ = writeln!(s, "> {line}\n");
    }
    inputs_section(&mut s, &c.base, Some("Base inputs"));
    inputs_section(&mut s, &c.head, Some("Head inputs"));
    warnings_section(&mut s, &[("base ", &c.base), ("head ", &c.head)]);

    let _ = writeln!(s, "### Step period, base → head\n");
    let _ = writeln!(
        s,
        "| cell (base → head) | base period µs | head period µs | head/base | change | Δ median µs |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|---|--:|");
    for m in &c.cells {
        let _ = writeln!(
            s,
            "| {} | {} |",
            period_cells(c, m),
            m.period_delta.map_or("—".to_owned(), us2_signed),
        );
    }
    let _ = writeln!(s);
    match &c.geomean_ratio {
        Some(g) => {
            let _ = writeln!(s, "{}\n", geomean_line("head/base period", "cell", g));
        }
        None => {
            let _ = writeln!(
                s,
                "No matched cell with periods on both sides: no geomean.\n"
            );
        }
    }

    let _ = writeln!(s, "{}", crate::report::remedies::realised_section(c));
    let _ = writeln!(s, "### What explains the differences\n");
    for m in &c.cells {
        let _ = writeln!(s, "- **{}**: {}", md_cell(&pair_name(m)), explain(m));
        for op in top_gap_deltas(m) {
            let _ = writeln!(s, "  - {op}");
        }
        if let Some(h) = &m.host_code_change {
            let _ = writeln!(s, "  - host code changed most: {}", md_cell(&h.describe()));
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "### Kernel durations, base → head\n");
    for m in &c.cells {
        if c.base.cells.get(m.base).is_none() || c.head.cells.get(m.head).is_none() {
            continue;
        }
        let _ = writeln!(s, "- {}: {}", md_cell(&pair_name(m)), duration_check(m));
    }
    let _ = writeln!(s);

    if !c.unmatched.is_empty() {
        let _ = writeln!(s, "### Unmatched cells (not compared)\n");
        for u in &c.unmatched {
            let _ = writeln!(s, "- {}", md_cell(u));
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "**{verdict}**");
    crate::report::printable_report(s)
}

/// The PR table of `compare --format github`: the verdict, per cell base vs head with n and
/// spread, the ratio and change, the geomean with its range, the causes that moved most, and
/// whether the predicted savings were realised. Fit for a PR comment or
/// `$GITHUB_STEP_SUMMARY`.
///
/// With `picture` (the path of `compare.svg`) the picture comes first and the table folds
/// into a `<details>` block under it.
pub fn comparison_github(c: &Comparison, picture: Option<&str>) -> String {
    let mut s = String::new();
    let icon = if c.breached.is_empty() { "✅" } else { "❌" };
    let _ = writeln!(s, "### gapscope: {icon} {}\n", verdict_line(c));
    for line in cautions(c) {
        let _ = writeln!(s, "> {line}\n");
    }
    let picture = picture.and_then(|path| picture_line(c, path));
    if let Some(line) = &picture {
        let _ = writeln!(s, "{line}\n");
        let _ = writeln!(
            s,
            "<details><summary>{} cell(s) compared</summary>\n",
            c.cells.len()
        );
    }
    let _ = writeln!(
        s,
        "| cell | base µs | head µs | head/base | change | largest change |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|---|---|");
    for m in &c.cells {
        let moved = m.largest_change().map_or("—".to_owned(), |(part, ns)| {
            let what = crate::report::period_part_label(part);
            format!("{} µs {}", us2_signed(ns), md_cell(&what))
        });
        let _ = writeln!(s, "| {} | {moved} |", period_cells(c, m));
    }
    if let Some(g) = &c.geomean_ratio {
        let _ = writeln!(s, "\n{}", geomean_line("head/base period", "cell", g));
    }
    if !c.realised.is_empty() {
        let _ = writeln!(
            s,
            "\n{}",
            crate::report::remedies::realised_section(c).trim_end()
        );
    }
    if !c.unmatched.is_empty() {
        let _ = writeln!(s, "\nNot compared: {}", md_cell(&c.unmatched.join("; ")));
    }
    if picture.is_some() {
        let _ = writeln!(s, "\n</details>");
    }
    crate::report::printable_report(s)
}

pub(crate) fn verdict_line(c: &Comparison) -> String {
    if c.breached.is_empty() {
        let unjudged = [
            crate::analysis::compare::slower_within_threshold_note(&c.cells, c.threshold),
            crate::analysis::compare::unjudged_note(&c.cells),
        ]
        .into_iter()
        .flatten()
        .map(|note| format!("; {note}"))
        .collect::<String>();
        format!(
            "PASS: no cell slower than {:.2}× beyond spread ({} cells compared{unjudged})",
            c.threshold,
            c.cells.len()
        )
    } else {
        format!(
            "FAIL: {} cell(s) slower than {:.2}× beyond spread: {}",
            c.breached.len(),
            c.threshold,
            c.breached.join("; ")
        )
    }
}

pub(crate) fn pair_name(m: &CellComparison) -> String {
    if m.base_label == m.head_label {
        m.base_label.clone()
    } else {
        format!("{} → {}", m.base_label, m.head_label)
    }
}

/// The aligned positions whose gap before changed most
/// ([`CellComparison::gap_deltas_listed`]), as lines.
fn top_gap_deltas(m: &CellComparison) -> Vec<String> {
    m.gap_deltas_listed()
        .into_iter()
        .map(|(a, d)| {
            let cause = a
                .head_gap_cause
                .as_deref()
                .or(a.base_gap_cause.as_deref())
                .unwrap_or("unattributed");
            format!(
                "gap before `{}` {} µs ({})",
                md_cell(&crate::report::short_op_name(&a.name)),
                us2_signed(d),
                md_cell(cause)
            )
        })
        .collect()
}

/// The first five cells of a period row, shared by both comparison tables: "pair | base |
/// head | head/base | change" (without the outer pipes).
fn period_cells(c: &Comparison, m: &CellComparison) -> String {
    let bp = c.base.cells.get(m.base).and_then(|x| x.period.as_ref());
    let hp = c.head.cells.get(m.head).and_then(|x| x.period.as_ref());
    format!(
        "{} | {} | {} | {} | {}",
        md_cell(&pair_name(m)),
        opt_stat_cell(bp),
        opt_stat_cell(hp),
        m.ratio.map_or("—".to_owned(), ratio),
        comparison_change_label(m),
    )
}

/// The lines that qualify the verdict: the devices' ([`Comparison::device_mismatch`]), then
/// [`host_bound_caution`]'s.
pub fn cautions(c: &Comparison) -> Vec<String> {
    c.device_mismatch
        .iter()
        .map(|m| format!("Caution: {m}."))
        .chain(host_bound_caution(c))
        .collect()
}

/// A caution when slower cells grew mostly in host launch-bound gaps
/// ([`Comparison::host_bound_slowdowns`]): the host launched later in HEAD, either because the
/// launch itself costs more there (a first launch setting up new node types) or because the
/// run's host was slower (load, a process of the host's slower speed, whose launches under
/// CUPTI outgrow the GPU period). `None` when no slower cell is like that.
pub fn host_bound_caution(c: &Comparison) -> Option<String> {
    let cells: Vec<String> = c
        .host_bound_slowdowns
        .iter()
        .filter_map(|h| {
            let m = c.cells.get(h.cell)?;
            Some(format!("{} ({:.0} %)", pair_name(m), h.share * 100.0))
        })
        .collect();
    (!cells.is_empty()).then(|| {
        format!(
            "Caution: most of the slowdown of {} is gaps where the host launched later (host launch-bound), not GPU work: a launch call that costs more host time in HEAD, or a host that was slower in HEAD's run (load, recording overhead that differs between processes). Record base and head the same way, several runs each, to tell the two apart.",
            cells.join(", ")
        )
    })
}
