#![forbid(unsafe_code)]
//! `gapscope try`'s outputs: the screen ([`trial_summary`]) and `try.md` ([`trial_markdown`]),
//! both printing the verdicts [`crate::analysis::trial::judge`] decided (`try.json` is
//! [`super::json::trial_json`]). The headline comes first in each.

use super::{md_cell, printable, us2, us2_signed};
use crate::analysis::trial::{CellVerdict, PeriodBasis, TrialReport, VariantVerdict, Word};
use std::fmt::Write;

/// A period in µs with its unit, "—" when there is none.
fn period(ns: Option<f64>) -> String {
    ns.map_or("—".to_owned(), |p| format!("{} µs", us2(p)))
}

/// "−1.04 µs" (a change).
fn change(ns: Option<f64>) -> String {
    ns.map_or("—".to_owned(), |c| format!("{} µs", us2_signed(c)))
}

/// A cell's word with what it removed, or why it has none: "removes external event wait",
/// "failed: round 1: exit code 1: …".
fn word_text(c: &CellVerdict) -> String {
    match (c.word, c.removed, &c.why) {
        (Word::Removes, Some(cause), _) => format!("removes {cause}"),
        (_, _, Some(why)) => format!("{}: {why}", c.word.label()),
        _ => c.word.label().to_owned(),
    }
}

/// "BASE's fix predicts −1.10 µs (NCCL graph usage mode 1 …)" where BASE's analysis predicted a saving
/// and the variant has a measured change to set beside it.
fn predicted_text(c: &CellVerdict) -> Option<String> {
    c.predicted
        .as_ref()
        .filter(|_| c.change_ns.is_some())
        .map(|p| {
            format!(
                "BASE's fix predicts {} µs ({})",
                us2_signed(-p.saving_ns),
                p.fix
            )
        })
}

fn basis_text(basis: PeriodBasis) -> &'static str {
    match basis {
        PeriodBasis::Untraced => "untraced periods",
        PeriodBasis::Traced => "traced periods (a run measured no untraced one)",
    }
}

/// The lines every output starts with: the headline, whether the report is partial, what ran.
fn preamble(r: &TrialReport) -> Vec<String> {
    let mut lines = vec![r.headline.clone()];
    lines.extend(r.partial.clone());
    lines.push(format!(
        "{} of {} round(s) complete, BASE and {} variant(s) interleaved in each; command{}: `{}`",
        r.rounds_judged.len(),
        r.rounds,
        r.variants.len(),
        if r.recorded_elsewhere {
            " (recorded elsewhere, its paths as given there)"
        } else {
            ""
        },
        r.command
    ));
    lines.extend(r.base_failures.iter().map(|f| format!("BASE failed, {f}")));
    lines
}

/// "Ruled out with no effect: `A=1`, `B=1`" when some variant is.
fn ruled_out(r: &TrialReport, quote: &str) -> Option<String> {
    let labels: Vec<String> = r
        .no_effect()
        .iter()
        .map(|v| format!("{quote}{}{quote}", v.label))
        .collect();
    (!labels.is_empty()).then(|| format!("Ruled out with no effect: {}", labels.join(", ")))
}

