#![forbid(unsafe_code)]
//! What the terminal shows: a screen, not a report. The verdict, the mode comparison, the cells
//! with their periods, the largest gaps with their causes, and where the full report is.

use super::{md_cell, op_with_provenance, ratio, stat_us, us2, us2_signed};
use crate::analysis::{Analysis, CellAnalysis, Comparison};
use std::fmt::Write as _;

/// Cells listed before "… and N more".
const MAX_CELLS: usize = 12;
/// Lines a list of remedies or pairs shows before "… and N more": what fits a screen.
const MAX_LIST_LINES: usize = 6;

/// The end of a summary: where the full report is, or how to get it; `files`: what `-o DIR`
/// writes for this command.
fn full_report_line(full_report: Option<&str>, files: &str) -> String {
    match full_report {
        Some(path) => format!("Full report: {path}"),
        None => format!("Full report: add -o DIR ({files}), or --full to print it"),
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
            p.ratio
                .map(|r| format!(", {} of {}", ratio(r), alias(p.base)))
        })
        .unwrap_or_default();
    let mode = c
        .observed
        .graph_usage_mode
        .as_deref()
        .map(|m| format!(" mode {m}"))
        .unwrap_or_default();
    let sampled = c
        .sampled
        .map(|sm| format!(" ({})", sm.describe()))
        .unwrap_or_default();
    let untraced = c
        .untraced_period
        .as_ref()
        .map(|u| format!("; untraced {}", stat_us(u)))
        .unwrap_or_default();
    let budgeted = a
        .inputs
        .get(c.trace)
        .is_some_and(|i| i.trace_budget.is_some());
    let tracing = match &c.tracer_share {
        // "tracing ×R on …": its figures are the report's.
        Some(t) => format!("; {}", t.describe_short()),
        // Under a budget, a cell none of whose work went untraced has nothing to set its
        // traced period against.
        None if budgeted && c.sampled.is_none() => {
            "; every step traced: what tracing adds is not measured in this run".to_owned()
        }
        None => String::new(),
    };
    // The coverage a regime implies (eager 0 %, graphed 100 %) goes without saying here.
    let graphs = c
        .observed
        .graph_coverage_unimplied()
        .map(|g| {
            let ops = c
                .observed
                .graph_coverage_ops
                .map(|o| format!(", {} of ops", super::percent(o)))
                .unwrap_or_default();
            format!("; graphs ran {} of device time{ops}", super::percent(g))
        })
        .unwrap_or_default();
    format!(
        "  {}: {}{mode}, {period}{sampled}{vs}{untraced}{tracing}{graphs}",
        alias_named(a, i),
        super::regime_label(c.observed.regime),
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
    let untraced = |within: &str| {
        p.untraced_period_delta
            .map(|d| format!(" (between untraced steps: Δ {} µs{within})", us2_signed(d)))
            .unwrap_or_default()
    };
    // Analysis calls a difference the tracer's only where the untraced one is inside its
    // spread (`within_tracer_effect`).
    if p.within_tracer_effect == Some(true) {
        format!(
            " — within what tracing adds to a step: not a finding{}",
            untraced(", within its spread")
        )
    } else {
        untraced("")
    }
}

/// Labels can be whole command lines; a screen needs the start.
fn short_label(label: &str) -> String {
    short_label_max(label, 70)
}

/// [`short_label`] of at most `max` characters, cut after a whole word ("graph ids not…", not
/// "graph ids not record…"), unless that would keep less than half of it.
fn short_label_max(label: &str, max: usize) -> String {
    let label = super::printable(label);
    if label.chars().count() <= max {
        return label.into_owned();
    }
    let kept: String = label.chars().take(max - 1).collect();
    let next = label.chars().nth(max - 1);
    let cut = if next.is_some_and(char::is_whitespace) {
        kept.as_str()
    } else {
        match kept.rfind(char::is_whitespace) {
            Some(space) if kept[..space].chars().count() >= max / 2 => &kept[..space],
            _ => kept.as_str(),
        }
    };
    // No dangling separator before the ellipsis ("ids (…", "ids,…").
    cut.trim_end_matches(|c: char| c.is_whitespace() || "([{,;:—-".contains(c))
        .to_owned()
        + "…"
}

