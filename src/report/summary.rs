#![forbid(unsafe_code)]
//! What the terminal shows: a screen, not a report. The verdict, the mode comparison, the cells
//! with their periods, the largest gaps with their causes, and where the full report is.

use super::{md_cell, op_with_provenance, ratio, stat_us, us2, us2_signed};
use crate::analysis::{Analysis, CellAnalysis, Comparison};
use std::fmt::Write as _;

/// Cells listed before "… and N more".
const MAX_CELLS: usize = 12;
/// Largest gaps listed.
const MAX_GAPS: usize = 6;

/// The end of a summary: where the full report is, or how to get it.
fn full_report_line(full_report: Option<&str>) -> String {
    match full_report {
        Some(path) => format!("Full report: {path}"),
        None => {
            "Full report: add -o DIR (report.md, report.json, Perfetto, SVG), or --full to print it"
                .to_owned()
        }
    }
}

fn cell_line(a: &Analysis, i: usize, c: &CellAnalysis) -> String {
    let period = match (&c.period, c.why_no_period()) {
        (Some(p), _) => stat_us(p),
        (None, why) => format!("no period ({})", why.unwrap_or_default()),
    };
    let vs = a
        .regime_pairs
        .iter()
        .find(|p| p.head == i)
        .and_then(|p| {
            let base = &a.cells[p.base];
            let of = match &base.found {
                Some(_) => cell_name(base),
                None => "eager".to_owned(),
            };
            p.ratio.map(|r| format!(", {} of {of}", ratio(r)))
        })
        .unwrap_or_default();
    let mode = c
        .observed
        .graph_usage_mode
        .as_deref()
        .map(|m| format!(", mode {m}"))
        .unwrap_or_default();
    let sampled = c
        .sampled
        .map(|s| format!(" ({})", s.describe()))
        .unwrap_or_default();
    let coverage = super::coverage_label(&c.observed)
        .map(|l| format!("; {l}"))
        .unwrap_or_default();
    let budgeted = a
        .inputs
        .get(c.trace)
        .is_some_and(|i| i.trace_budget.is_some());
    let untraced = c
        .untraced_period
        .as_ref()
        .map(|u| format!("; untraced {}", stat_us(u)))
        .unwrap_or_default();
    let tracing = match &c.tracer_share {
        Some(t) => format!("; {}", t.describe()),
        // Under a budget, a cell none of whose work went untraced has nothing to set its
        // traced period against.
        None if budgeted && c.sampled.is_none() => {
            "; every step traced: what tracing adds is not measured in this run".to_owned()
        }
        None => String::new(),
    };
    format!(
        "  {} — {}{mode}: {period}{sampled}{untraced}{vs}{coverage}{tracing}",
        short_label(&c.label),
        super::regime_label(c.observed.regime)
    )
}

/// " — within the tracer's effect" when tracing added at least this difference to a step, with
/// the difference between the cells' untraced steps when both were measured; when the verdict
/// was judged on those, whether tracing made the traced steps host-bound.
fn tracer_effect_note(p: &crate::analysis::CellComparison) -> String {
    if p.judged_untraced {
        return if p.traced_host_bound {
            " — tracing made the traced steps host-bound, which hides part of the device-side cost in them: the verdict is the untraced periods'".to_owned()
        } else {
            String::new()
        };
    }
    let untraced = p
        .untraced_period_delta
        .map(|d| format!(" (between untraced steps: Δ {} µs)", us2_signed(d)))
        .unwrap_or_default();
    if p.within_tracer_effect == Some(true) {
        format!(" — within what tracing adds to a step: not a finding{untraced}")
    } else {
        untraced
    }
}

/// A cell's name in a line about it: "eager loop E1", "graph G1 replays", else its label.
fn cell_name(c: &CellAnalysis) -> String {
    match (&c.found, &c.graph_group) {
        (Some(f), _) => format!("eager loop E{}", f.ordinal),
        (None, Some(_)) => short_label(c.label.split(" (").next().unwrap_or(&c.label)),
        (None, None) => short_label(&c.label),
    }
}

/// Labels can be whole command lines; a screen needs the start.
fn short_label(label: &str) -> String {
    const MAX: usize = 70;
    let label = super::printable(label);
    if label.chars().count() > MAX {
        label.chars().take(MAX - 1).collect::<String>() + "…"
    } else {
        label.into_owned()
    }
}