/// The screen of `gapscope try`: the headline, then a line per variant and per cell.
pub fn trial_summary(r: &TrialReport, full_report: Option<&str>) -> String {
    let mut s = String::new();
    let mut lines = preamble(r).into_iter();
    if let Some(first) = lines.next() {
        let _ = writeln!(s, "gapscope try: {first}");
    }
    for line in lines {
        let _ = writeln!(s, "{line}");
    }
    word_table(r, &mut s);
    let _ = writeln!(
        s,
        "Variants (cell: word, BASE → variant period, change; spread across rounds BASE/variant):"
    );
    for v in &r.variants {
        let removed = v.cells.iter().find_map(|c| c.removed);
        let _ = writeln!(
            s,
            "  {} — {}{}",
            v.label,
            v.word.label(),
            removed.map(|c| format!(" {c}")).unwrap_or_default()
        );
        if let Some(failed) = &v.failed {
            let _ = writeln!(s, "    failed, {failed}");
            continue;
        }
        for c in &v.cells {
            let extra = predicted_text(c)
                .map(|p| format!("; {p}"))
                .unwrap_or_default();
            let spread = match c.rounds_spread_ns {
                Some([b, v]) => format!("; spread across rounds {}/{} µs", us2(b), us2(v)),
                None if c.change_ns.is_some() => "; spread unknown (too few rounds)".to_owned(),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "    {}: {}, {} → {} ({}{spread}){extra}",
                c.cell,
                word_text(c),
                period(c.base_period),
                period(c.variant_period),
                change(c.change_ns),
            );
        }
    }
    if let Some(line) = ruled_out(r, "") {
        let _ = writeln!(s, "{line}");
    }
    if !r.variant_only.is_empty() {
        let _ = writeln!(s, "Not in BASE: {}", r.variant_only.join("; "));
    }
    if let Some(e) = &r.expect_fix {
        let _ = writeln!(s, "Expected fix: {}", e.why.replace("**", ""));
    }
    let files = crate::report::trial_files::trial_files(r);
    match full_report {
        Some(path) => {
            let _ = write!(s, "Full report: {path} (with {})", files[1..].join(", "));
        }
        None => {
            let _ = write!(s, "Full report: add -o DIR ({})", files.join(", "));
        }
    }
    super::printable_report(s)
}

/// Most cells the screen's table of words has a column for (each is 13 wide, beside a
/// variant column of [`LABEL_WIDTH`]: 6 fit 120 characters); the lines below it list all.
const TABLE_CELLS: usize = 6;
const LABEL_WIDTH: usize = 30;

/// The words, variant × cell: cells as C1, C2… (named on the line above), a row per variant.
fn word_table(r: &TrialReport, s: &mut String) {
    let cells = cell_names(r);
    if cells.is_empty() {
        return;
    }
    let shown = cells.len().min(TABLE_CELLS);
    let names: Vec<String> = cells
        .iter()
        .take(shown)
        .enumerate()
        .map(|(i, c)| format!("C{} {c}", i + 1))
        .collect();
    let more = if cells.len() > shown {
        format!(" (and {} more, below)", cells.len() - shown)
    } else {
        String::new()
    };
    let _ = writeln!(s, "Cells: {}{more}", names.join("; "));
    let fit = |t: &str, w: usize| {
        let t: String = if t.chars().count() > w - 1 {
            t.chars().take(w - 2).collect::<String>() + "…"
        } else {
            t.to_owned()
        };
        format!("{t:<w$}")
    };
    let mut head = format!("  {}", fit("variant", LABEL_WIDTH));
    for i in 0..shown {
        head += &fit(&format!("C{}", i + 1), 13);
    }
    let _ = writeln!(s, "{}", head.trim_end());
    for v in &r.variants {
        let mut row = format!("  {}", fit(&v.label, LABEL_WIDTH));
        for c in v.cells.iter().take(shown) {
            row += &fit(c.word.label(), 13);
        }
        let _ = writeln!(s, "{}", row.trim_end());
    }
}

/// `try.md`: the headline, the verdict per variant, "Ruled out with no effect", then per cell
/// the before/after table and the gaps by cause.
pub fn trial_markdown(r: &TrialReport) -> String {
    trial_markdown_with(r, false)
}

/// `try.md` of an output set that holds the pictures: `try.svg` and each judged variant's.
pub fn trial_markdown_pictured(r: &TrialReport) -> String {
    trial_markdown_with(r, true)
}