/// The largest gaps over every cell: the op each precedes, its size and its cause.
fn largest_gaps(a: &Analysis, s: &mut String) {
    let gaps = a.largest_gaps();
    if gaps.is_empty() {
        return;
    }
    let _ = writeln!(s, "Largest gaps (median per step, before the op named):");
    for (i, p) in gaps {
        let e = &a.cells[i].sequence[p];
        let _ = writeln!(
            s,
            "  {}: {} before {} — {}",
            alias(i),
            stat_us(&e.gap_before),
            op_with_provenance(e),
            e.gap_cause_label
        );
        if let Some(h) = &e.host_time {
            let _ = writeln!(s, "      host: {}", h.describe());
        }
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
            (pairing.basis != crate::analysis::PairBasis::Workload)
                .then(|| format!("  {} ↔ {}: {}", alias(p.head), alias(p.base), pairing.text))
        })
        .chain(
            a.not_paired
                .iter()
                .map(|n| format!("  {}: {}", alias(n.cell), n.text)),
        )
        .collect();
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(s, "Pairs without a shared marker:");
    for l in lines.iter().take(MAX_LIST_LINES) {
        let _ = writeln!(s, "{l}");
    }
    if lines.len() > MAX_LIST_LINES {
        let _ = writeln!(
            s,
            "  … and {} more (see the report)",
            lines.len() - MAX_LIST_LINES
        );
    }
}

/// The widest line a screen prints: longer ones are wrapped at a space, continued indented.
pub const SCREEN_WIDTH: usize = 120;

/// A cell's alias on a screen: "C3" for the third cell, defined once in the cells list (and in
/// the headline, for its cell).
fn alias(i: usize) -> String {
    format!("C{}", i + 1)
}

/// "C3 graphed mode=2 emu fresh": an alias with its (shortened) name, where it is defined.
fn alias_named(a: &Analysis, i: usize) -> String {
    a.cells.get(i).map_or_else(
        || alias(i),
        |c| format!("{} {}", alias(i), short_label_max(&c.label, 40)),
    )
}

/// The three lines the screen leads with: the worst cell, its largest cause, its fix; then the
/// host code sampled in its host-bound gaps when that cause is host-bound.
fn headline(a: &Analysis, s: &mut String) {
    let [title, worst, cause_label, cause, fix, host] =
        super::headline_texts(a, &|i| alias_named(a, i), &alias);
    let _ = writeln!(s, "{title}: {worst}");
    let _ = writeln!(s, "  {cause_label}: {cause}");
    let _ = writeln!(s, "  fix: {fix}");
    // After the three lines that answer: the host code behind a host-bound cause.
    if !host.is_empty() {
        let _ = writeln!(s, "  host code in its host-bound gaps: {host}");
    }
}