/// The largest gaps over every cell: the op each precedes, its size and its cause.
fn largest_gaps(a: &Analysis, s: &mut String) {
    let mut gaps: Vec<(&CellAnalysis, &crate::analysis::SequenceEntry)> = a
        .cells
        .iter()
        .flat_map(|c| {
            c.sequence
                .iter()
                .filter(|e| e.gap_before.median > 0.0)
                .map(move |e| (c, e))
        })
        .collect();
    // One stable sort over every cell: ties stay in cell, then sequence, order.
    gaps.sort_by(|x, y| y.1.gap_before.median.total_cmp(&x.1.gap_before.median));
    if gaps.is_empty() {
        return;
    }
    let _ = writeln!(s, "Largest gaps (median per step, before the op named):");
    for (c, e) in gaps.into_iter().take(MAX_GAPS) {
        let _ = writeln!(
            s,
            "  {} before {} in {} — {}",
            stat_us(&e.gap_before),
            op_with_provenance(e),
            short_label(&c.label),
            e.gap_cause_label
        );
    }
}

/// How each input's eager steps were found, when not from markers, and the step range to pass.
fn steps_found(a: &Analysis, s: &mut String) {
    for (i, input) in a.inputs.iter().enumerate() {
        for line in input.steps.describe() {
            let whose = if a.inputs.len() > 1 {
                format!("[input {i}] ")
            } else {
                String::new()
            };
            let _ = writeln!(s, "{whose}{line}");
        }
    }
}

/// Pairs that rest on the kernels (no shared marker) say so, and how sure they are;
/// graphed cells left unpaired say why.
fn pairings(a: &Analysis, s: &mut String) {
    let lines: Vec<String> = a
        .regime_pairs
        .iter()
        .filter_map(|p| {
            let pairing = p.pairing.as_ref()?;
            (pairing.basis != crate::analysis::PairBasis::Workload).then(|| {
                format!(
                    "  {} ↔ {}: {}",
                    cell_name(&a.cells[p.head]),
                    cell_name(&a.cells[p.base]),
                    pairing.text
                )
            })
        })
        .chain(
            a.not_paired
                .iter()
                .map(|n| format!("  {}: {}", cell_name(&a.cells[n.cell]), n.text)),
        )
        .collect();
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(s, "Pairs without a shared marker:");
    for l in lines.iter().take(MAX_GAPS) {
        let _ = writeln!(s, "{l}");
    }
    if lines.len() > MAX_GAPS {
        let _ = writeln!(
            s,
            "  … and {} more (see the report)",
            lines.len() - MAX_GAPS
        );
    }
}