fn trial_markdown_with(r: &TrialReport, pictured: bool) -> String {
    let mut s = String::from("# gapscope try\n\n");
    let mut lines = preamble(r).into_iter();
    if let Some(first) = lines.next() {
        let _ = writeln!(s, "**{}**\n", md_cell(&first));
    }
    for line in lines {
        let _ = writeln!(s, "{}\n", printable(&line));
    }
    if pictured {
        let _ = writeln!(
            s,
            "![each round's period per cell, BASE and every variant]({})\n",
            crate::report::trial_files::TRIAL_SVG
        );
        for v in r
            .variants
            .iter()
            .filter(|v| crate::analysis::trial::pictured(v))
        {
            let _ = writeln!(
                s,
                "![{}: BASE above the variant, one step of each]({}.svg)\n",
                md_cell(&v.label),
                crate::report::trial_files::variant_picture_stem(&v.label)
            );
        }
    }
    let _ = writeln!(s, "| Variant | Settings | Verdict |\n|---|---|---|");
    for v in &r.variants {
        let what = match &v.failed {
            Some(f) => format!("**failed**: {f}"),
            None => {
                let removed: Vec<&str> = v.cells.iter().filter_map(|c| c.removed).collect();
                let mut w = format!("**{}**", v.word.label());
                if let Some(cause) = removed.first() {
                    w += &format!(" {cause}");
                }
                w
            }
        };
        let _ = writeln!(
            s,
            "| `{}` | `{}` | {} |",
            md_cell(&v.label),
            md_cell(&v.settings),
            md_cell(&what)
        );
    }
    s.push('\n');
    if let Some(line) = ruled_out(r, "`") {
        let _ = writeln!(s, "{line}.\n");
    }
    if let Some(e) = &r.expect_fix {
        let _ = writeln!(
            s,
            "Expected fix `{}`: {}.\n",
            md_cell(&e.label),
            if e.met { "met" } else { "**not met**" }
        );
    }
    for (i, cell) in cell_names(r).iter().enumerate() {
        cell_section(&mut s, r, i, cell);
    }
    if !r.variant_only.is_empty() {
        let _ = writeln!(s, "Not in BASE: {}.\n", md_cell(&r.variant_only.join("; ")));
    }
    let _ = writeln!(s, "{}", crate::analysis::trial::beyond_spread_rule());
    super::printable_report(s)
}

/// BASE's cells, in order (every variant lists them alike).
fn cell_names(r: &TrialReport) -> Vec<String> {
    r.variants
        .first()
        .map(|v| v.cells.iter().map(|c| c.cell.clone()).collect())
        .unwrap_or_default()
}

/// One cell's before/after table and gap changes.
fn cell_section(s: &mut String, r: &TrialReport, i: usize, cell: &str) {
    let rows: Vec<(&VariantVerdict, &CellVerdict)> = r
        .variants
        .iter()
        .filter_map(|v| v.cells.get(i).map(|c| (v, c)))
        .collect();
    let Some((_, first)) = rows.first() else {
        return;
    };
    let rounds = |v: &[f64]| {
        let parts: Vec<String> = v.iter().map(|p| us2(*p)).collect();
        parts.join(", ")
    };
    let _ = writeln!(s, "## {}\n", md_cell(cell));
    let _ = writeln!(
        s,
        "| | period | change | rounds (µs) | verdict | BASE's fix predicts |\n|---|--:|--:|---|---|---|"
    );
    let _ = writeln!(
        s,
        "| BASE | {} | | {} | | |",
        period(first.base_period),
        rounds(&first.base_rounds)
    );
    for (v, c) in &rows {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | **{}** | {} |",
            md_cell(&v.label),
            period(c.variant_period),
            change(c.change_ns),
            rounds(&c.variant_rounds),
            md_cell(&word_text(c)),
            c.predicted
                .as_ref()
                .filter(|_| c.change_ns.is_some())
                .map_or(String::new(), |p| format!(
                    "{} µs ({})",
                    us2_signed(-p.saving_ns),
                    md_cell(p.fix)
                ))
        );
    }
    s.push('\n');
    for (v, c) in rows.iter().filter(|(_, c)| c.change_ns.is_some()) {
        let _ = writeln!(
            s,
            "- `{}`: judged on {}; {}.",
            md_cell(&v.label),
            basis_text(c.basis),
            md_cell(&c.spread)
        );
        let gaps: Vec<String> = c
            .gaps
            .iter()
            .filter(|g| g.moved())
            .map(|g| {
                format!(
                    "{} {} → {} µs{}",
                    g.name,
                    us2(g.base_ns),
                    us2(g.variant_ns),
                    match (&g.evidence, g.removed) {
                        (Some(e), true) => format!(" (gone: {e})"),
                        (None, true) => " (gone)".to_owned(),
                        _ => String::new(),
                    }
                )
            })
            .collect();
        if !gaps.is_empty() {
            let _ = writeln!(s, "  Idle per step by cause: {}.", gaps.join("; "));
        }
    }
    s.push('\n');
}