/// Mode 2 vs mode 1, one line a pair.
fn mode_lines(a: &Analysis, s: &mut String) {
    if a.mode_pairs.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "Mode 2 vs mode 1 (graphs with vs without external event nodes):"
    );
    for p in &a.mode_pairs {
        use crate::analysis::CauseKind;
        let external = p.gap_growth_of(CauseKind::ExternalEventWait);
        // Under tracing a replay can turn host-bound: the host's part of a longer period,
        // and what is left of it on the device ([`CellComparison::host_launch_split`]).
        let host_part = p
            .host_launch_part()
            .map(|(host, rest)| {
                format!(
                    "; host-bound launch gaps {} µs, the rest {} µs",
                    us2_signed(host),
                    us2_signed(rest)
                )
            })
            .unwrap_or_default();
        let change = super::markdown::comparison_change_label(p);
        let (b, h) = (&a.cells[p.base], &a.cells[p.head]);
        let who = format!("{} vs {}", alias(p.head), alias(p.base));
        if p.judged_untraced
            && let (Some(bu), Some(hu), Some(d)) = (
                &b.untraced_period,
                &h.untraced_period,
                p.untraced_period_delta,
            )
        {
            let share = p
                .external_event_share
                .map(|x| format!(", {}", super::share_label(x)))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  {who}: untraced mode 1 {} → mode 2 {} µs ({change}, Δ {} µs); traced Δ {} µs: external event wait {} µs{share}{host_part}{}",
                us2(bu.median),
                us2(hu.median),
                us2_signed(d),
                p.period_delta.map_or("—".into(), us2_signed),
                us2_signed(external),
                tracer_effect_note(p)
            );
            continue;
        }
        let median = |c: &CellAnalysis| c.period.as_ref().map_or("—".into(), |x| us2(x.median));
        let _ = writeln!(
            s,
            "  {who}: mode 1 {} → mode 2 {} µs ({change}, Δ {} µs; external event wait {} µs{host_part}){}",
            median(b),
            median(h),
            p.period_delta.map_or("—".into(), us2_signed),
            us2_signed(external),
            tracer_effect_note(p)
        );
    }
}

/// "What to change": the fixes given (each with its predicted saving), and the cells whose
/// figures are too few to judge one.
fn what_to_change(a: &Analysis, s: &mut String) {
    // Where the figures are too few to judge, the screen says so instead of a remedy.
    let unjudged: Vec<&crate::analysis::remedy::Withheld> = a
        .withheld_remedies
        .iter()
        .filter(|w| w.too_few_steps)
        .collect();
    if !unjudged.is_empty() {
        let _ = writeln!(s, "No remedy judged (too few steps):");
    }
    for w in unjudged.iter().take(MAX_LIST_LINES) {
        let _ = writeln!(
            s,
            "  {}: no remedy ({}): {}",
            alias(w.remedy.cell),
            w.remedy.kind.label(),
            w.why
        );
    }
    if !a.remedies.is_empty() {
        let _ = writeln!(s, "What to change:");
    }
    for r in a.remedies.iter().take(MAX_LIST_LINES) {
        let Some(v) = &r.predicted_saving_ns else {
            continue;
        };
        let _ = writeln!(
            s,
            "  {}: {} — predicted saving {} a step ({})",
            alias(r.cell),
            r.action,
            super::remedies::saving_us(v),
            r.basis
        );
    }
}

/// One line a cell: its alias and name, regime, period, ratio to its twin, sampling.
fn cell_lines(a: &Analysis, s: &mut String) {
    let _ = writeln!(s, "Cells (step period median [p10–p90] n):");
    for (i, c) in a.cells.iter().enumerate().take(MAX_CELLS) {
        let _ = writeln!(s, "{}", cell_line(a, i, c));
    }
    if a.cells.len() > MAX_CELLS {
        let _ = writeln!(s, "  … and {} more cells", a.cells.len() - MAX_CELLS);
    }
}

/// Notes on the inputs and warnings about cells.
fn notes(a: &Analysis, s: &mut String) {
    for (i, input) in a.inputs.iter().enumerate() {
        if let Some((lost_work, line)) = super::completeness_line(&input.completeness) {
            let mark = if lost_work { "⚠" } else { "Note:" };
            let _ = writeln!(s, "{mark} input {i}: {line}");
        }
        if input.source == crate::trace::Source::Nsys {
            // What the import inferred, and what its graph mode cannot show.
            for n in &input.notes {
                let _ = writeln!(s, "Note: input {i} (Nsight Systems import): {n}");
            }
        }
        if input.source == crate::trace::Source::Kineto {
            let _ = writeln!(
                s,
                "Note: input {i} (Kineto import) records no graph node creation: its replayed ops have no provenance"
            );
        }
    }
    for (i, c) in a.cells.iter().enumerate() {
        let mut warn = |text: String| {
            let _ = writeln!(s, "⚠ {}: {text}", alias_named(a, i));
        };
        if let Some(e) = &c.observed.eager_in_graphed {
            warn(super::eager_in_graphed_label(e));
        }
        if c.observed.compiled_without_graphs {
            warn(super::compiled_without_graphs_label(c));
        }
        if let Some(l) = &c.observed.left_out {
            warn(super::left_out_label(l));
        }
    }
}