/// The terminal summary of `analyze` and `run`.
pub fn analysis_summary(a: &Analysis, full_report: Option<&str>) -> String {
    let mut s = String::new();
    let devices: Vec<&str> = a
        .inputs
        .iter()
        .filter_map(|i| i.device.as_deref())
        .collect();
    let dropped: u64 = a.inputs.iter().map(|i| i.dropped_records).sum();
    let _ = writeln!(
        s,
        "gapscope: {} cell(s) from {} input(s){}{}",
        a.cells.len(),
        a.inputs.len(),
        devices
            .first()
            .map(|d| format!(" on {d}"))
            .unwrap_or_default(),
        if dropped > 0 {
            format!(" — {dropped} records dropped by CUPTI (see the report)")
        } else {
            String::new()
        }
    );
    if let Some(g) = &a.geomean_ratio {
        let _ = writeln!(
            s,
            "Graphed/eager period, geomean over {} pair(s): {:.2}× [{:.2}–{:.2}]",
            g.n, g.value, g.min, g.max
        );
    }
    if !a.mode_pairs.is_empty() {
        let _ = writeln!(
            s,
            "Mode 2 vs mode 1 (graphs with vs without external event nodes):"
        );
        for p in &a.mode_pairs {
            use crate::analysis::CauseKind;
            let external = p.gap_growth_of(CauseKind::ExternalEventWait);
            // Under tracing a replay can turn host-bound: the host's part of the difference,
            // and what is left of it on the device (when the host's part is a part of it).
            let host = p.gap_growth_of(CauseKind::GraphLaunchHostBound)
                + p.gap_growth_of(CauseKind::HostLaunchBound);
            let host_part = match p.period_delta {
                Some(d) if host != 0.0 && (0.0..=1.0).contains(&(host / d)) => format!(
                    "; host-bound launch gaps {} µs, the rest {} µs",
                    us2_signed(host),
                    us2_signed(d - host)
                ),
                _ => String::new(),
            };
            let change = super::markdown::comparison_change_label(p);
            let (b, h) = (&a.cells[p.base], &a.cells[p.head]);
            if p.judged_untraced
                && let (Some(bu), Some(hu), Some(d)) = (
                    &b.untraced_period,
                    &h.untraced_period,
                    p.untraced_period_delta,
                )
            {
                let share = p
                    .period_delta
                    .filter(|&t| t > 0.0 && external > 0.0)
                    .map(|t| format!(", {:.0} % of it", 100.0 * external / t))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {}: untraced mode 1 {} → mode 2 {} µs ({change}, Δ {} µs); traced Δ {} µs: external event wait {} µs{share}{host_part}{}",
                    short_label(&h.label),
                    us2(bu.median),
                    us2(hu.median),
                    us2_signed(d),
                    p.period_delta.map_or("—".into(), us2_signed),
                    us2_signed(external),
                    tracer_effect_note(p)
                );
                continue;
            }
            let _ = writeln!(
                s,
                "  {}: mode 1 {} → mode 2 {} µs ({}, Δ {} µs; external event wait {} µs{host_part}){}",
                short_label(&a.cells[p.head].label),
                a.cells[p.base]
                    .period
                    .as_ref()
                    .map_or("—".into(), |x| us2(x.median)),
                a.cells[p.head]
                    .period
                    .as_ref()
                    .map_or("—".into(), |x| us2(x.median)),
                change,
                p.period_delta.map_or("—".into(), us2_signed),
                us2_signed(external),
                tracer_effect_note(p)
            );
        }
    }
    // A remedy whose measured saving is not positive would not help here: the report keeps it
    // with its figures, the screen leaves it out.
    let helpful: Vec<&crate::analysis::remedy::Remedy> = a
        .remedies
        .iter()
        .filter(|r| {
            r.predicted_saving_ns
                .as_ref()
                .is_none_or(|v| v.median > 0.0)
        })
        .collect();
    // Where the figures are too few to judge, the screen says so instead of a remedy.
    let unjudged: Vec<&crate::analysis::remedy::Withheld> = a
        .withheld_remedies
        .iter()
        .filter(|w| w.too_few_steps)
        .collect();
    if !helpful.is_empty() || !unjudged.is_empty() {
        let _ = writeln!(s, "What to change:");
    }
    for w in unjudged.iter().take(MAX_GAPS) {
        let cell = a
            .cells
            .get(w.remedy.cell)
            .map_or("—".to_owned(), |c| short_label(&c.label));
        let _ = writeln!(
            s,
            "  {cell}: no remedy ({}): {}",
            w.remedy.kind.label(),
            w.why
        );
    }
    if !helpful.is_empty() {
        for r in helpful.iter().take(MAX_GAPS) {
            let cell = a
                .cells
                .get(r.cell)
                .map_or("—".to_owned(), |c| short_label(&c.label));
            let _ = match &r.predicted_saving_ns {
                Some(v) => writeln!(
                    s,
                    "  {cell}: {} — predicted saving {} µs a step ({})",
                    r.action,
                    super::remedies::saving(v),
                    r.basis
                ),
                None => writeln!(s, "  {cell}: {} — {}", r.action, r.basis),
            };
        }
    }
    steps_found(a, &mut s);
    let _ = writeln!(s, "Cells (step period median [p10–p90] n):");
    for (i, c) in a.cells.iter().enumerate().take(MAX_CELLS) {
        let _ = writeln!(s, "{}", cell_line(a, i, c));
    }
    if a.cells.len() > MAX_CELLS {
        let _ = writeln!(s, "  … and {} more cells", a.cells.len() - MAX_CELLS);
    }
    for (i, input) in a.inputs.iter().enumerate() {
        if let Some((lost_work, line)) = super::completeness_line(&input.completeness) {
            let mark = if lost_work { "⚠" } else { "Note:" };
            let _ = writeln!(s, "{mark} input {i}: {line}");
        }
        if input.source == crate::trace::Source::Kineto {
            let _ = writeln!(
                s,
                "Note: input {i} (Kineto import) records no graph node creation: its replayed ops have no provenance"
            );
        }
    }
    for c in &a.cells {
        if let Some(e) = &c.observed.eager_in_graphed {
            let _ = writeln!(
                s,
                "⚠ {}: {}",
                short_label(&c.label),
                super::eager_in_graphed_label(e)
            );
        }
        if c.observed.compiled_without_graphs {
            let _ = writeln!(
                s,
                "⚠ {}: {}",
                short_label(&c.label),
                super::compiled_without_graphs_label(c)
            );
        }
        if let Some(l) = &c.observed.left_out {
            let _ = writeln!(
                s,
                "⚠ {}: {}",
                short_label(&c.label),
                super::left_out_label(l)
            );
        }
    }
    pairings(a, &mut s);
    largest_gaps(a, &mut s);
    let _ = write!(s, "{}", full_report_line(full_report));
    crate::report::printable_report(s)
}