/// A summary fit for a terminal: every line of `text` at most [`SCREEN_WIDTH`] characters, a
/// longer one broken at the last space that fits (never between a number and its unit), its
/// rest indented 4 more than the line. The summaries are made of whole lines; the commands
/// print them through this.
pub fn fit_screen(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        let more = " ".repeat(indent + 4);
        let mut rest: &str = line;
        let mut first = true;
        loop {
            let room = if first {
                SCREEN_WIDTH
            } else {
                SCREEN_WIDTH - more.len()
            };
            let lead = if first { "" } else { more.as_str() };
            if rest.chars().count() <= room {
                out.push_str(lead);
                out.push_str(rest);
                break;
            }
            let cut = rest
                .char_indices()
                .take_while(|(i, _)| rest[..*i].chars().count() <= room)
                .filter(|(_, c)| *c == ' ')
                .map(|(i, _)| i)
                // A unit stays with its number.
                .filter(|&i| !rest[i + 1..].starts_with("µs") && !rest[i + 1..].starts_with('%'))
                .filter(|&i| i > indent)
                .last()
                .unwrap_or_else(|| rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i));
            out.push_str(lead);
            out.push_str(rest[..cut].trim_end());
            out.push('\n');
            rest = rest[cut..].trim_start();
            first = false;
        }
    }
    out
}

/// The terminal summary of `analyze` and `run`: the answer first (the worst cell, its largest
/// cause, its fix), then the cells one line each, then the evidence.
pub fn analysis_summary(a: &Analysis, full_report: Option<&str>) -> String {
    let mut s = String::new();
    headline(a, &mut s);
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
    what_to_change(a, &mut s);
    steps_found(a, &mut s);
    cell_lines(a, &mut s);
    if let Some(g) = &a.geomean_ratio {
        let _ = writeln!(
            s,
            "Graphed/eager period, geomean over {} pair(s): {:.2}× [{:.2}–{:.2}]",
            g.n, g.value, g.min, g.max
        );
    }
    mode_lines(a, &mut s);
    notes(a, &mut s);
    pairings(a, &mut s);
    largest_gaps(a, &mut s);
    let files = "report.md, report.json, Perfetto, SVG";
    let _ = write!(s, "{}", full_report_line(full_report, files));
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
        if let Some(h) = &m.host_code_change {
            let _ = writeln!(s, "      host code changed most: {}", h.describe());
        }
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
    let files = crate::report::output_set::comparison_files(c);
    let line = match full_report {
        // The report first; the rest of what was written beside it.
        Some(path) => format!("Full report: {path} (with {})", files[1..].join(", ")),
        None => full_report_line(None, &files.join(", ")),
    };
    let _ = write!(s, "{line}");
    crate::report::printable_report(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_labels_are_cut_after_a_whole_word() {
        let label = "graph G1 launches (graph ids not recorded, 12 ops)";
        for max in 12..label.chars().count() {
            let short = short_label_max(label, max);
            assert!(short.chars().count() <= max, "{max}: {short}");
            let kept = short.strip_suffix('…').expect("an ellipsis");
            // What is kept is the label's start, ending on a whole word.
            assert!(label.starts_with(kept), "{max}: {short}");
            let rest = &label[kept.len()..];
            assert!(
                rest.starts_with(|c: char| !c.is_alphanumeric()),
                "{max}: cut mid-word: {short}"
            );
        }
        // One long word is cut where it must be.
        let word = "x".repeat(60);
        assert_eq!(short_label_max(&word, 40).chars().count(), 40);
        assert_eq!(short_label_max("short", 40), "short");
    }
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
            s.contains("C1: ") && s.contains("n=19 before coll (← ncclAllGather) — "),
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