/// The terminal summary of `compare`: the verdict first.
pub fn comparison_summary(c: &Comparison, full_report: Option<&str>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "gapscope compare: {}", super::markdown::verdict_line(c));
    if let Some(g) = &c.geomean_ratio {
        let _ = writeln!(
            s,
            "Head/base period, geomean over {} cell(s): {:.2}× [{:.2}–{:.2}]",
            g.n, g.value, g.min, g.max
        );
    }
    let _ = writeln!(s, "Cells (base → head median µs, head/base, change):");
    for m in c.cells.iter().take(MAX_CELLS) {
        let med = |a: &Analysis, i: usize| {
            a.cells
                .get(i)
                .and_then(|x| x.period.as_ref())
                .map_or("—".to_owned(), |p| us2(p.median))
        };
        let top = m
            .largest_change()
            .map(|(part, ns)| {
                let what = super::period_part_label(part);
                format!("; largest change {} µs: {what}", us2_signed(ns))
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {}: {} → {} ({}, {}){top}{}",
            short_label(&super::markdown::pair_name(m)),
            med(&c.base, m.base),
            med(&c.head, m.head),
            m.ratio.map_or("—".to_owned(), ratio),
            super::markdown::comparison_change_label(m),
            tracer_effect_note(m),
        );
    }
    if c.cells.len() > MAX_CELLS {
        let _ = writeln!(s, "  … and {} more cells", c.cells.len() - MAX_CELLS);
    }
    for line in super::markdown::cautions(c) {
        let _ = writeln!(s, "{line}");
    }
    if !c.realised.is_empty() {
        let _ = writeln!(s, "Predicted vs realised savings (a step):");
        for r in c.realised.iter().take(MAX_CELLS) {
            // The figures are on the line: the reason only where there are none to read.
            use crate::analysis::remedy::Realisation;
            let why = match r.verdict {
                Realisation::NotApplied | Realisation::Unknown => format!(": {}", r.why),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "  {}: {} predicted {}, measured {} — {}{why}",
                short_label(&r.base_label),
                r.kind.label(),
                super::remedies::saving_us(&r.predicted_ns),
                r.measured_ns
                    .as_ref()
                    .map_or("—".to_owned(), super::remedies::saving_us),
                r.verdict.label(),
            );
        }
    }
    if !c.unmatched.is_empty() {
        let _ = writeln!(
            s,
            "Not compared: {}",
            md_cell(&short_label(&c.unmatched.join("; ")))
        );
    }
    let _ = write!(s, "{}", full_report_line(full_report));
    crate::report::printable_report(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{self, AnalysisOptions};
    use crate::report::short_op_name;
    use crate::trace::synthetic::{self, SyntheticCell};

    fn analyze(t: &crate::trace::Trace) -> Analysis {
        analysis::analyze(
            std::slice::from_ref(t),
            &["t".to_owned()],
            &AnalysisOptions::default(),
        )
    }

    #[test]
    fn a_summary_is_a_screen_with_the_verdicts_and_the_largest_gaps() {
        let a = analyze(&synthetic::emu_experiment(40));
        let s = analysis_summary(&a, Some("out/report.md"));
        assert!(s.lines().count() < 30, "{s}");
        assert!(s.contains("Mode 2 vs mode 1"), "{s}");
        assert!(s.contains("Largest gaps"), "{s}");
        assert!(s.contains("external event-wait node"), "{s}");
        assert!(s.ends_with("Full report: out/report.md"), "{s}");
    }

    #[test]
    fn a_cell_without_a_partner_still_shows_its_largest_gaps() {
        let t = synthetic::trace(&[SyntheticCell::emu(true, 2, 20)], 1);
        let a = analyze(&t);
        assert!(a.regime_pairs.is_empty());
        let s = analysis_summary(&a, None);
        assert!(
            s.contains("n=19 before coll (← ncclAllGather) in graphed mode=2"),
            "{s}"
        );
        assert_eq!(
            a.cells[0].observed.regime,
            Some(crate::analysis::Regime::Graphed)
        );
    }

    #[test]
    fn kernel_names_are_shortened_as_profilers_do() {
        assert_eq!(
            short_op_name(
                "void at::native::vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::BFloat16>, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<c10::BFloat16>, std::array<char*, 2ul>)"
            ),
            "at::native::vectorized_elementwise_kernel<…>(…)"
        );
        assert_eq!(short_op_name("spin"), "spin");
        assert_eq!(
            short_op_name("nvjet_sm90_tst_128x64"),
            "nvjet_sm90_tst_128x64"
        );
        assert!(short_op_name(&"k".repeat(300)).chars().count() <= 80);
    }
}
