#![forbid(unsafe_code)]
//! Markdown reports, shaped as a PR comment. Here the analysis report (`report.md`): inputs
//! (with dropped records and a loud note for synthetic traces), per-workload tables of the step
//! period, the geomean with its range, the largest gaps and their causes, idle time by cause,
//! the kernel-duration check and warnings; and the sections the comparison shares with it.
//! The `compare` reports are in `comparison`.
//!
//! Every time is in µs with two decimals; every figure carries n, the median and the p10–p90
//! spread. A difference inside the run-to-run spread reads "no change".

use super::{md_cell, ratio, stat_us, us2, us2_signed};
use crate::analysis::stats::{Change, Geomean, Stat};
use crate::analysis::{Analysis, CellAnalysis, CellComparison, Regime};
use crate::trace::Source;
use std::collections::BTreeMap;
use std::fmt::Write as _;

mod comparison;

#[cfg(test)]
use comparison::host_bound_caution;
pub(crate) use comparison::{cautions, pair_name, verdict_line};
pub use comparison::{
    comparison_github, comparison_markdown, comparison_markdown_pictured, picture_line,
};

/// The report of one analysis (eager vs graphed of each workload).
pub fn analysis_markdown(a: &Analysis) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## gapscope: graphed vs eager\n");
    // For a PR: the verdict and what to change first, the evidence after, the inputs last.
    verdict_section(&mut s, a);
    let _ = writeln!(s, "{}", super::remedies::remedies_section(a));
    warnings_section(&mut s, &[("", a)]);

    match &a.geomean_ratio {
        Some(g) => {
            let _ = writeln!(s, "{}\n", geomean_line("graphed/eager period", "pair", g));
        }
        None => {
            let _ = writeln!(
                s,
                "No eager ↔ graphed pair with periods on both sides: no geomean.\n"
            );
        }
    }

    sweep_section(&mut s, a);
    reference_section(&mut s, a);

    // One table per workload key, cells in input order.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, c) in a.cells.iter().enumerate() {
        groups.entry(c.workload_key()).or_default().push(i);
    }
    for (key, cells) in &groups {
        let _ = writeln!(s, "### Workload {}\n", key_label(key));
        workload_table(&mut s, a, cells);
        workload_notes(&mut s, a, cells);
        for p in a.regime_pairs.iter().filter(|p| cells.contains(&p.head)) {
            let (Some(base), Some(head)) = (a.cells.get(p.base), a.cells.get(p.head)) else {
                continue;
            };
            pair_section(&mut s, p, base, head);
        }
    }

    for n in &a.not_paired {
        let _ = writeln!(
            s,
            "> `{}`: {}\n",
            a.cells[n.cell].label.replace('`', "'"),
            md_cell(&n.text)
        );
    }
    unpaired_gaps_section(&mut s, a);
    idle_section(&mut s, a);
    host_time_section(&mut s, a);
    inputs_section(&mut s, a, None);
    crate::report::printable_report(s)
}

/// A workload's period table: one row per cell, with its ratio to its eager cell.
fn workload_table(s: &mut String, a: &Analysis, cells: &[usize]) {
    let _ = writeln!(
        s,
        "| cell | regime observed | graph usage mode observed | n | median µs | p10–p90 µs | first launches µs | CUDA-event period µs | graphed/eager | change | in graphs (device time / ops) | replayed ops with a provenance |"
    );
    let _ = writeln!(s, "|---|---|---|--:|--:|--:|--:|--:|--:|---|--:|--:|");
    // With several eager cells in one table, name the one each ratio is against.
    let bases: std::collections::BTreeSet<usize> = a
        .regime_pairs
        .iter()
        .filter(|p| cells.contains(&p.head))
        .map(|p| p.base)
        .collect();
    for &ci in cells {
        let c = &a.cells[ci];
        let pair = a.regime_pairs.iter().find(|p| p.head == ci);
        let is_base = a.regime_pairs.iter().any(|p| p.base == ci);
        let (r, change) = match pair {
            Some(p) => {
                let mut r = p.ratio.map_or("—".to_owned(), ratio);
                if bases.len() > 1 {
                    r += &format!(" vs {}", md_cell(&p.base_label));
                }
                (r, comparison_change_label(p))
            }
            None if is_base => ("base".to_owned(), "—".to_owned()),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let (n, median, spread) = match &c.period {
            Some(p) => (p.n.to_string(), us2(p.median), spread_cell(p)),
            None => ("0".to_owned(), "—".to_owned(), "—".to_owned()),
        };
        let o = &c.observed;
        let share = |v: Option<f64>| v.map_or("—".to_owned(), super::percent);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {n} | {median} | {spread} | {} | {} | {r} | {change} | {} / {} | {} |",
            md_cell(&c.label),
            super::regime_label(o.regime),
            md_cell(o.graph_usage_mode.as_deref().unwrap_or("—")),
            opt_stat_cell(c.first_launch_period.as_ref()),
            opt_stat_cell(c.event_period.as_ref()),
            share(o.graph_coverage),
            share(o.graph_coverage_ops),
            provenance_cell(o.replayed_with_provenance, o.replayed_with_code),
        );
    }
    let _ = writeln!(s);
}

/// The share of replayed ops with a provenance, and of those naming their Python code when the
/// recording read it: "100 % (96 % name their code)".
fn provenance_cell(with_provenance: Option<f64>, with_code: Option<f64>) -> String {
    let share = |v: Option<f64>| v.map_or("—".to_owned(), super::percent);
    match with_code {
        Some(code) => format!(
            "{} ({} name their code)",
            share(with_provenance),
            share(Some(code))
        ),
        None => share(with_provenance),
    }
}

/// The notes under a workload's table: cells without a period, eager work in graphed cells,
/// the trace budget, the tracer's share, and what CUPTI added (as the analysis decided).
fn workload_notes(s: &mut String, a: &Analysis, cells: &[usize]) {
    for &ci in cells {
        let c = &a.cells[ci];
        if let Some(why) = c.why_no_period() {
            let _ = writeln!(
                s,
                "> {}: no period ({}).\n",
                md_cell(&c.label),
                md_cell(&why)
            );
        }
        if let Some(e) = &c.observed.eager_in_graphed {
            let _ = writeln!(
                s,
                "> ⚠️ {}: {} (torch.compile falls back to eager this way when it skips cudagraphs).\n",
                md_cell(&c.label),
                super::eager_in_graphed_label(e)
            );
        }
        if c.observed.compiled_without_graphs {
            let _ = writeln!(
                s,
                "> ⚠️ {}: {}.\n",
                md_cell(&c.label),
                md_cell(&super::compiled_without_graphs_label(c))
            );
        }
        if let Some(l) = &c.observed.left_out {
            let _ = writeln!(
                s,
                "> ⚠️ {}: {}.\n",
                md_cell(&c.label),
                md_cell(&super::left_out_label(l))
            );
        }
    }
    let sampled: Vec<String> = cells
        .iter()
        .filter_map(|&ci| {
            let c = &a.cells[ci];
            c.sampled
                .map(|x| format!("{}: {}", md_cell(&c.label), x.describe()))
        })
        .collect();
    if !sampled.is_empty() {
        let _ = writeln!(
            s,
            "> Trace budget: {}; the rest ran untraced (`gapscope record --trace-budget 0` traces everything).\n",
            sampled.join("; ")
        );
    }
    for &ci in cells {
        let c = &a.cells[ci];
        if let Some(t) = &c.tracer_share {
            // Where the device measured the untraced steps, verdicts are judged on them
            // (`analysis::compare`); host shares only bound what tracing can explain.
            let meaning = match t.clock {
                crate::analysis::tracer_share::ShareClock::Device => {
                    "the untraced period measured on the device's clock in this run; differences between cells are judged on it"
                }
                crate::analysis::tracer_share::ShareClock::Host => {
                    "measured on this run's untraced steps; differences smaller than it are not findings"
                }
            };
            let _ = writeln!(
                s,
                "> Tracer's share, {}: {} — {meaning}.\n",
                md_cell(&c.label),
                t.describe()
            );
        }
    }
    let traced_first_launches = cells
        .iter()
        .any(|&ci| a.cells[ci].first_launches_inflated_by_cupti);
    if traced_first_launches {
        let _ = writeln!(s, "{FIRST_LAUNCH_INFLATION}\n");
    }
    if let Some(note) = cupti_launch_cost_note(a, cells) {
        let _ = writeln!(s, "{note}\n");
    }
}

/// The analysis's headline as a PR reads it first: the worst cell, its largest cause, its fix.
fn verdict_section(s: &mut String, a: &Analysis) {
    let label = |i: usize| {
        a.cells
            .get(i)
            .map_or_else(String::new, |c| md_cell(&c.label))
    };
    let [title, worst, cause_label, cause, fix, host] =
        crate::report::headline_texts(a, &label, &label);
    let cause_label = match cause_label.split_at_checked(1) {
        Some((first, rest)) => first.to_uppercase() + rest,
        None => cause_label,
    };
    let host = if host.is_empty() {
        String::new()
    } else {
        format!("\n- **Host code in its host-bound gaps:** {host}")
    };
    let _ = writeln!(
        s,
        "### Verdict\n\n- **{title}:** {worst}\n- **{cause_label}:** {cause}{host}\n- **Fix:** {fix}\n"
    );
}

/// Cells no comparison covers (one trace, one regime) still show their largest gaps: the op
/// each precedes, its size and its cause.
fn unpaired_gaps_section(s: &mut String, a: &Analysis) {
    let paired = |i: usize| {
        a.regime_pairs
            .iter()
            .chain(&a.mode_pairs)
            .any(|p| p.base == i || p.head == i)
    };
    let unpaired = a
        .cells
        .iter()
        .enumerate()
        .filter(|&(i, _)| !paired(i))
        .map(|(_, c)| c);
    for c in unpaired {
        let gaps: Vec<&crate::analysis::SequenceEntry> = c
            .largest_gaps_listed()
            .into_iter()
            .map(|i| &c.sequence[i])
            .collect();
        if gaps.is_empty() {
            continue;
        }
        let _ = writeln!(s, "#### Largest gaps in {}\n", md_cell(&c.label));
        let _ = writeln!(s, "| gap before | gap µs | cause |");
        let _ = writeln!(s, "|---|--:|---|");
        for e in gaps {
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                op_cell(e),
                stat_us(&e.gap_before),
                md_cell(&e.gap_cause_label)
            );
        }
        let _ = writeln!(s);
    }
}

/// "external event wait +1.00 µs (100 % of the period delta), ..." for one matched pair.
fn explain(m: &CellComparison) -> String {
    let Some(delta) = m.period_delta else {
        return "period delta unknown".to_owned();
    };
    // The period delta decomposed: idle-time changes by cause, op durations, one-sided ops,
    // and the remainder (stream overlap; median of a sum vs sum of medians).
    let gaps: Vec<String> = m
        .gap_growth_by_cause
        .iter()
        .map(|(kind, label, d)| {
            let detail = if label.is_empty() || label == kind.label() {
                String::new()
            } else {
                format!(" ({})", md_cell(label))
            };
            format!("{} {}{detail}", kind.label(), us2_signed(*d))
        })
        .collect();
    let accounted: f64 = m.gap_growth_by_cause.iter().map(|g| g.2).sum::<f64>()
        + m.duration_delta_total
        + m.one_sided_ops_total;
    let mut s = format!("period {} µs = ", us2_signed(delta));
    if gaps.is_empty() {
        s += "gaps unchanged";
    } else {
        s += &format!("gaps: {}", gaps.join(", "));
    }
    s += &format!("; op durations {}", us2_signed(m.duration_delta_total));
    if m.one_sided_ops_moved() {
        s += &format!(
            "; ops in one regime only {}",
            us2_signed(m.one_sided_ops_total)
        );
    }
    s += &format!("; remainder {}", us2_signed(delta - accounted));
    if let Some(d) = &m.graph_difference {
        s += &format!(". The graphs differ by: {}", md_cell(d));
    }
    s
}

fn change_label(c: Option<Change>) -> String {
    c.map_or("—".to_owned(), |c| c.label().to_owned())
}

/// A comparison's change, or why it has none ("no verdict: …").
pub(crate) fn comparison_change_label(m: &crate::analysis::CellComparison) -> String {
    match (&m.change, &m.no_verdict) {
        (None, Some(why)) => format!("no verdict: {why}"),
        (c, _) => change_label(*c),
    }
}

fn geomean_line(what: &str, unit: &str, g: &Geomean) -> String {
    format!(
        "**Geomean {what} over {} {unit}{}: {:.2}× [{:.2}–{:.2}]**",
        g.n,
        if g.n == 1 { "" } else { "s" },
        g.value,
        g.min,
        g.max
    )
}

/// "27.90 [27.82–28.08] n=12", "27.90 n=2" (too few steps for a spread) or "—".
fn opt_stat_cell(s: Option<&Stat>) -> String {
    s.map_or("—".to_owned(), |s| {
        if !s.has_spread() {
            return format!("{} n={}", us2(s.median), s.n);
        }
        format!(
            "{} [{}–{}] n={}",
            us2(s.median),
            us2(s.p10),
            us2(s.p90),
            s.n
        )
    })
}

/// A p10–p90 column: "27.82–28.08", or "—" of too few steps for a spread.
fn spread_cell(s: &Stat) -> String {
    if s.has_spread() {
        format!("{}–{}", us2(s.p10), us2(s.p90))
    } else {
        "—".to_owned()
    }
}

/// What CUPTI's kernel tracing adds to first launches, as measured (see the README).
const FIRST_LAUNCH_INFLATION: &str = "> First launches recorded by CUPTI are inflated by its kernel tracing, which sets up each new executable graph inside its first launch: by more than a traced replay of the same graph pays (measured in benches/README.md, \"Recording: what the recorder enables and what it costs\"). Every first launch outside a step range is traced, whatever `--trace-budget`. Compare first launches with first launches recorded the same way, not with untraced timings.";

/// For CUPTI-recorded graph cells whose steps lose time to host-bound graph launches
/// ([`CellAnalysis::cupti_launch_cost`]): how much of that CUPTI itself may have added.
fn cupti_launch_cost_note(a: &Analysis, cells: &[usize]) -> Option<String> {
    let parts: Vec<String> = cells
        .iter()
        .filter_map(|&ci| {
            let c = &a.cells[ci];
            let cost = c.cupti_launch_cost?;
            Some(format!(
                "{}: {} nodes, host-bound launch gaps of {} µs per step",
                md_cell(&c.label),
                cost.nodes,
                us2(cost.host_bound_per_step),
            ))
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    // The per-node cost itself is the host's and CUPTI's, measured in benches/README.md: a
    // report quotes this run's figures only (the tracer's share lines), never another host's.
    Some(format!(
        "> Graph launches under CUPTI: once CUPTI is attached, every `cudaGraphLaunch` takes longer \
         on the host, in proportion to the graph's nodes, whether or not anything is traced, and \
         more while kernels are traced (measured per node in benches/README.md, \"Recording: what \
         the recorder enables and what it costs\"). Host-bound graph cells here: {}. Where a graph's \
         launch is host-bound, part of that gap is the recorder's, not the program's; the \
         tracer's share lines say how much tracing added in this run where it left launches \
         untraced. Any CUPTI-based profiler (torch.profiler included) attaches CUPTI the same way.",
        parts.join("; ")
    ))
}

fn key_label(key: &str) -> String {
    if key.is_empty() {
        "(no workload keys)".to_owned()
    } else {
        format!("`{}`", key.replace('`', "'"))
    }
}

fn inputs_section(s: &mut String, a: &Analysis, title: Option<&str>) {
    let _ = writeln!(s, "### {}\n", title.unwrap_or("Inputs"));
    let _ = writeln!(
        s,
        "| # | path | source | device | driver | CUDA runtime | CUPTI | NCCL | kernels | dropped records |"
    );
    let _ = writeln!(s, "|--:|---|---|---|---|---|---|---|--:|--:|");
    let opt = |v: &Option<String>| md_cell(v.as_deref().unwrap_or("—"));
    for (i, inp) in a.inputs.iter().enumerate() {
        let source = match inp.source {
            Source::Cupti => "CUPTI",
            Source::Kineto => "Kineto import",
            Source::Nsys => "Nsight Systems import",
            Source::Synthetic => "**synthetic**",
        };
        let _ = writeln!(
            s,
            "| {i} | `{}` | {source} | {} | {} | {} | {} | {} | {} | {} |",
            inp.path.replace('`', "'"),
            opt(&inp.device),
            opt(&inp.versions.driver),
            opt(&inp.versions.cuda_runtime),
            opt(&inp.versions.cupti),
            opt(&inp.versions.nccl),
            inp.kernels,
            inp.dropped_records,
        );
    }
    let _ = writeln!(s);
    let mut notes = Vec::new();
    for (i, inp) in a.inputs.iter().enumerate() {
        match inp.source {
            Source::Synthetic => notes.push(format!(
                "⚠️ **synthetic trace, not recorded on a GPU**: input {i} (`{}`). Its figures \
                 show what gapscope computes, not how any hardware behaves.",
                inp.path.replace('`', "'")
            )),
            Source::Kineto => notes.push(format!(
                "Input {i} was imported from torch.profiler (Kineto): it has no graph DAG, so \
                 gaps inside graph replays cannot be traced to graph nodes."
            )),
            // Its trace notes say what the import inferred.
            Source::Nsys | Source::Cupti => {}
        }
        let libraries = inp.versions.libraries();
        if !libraries.is_empty() {
            let named: Vec<String> = libraries
                .iter()
                .map(|l| {
                    format!(
                        "{} {} (`{}`)",
                        l.library.display_name(),
                        md_cell(l.version.as_deref().unwrap_or("(version unknown)")),
                        md_cell(&l.path).replace('`', "'")
                    )
                })
                .collect();
            notes.push(format!("input {i} loaded {}.", named.join(", ")));
        }
        if inp.dropped_records > 0 {
            notes.push(format!(
                "⚠️ input {i}: {} CUPTI records dropped: ops may be missing and gaps overstated.",
                inp.dropped_records
            ));
        }
        if let Some((lost_work, line)) = super::completeness_line(&inp.completeness) {
            let mark = if lost_work { "⚠️ " } else { "" };
            notes.push(format!("{mark}input {i}: {}", md_cell(&line)));
        }
        for n in &inp.notes {
            notes.push(format!("input {i}: {}", md_cell(n)));
        }
        for n in &inp.damage {
            notes.push(format!("⚠️ input {i} {}", md_cell(n)));
        }
        for line in inp.steps.describe() {
            notes.push(format!("input {i}: {}", md_cell(&line)));
        }
    }
    for n in notes {
        let _ = writeln!(s, "> {n}\n");
    }
}

fn warnings_section(s: &mut String, sides: &[(&str, &Analysis)]) {
    let mut lines = Vec::new();
    for (side, a) in sides {
        for c in &a.cells {
            for m in &c.mismatches {
                lines.push(format!(
                    "⚠️ {side}cell `{}`: requested ≠ observed: {}",
                    c.label.replace('`', "'"),
                    md_cell(m)
                ));
            }
        }
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(s, "### Warnings\n");
    for l in lines {
        let _ = writeln!(s, "- {l}");
    }
    let _ = writeln!(s);
}

/// Eager ↔ graphed detail: kernel-duration check, largest gaps, what explains the delta.
fn pair_section(s: &mut String, p: &CellComparison, base: &CellAnalysis, head: &CellAnalysis) {
    let bname = regime_name(base, "base");
    let hname = regime_name(head, "head");
    let _ = writeln!(
        s,
        "#### {} vs {}\n",
        md_cell(&p.head_label),
        md_cell(&p.base_label)
    );
    if let Some(pairing) = &p.pairing {
        let _ = writeln!(s, "- {}", md_cell(&pairing.text));
    }
    let _ = writeln!(s, "- {}", duration_check(p));
    let _ = writeln!(s, "- {}", explain(p));
    let only_head: Vec<String> = p
        .aligned
        .iter()
        .filter(|a| a.base.is_none() && a.head.is_some())
        .map(|a| super::short_op_name(&a.name))
        .collect();
    let only_base: Vec<String> = p
        .aligned
        .iter()
        .filter(|a| a.head.is_none() && a.base.is_some())
        .map(|a| super::short_op_name(&a.name))
        .collect();
    if !only_head.is_empty() {
        let _ = writeln!(
            s,
            "- ops only in {hname}: {}",
            md_cell(&only_head.join(", "))
        );
    }
    if !only_base.is_empty() {
        let _ = writeln!(
            s,
            "- ops only in {bname}: {}",
            md_cell(&only_base.join(", "))
        );
    }
    let _ = writeln!(s);

    // Largest median gaps before an op in the head's canonical sequence.
    let order = head.largest_gaps_listed();
    if order.is_empty() {
        let _ = writeln!(s, "No gap in the {hname} sequence.\n");
        return;
    }
    let _ = writeln!(
        s,
        "Largest gaps in the {hname} step (median over steps):\n\n| # | gap before | {hname} gap µs | {bname} gap µs | growth µs | cause ({hname}) |"
    );
    let _ = writeln!(s, "|--:|---|--:|--:|--:|---|");
    for &i in &order {
        let e = &head.sequence[i];
        let aligned = p.aligned.iter().find(|a| a.head == Some(i));
        let base_gap = aligned
            .and_then(|a| a.base)
            .and_then(|b| base.sequence.get(b))
            .map(|b| b.gap_before);
        let growth = aligned
            .and_then(|a| a.gap_before_delta)
            .or_else(|| base_gap.map(|b| e.gap_before.median - b.median));
        let _ = writeln!(
            s,
            "| {i} | {} | {} | {} | {} | {} |",
            op_cell(e),
            stat_us(&e.gap_before),
            base_gap.map_or("— (no aligned op)".to_owned(), |b| stat_us(&b)),
            growth.map_or("—".to_owned(), us2_signed),
            md_cell(&e.gap_cause_label),
        );
    }
    let _ = writeln!(s);
}

/// An op in a gap table: its short name as code, then its provenance.
fn op_cell(e: &crate::analysis::SequenceEntry) -> String {
    let name = format!(
        "`{}`",
        md_cell(&super::short_op_name(&e.name)).replace('`', "'")
    );
    match &e.provenance {
        Some(p) => format!("{name} ({})", md_cell(&p.label())),
        None => name,
    }
}

fn regime_name(c: &CellAnalysis, fallback: &'static str) -> &'static str {
    match c.observed.regime {
        Some(Regime::Eager) => "eager",
        Some(Regime::Graphed) => "graphed",
        None => fallback,
    }
}

/// "kernel durations identical within 0.40 % (max |Δ| over 12 aligned kernels)", or the kernels
/// whose durations differ beyond their spread ([`CellComparison::kernel_durations`]).
fn duration_check(p: &CellComparison) -> String {
    let Some(k) = &p.kernel_durations else {
        return "kernel durations: no aligned kernels to compare".to_owned();
    };
    let (n, pct) = (k.aligned, k.max_delta_pct);
    if p.durations_within_spread {
        return format!(
            "kernel durations identical within {pct:.2} % (max |Δ| over {n} aligned kernels)"
        );
    }
    let list: Vec<String> = k
        .differing
        .iter()
        .map(|k| {
            let rel = k
                .share_of_base()
                .map(|x| format!(", {:+.1} %", x * 100.0))
                .unwrap_or_default();
            format!(
                "`{}` {} → {} ({} µs{rel})",
                md_cell(&super::short_op_name(&k.name)).replace('`', "'"),
                stat_us(&k.base),
                stat_us(&k.head),
                us2_signed(k.delta)
            )
        })
        .collect();
    format!(
        "kernel durations differ beyond spread (max |Δ| {pct:.2} % over {n} aligned kernels): {}{}",
        list.join("; "),
        if k.differing_count > k.differing.len() {
            format!("; and {} more", k.differing_count - k.differing.len())
        } else {
            String::new()
        }
    )
}

fn idle_section(s: &mut String, a: &Analysis) {
    if a.cells.is_empty() {
        return;
    }
    let _ = writeln!(s, "### Idle time per step, by cause\n");
    let _ = writeln!(
        s,
        "| cell | cause | median µs | p10–p90 µs | n | evidence (largest) |"
    );
    let _ = writeln!(s, "|---|---|--:|--:|--:|---|");
    let row = |s: &mut String, label: &str, what: &str, st: &Stat, ex: &str| {
        let _ = writeln!(
            s,
            "| {} | {what} | {} | {} | {} | {} |",
            md_cell(label),
            us2(st.median),
            spread_cell(st),
            st.n,
            md_cell(ex)
        );
    };
    for c in &a.cells {
        if let Some(b) = &c.busy {
            row(s, &c.label, "*busy (any stream)*", b, "");
        }
        if let Some(i) = &c.idle {
            row(s, &c.label, "*idle, all causes*", i, "");
        }
        let mut causes: Vec<_> = c.idle_by_cause.iter().collect();
        causes.sort_by(|x, y| y.per_step.median.total_cmp(&x.per_step.median));
        for t in causes {
            let example = if t.example == t.cause.label() {
                ""
            } else {
                t.example.as_str()
            };
            row(s, &c.label, t.cause.label(), &t.per_step, example);
        }
    }
    let _ = writeln!(s);
}

/// "Host time in the gaps": per cell with host samples, all its host-bound gaps together, then
/// each (largest first), with the host code sampled in them. Nothing for a trace without host
/// samples.
fn host_time_section(s: &mut String, a: &Analysis) {
    let cells: Vec<(&CellAnalysis, Vec<&crate::analysis::SequenceEntry>)> = a
        .cells
        .iter()
        .map(|c| {
            let gaps = c.largest_sampled_gaps_listed().into_iter();
            (c, gaps.map(|i| &c.sequence[i]).collect::<Vec<_>>())
        })
        .filter(|(c, gaps)| !gaps.is_empty() || c.host_time.is_some())
        .collect();
    for (c, gaps) in cells {
        let _ = writeln!(
            s,
            "### Host time in the gaps of {}
",
            md_cell(&c.label)
        );
        let _ = writeln!(
            s,
            "| gap before | gap µs | cause | host code sampled in the gap (share of its time) | innermost frame | n |"
        );
        let _ = writeln!(s, "|---|--:|---|---|---|--:|");
        if let Some(h) = &c.host_time {
            let (code, innermost) = host_code_cells(h);
            let _ = writeln!(
                s,
                "| *all host-bound gaps* | {}{} gaps | host-bound | {} | {} | {} |",
                h.per_step
                    .as_ref()
                    .map_or(String::new(), |p| format!("{} a step, ", stat_us(p))),
                h.gaps,
                md_cell(&code),
                md_cell(&innermost),
                h.samples
            );
        }
        for e in gaps {
            let Some(h) = &e.host_time else {
                continue;
            };
            let (code, innermost) = host_code_cells(h);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                op_cell(e),
                stat_us(&e.gap_before),
                md_cell(&e.gap_cause_label),
                md_cell(&code),
                md_cell(&innermost),
                h.samples
            );
        }
        let _ = writeln!(s);
    }
}

/// A host time's code column ("74 % …; 12 % …", or why none is named) and innermost frames.
fn host_code_cells(h: &crate::analysis::host_samples::HostTime) -> (String, String) {
    if h.top.is_empty() {
        return (h.too_few(), String::new());
    }
    let codes: Vec<String> = h.named().iter().map(|c| c.describe()).collect();
    let inner: Vec<&str> = h.named().iter().map(|c| c.innermost.as_str()).collect();
    (codes.join("; "), inner.join("; "))
}

/// The sweep at a glance, per launch pattern: one row per T with eager, graphed mode 2 and
/// graphed mode 1 periods, the gap before the all-gather in each, and how much of the
/// mode 2 − mode 1 difference the external event nodes explain.
fn sweep_section(s: &mut String, a: &Analysis) {
    if a.mode_pairs.is_empty() {
        return;
    }
    let mut by_launch: BTreeMap<(String, Option<String>), Vec<&CellComparison>> = BTreeMap::new();
    for p in &a.mode_pairs {
        let head = &a.cells[p.head];
        // One table per launch and workload: emu's and HT decode's replays are not one sweep.
        let launch = head.launch_pattern().unwrap_or("graph").to_owned();
        let workload = head.requested_str("workload").map(str::to_owned);
        by_launch.entry((launch, workload)).or_default().push(p);
    }
    let gap_before_collective = |c: &CellAnalysis| {
        c.collective()
            .map_or("—".to_owned(), |(_, e)| us2(e.gap_before.median))
    };
    let _ = writeln!(s, "### Graph usage mode 2 vs mode 1, by T\n");
    // The workload is named only where several share the report.
    let workloads: std::collections::BTreeSet<_> =
        by_launch.keys().map(|(_, w)| w.clone()).collect();
    for ((launch, workload), pairs) in by_launch {
        let of_workload = match workload {
            Some(w) if workloads.len() > 1 => format!(" (workload {})", md_cell(&w)),
            _ => String::new(),
        };
        let _ = writeln!(s, "Launch pattern **{}**{of_workload}:\n", md_cell(&launch));
        let _ = writeln!(
            s,
            "| T | eager µs | graphed mode 2 µs | graphed mode 1 µs | mode 2 / eager | mode 1 / eager | mode 2 − mode 1 µs | gap before all-gather µs (eager / mode 2 / mode 1) | explained by the external event nodes |"
        );
        let _ = writeln!(s, "|--:|--:|--:|--:|--:|--:|--:|--:|---|");
        let mut pairs = pairs;
        pairs.sort_by_key(|p| a.cells[p.head].requested_u64("tokens").unwrap_or(0));
        let (mut m2_m1, mut m2_eager, mut m1_eager) = (vec![], vec![], vec![]);
        for p in pairs {
            let (m1, m2) = (&a.cells[p.base], &a.cells[p.head]);
            let eager_of = |graphed: usize| {
                a.regime_pairs
                    .iter()
                    .find(|r| r.head == graphed)
                    .map(|r| (&a.cells[r.base], r.ratio))
            };
            let e2 = eager_of(p.head);
            let e1 = eager_of(p.base);
            if let Some(r) = p.ratio {
                m2_m1.push(r);
            }
            if let Some(r) = e2.and_then(|e| e.1) {
                m2_eager.push(r);
            }
            if let Some(r) = e1.and_then(|e| e.1) {
                m1_eager.push(r);
            }
            let delta = match (p.period_delta, p.change) {
                (Some(d), Some(Change::NoChange)) => format!("{} (no change)", us2_signed(d)),
                (Some(d), _) => us2_signed(d),
                _ => "—".to_owned(),
            };
            let explained = mode_explanation(p);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {delta} | {} / {} / {} | {explained} |",
                m2.requested_u64("tokens")
                    .map_or("—".to_owned(), |t| t.to_string()),
                opt_stat_cell(e2.and_then(|e| e.0.period.as_ref())),
                opt_stat_cell(m2.period.as_ref()),
                opt_stat_cell(m1.period.as_ref()),
                e2.and_then(|e| e.1).map_or("—".to_owned(), ratio),
                e1.and_then(|e| e.1).map_or("—".to_owned(), ratio),
                e2.map_or("—".to_owned(), |e| gap_before_collective(e.0)),
                gap_before_collective(m2),
                gap_before_collective(m1),
            );
        }
        let _ = writeln!(s);
        for (what, v) in [
            ("graphed mode 2 / graphed mode 1", &m2_m1),
            ("graphed mode 2 / eager", &m2_eager),
            ("graphed mode 1 / eager", &m1_eager),
        ] {
            if let Some(g) = Geomean::of(v) {
                let _ = writeln!(s, "- {}", geomean_line(what, "T", &g));
            }
        }
        let _ = writeln!(s);
    }
}

/// The mode table's last column: how much of mode 2 − mode 1 the external event nodes explain,
/// as the analysis judged it ([`CellComparison::external_event_share`],
/// [`CellComparison::graphs_differ_only_by_external`]).
fn mode_explanation(p: &CellComparison) -> String {
    let external = p.gap_growth_of(crate::analysis::CauseKind::ExternalEventWait);
    let others: f64 = p
        .gap_growth_by_cause
        .iter()
        .filter(|g| g.0 != crate::analysis::CauseKind::ExternalEventWait)
        .map(|g| g.2)
        .sum();
    match (p.period_delta, p.change) {
        (_, Some(Change::NoChange)) => format!(
            "no change (inside run-to-run spread); external event wait {}",
            us2_signed(external)
        ),
        (Some(_), _) => {
            let who = p
                .gap_growth_by_cause
                .iter()
                .find(|g| g.0 == crate::analysis::CauseKind::ExternalEventWait)
                .map_or("no external event node".to_owned(), |g| g.1.clone());
            // A part larger than Δ (other parts shrank) is said so, not as a share
            // over 100 %.
            let share = p
                .external_event_share
                .map(|x| {
                    format!(
                        " = {}",
                        crate::report::share_label(x).replace(" of it", " of Δ")
                    )
                })
                .unwrap_or_default();
            let verdict = if p.graphs_differ_only_by_external {
                format!(
                    "; the graphs differ only by {}, so all of Δ follows from them",
                    md_cell(p.graph_difference.as_deref().unwrap_or_default())
                )
            } else {
                String::new()
            };
            format!(
                "external event wait {}{share} — {}; other gaps {}, op durations {}{verdict}",
                us2_signed(external),
                md_cell(&who),
                us2_signed(others),
                us2_signed(p.duration_delta_total)
            )
        }
        _ => "—".to_owned(),
    }
}

/// Figures the workload measured itself (e.g. emu's `%globaltimer` stamps) beside gapscope's.
fn reference_section(s: &mut String, a: &Analysis) {
    let cells: Vec<&CellAnalysis> = a.cells.iter().filter(|c| !c.reference.is_empty()).collect();
    if cells.is_empty() {
        return;
    }
    let _ = writeln!(s, "### The workload's own figures beside gapscope's\n");
    let _ = writeln!(
        s,
        "| cell | gap before the collective, %globaltimer µs | gap before the collective, gapscope µs | gapscope / globaltimer | CUDA-event period µs | gapscope period µs |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|");
    for c in cells {
        let reference_gap = c.reference.get("globaltimer_gap_before_coll_us").copied();
        let ours = c.collective().map(|(_, e)| e.gap_before.median / 1e3);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            md_cell(&c.label),
            reference_gap.map_or("—".to_owned(), |v| format!("{v:.2}")),
            c.collective()
                .map_or("—".to_owned(), |(_, e)| stat_us(&e.gap_before)),
            match (ours, reference_gap) {
                (Some(o), Some(r)) if r > 0.0 => format!("{:.2}", o / r),
                _ => "—".to_owned(),
            },
            c.reference
                .get("cuda_event_period_us")
                .map_or("—".to_owned(), |v| format!("{v:.2}")),
            opt_stat_cell(c.period.as_ref()),
        );
    }
    let _ = writeln!(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn analysis_report_carries_the_figures() {
        let (_, a) = fixtures::fixture();
        let md = analysis_markdown(&a);
        assert!(
            md.contains("synthetic trace, not recorded on a GPU"),
            "{md}"
        );
        assert!(md.contains("| 3 |"), "dropped records column: {md}");
        assert!(md.contains("3 CUPTI records dropped"));
        assert!(md.contains("NVIDIA H200") && md.contains("2.30.7") && md.contains("580.1"));
        assert!(
            md.contains(&format!(
                "input 0 loaded NCCL 2.30.7 (`{}`), cuBLAS 13.1.0 (`/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13`).",
                fixtures::NCCL_PATH
            )),
            "{md}"
        );
        // Geomean with range; graphed/eager = 28/27.
        assert!(
            md.contains("**Geomean graphed/eager period over 1 pair: 1.04× [1.04–1.04]**"),
            "{md}"
        );
        // The period table: graphed row with ratio and change, eager row as base.
        assert!(md.contains("### Workload `T=8,launch=\"replay\"`"), "{md}");
        assert!(
            md.contains("| graphed mode=2 T=8 | graphed | 2 (2 external event nodes, from NCCL) | 3 | 28.00 | 28.00–28.00 | — | 28.00 n=2 | 1.04× | slower |"),
            "{md}"
        );
        assert!(
            md.contains("| eager T=8 | eager | — | 3 | 27.00 | 27.00–27.00 | — | — | base | — |")
        );
        // Kernel durations and top gaps, with the cause.
        assert!(
            md.contains(
                "kernel durations identical within 0.00 % (max |Δ| over 4 aligned kernels)"
            )
        );
        assert!(md.contains("Largest gaps in the graphed step"));
        assert!(md.contains("`ncclDevKernel_AllGather_RING_LL` | 2.50 µs [2.50–2.50] n=4 | 1.50 µs [1.50–1.50] n=4 | +1.00 |"), "{md}");
        assert!(md.contains("NCCL graph usage mode 2 (mixing)"));
        // Idle by cause and warnings.
        assert!(md.contains("### Idle time per step, by cause"));
        assert!(md.contains("| graphed mode=2 T=8 | external event wait | 2.50 |"));
        assert!(
            md.contains("requested ≠ observed: requested graph usage mode 1, observed 2 (2 external event nodes, from NCCL)")
        );
    }

    #[test]
    fn differing_kernels_are_named() {
        let (_, mut a) = fixtures::fixture();
        let p = &mut a.regime_pairs[0];
        p.durations_within_spread = false;
        p.max_duration_delta_pct = Some(5.0);
        p.aligned[3].duration_delta = Some(480.0);
        a.cells[1].sequence[3].duration = Stat::of(&mut [9_980.0, 9_980.0, 9_980.0]).unwrap();
        // The analysis decides which kernels differ; the report prints them.
        let p = &a.regime_pairs[0];
        let check = crate::analysis::cell_comparison::kernel_durations(
            &p.aligned,
            &a.cells[p.base],
            &a.cells[p.head],
            p.max_duration_delta_pct,
            p.durations_within_spread,
        );
        a.regime_pairs[0].kernel_durations = check;
        let md = analysis_markdown(&a);
        assert!(md.contains("kernel durations differ beyond spread (max |Δ| 5.00 % over 4 aligned kernels): `dispatch` 9.50 µs [9.50–9.50] n=4 → 9.98 µs [9.98–9.98] n=3 (+0.48 µs, +5.1 %)"), "{md}");
    }

    #[test]
    fn real_inputs_are_not_called_synthetic() {
        let (_, mut a) = fixtures::fixture();
        a.inputs[0].source = Source::Cupti;
        a.inputs[0].dropped_records = 0;
        let md = analysis_markdown(&a);
        assert!(!md.to_lowercase().contains("synthetic"));
        assert!(md.contains("| CUPTI |"));
        // Dropped records still shown, as 0.
        assert!(md.contains("dropped records |"));
        assert!(md.contains("| 32 | 0 |"), "{md}");
    }

    #[test]
    fn comparison_pass_and_no_change() {
        let c = fixtures::comparison(1.02, vec![]);
        let md = comparison_markdown(&c);
        assert!(
            md.contains("**PASS: no cell slower than 1.02× beyond spread (2 cells compared)**"),
            "{md}"
        );
        // Eager cell identical on both sides: inside spread.
        assert!(md.contains("| eager T=8 | 27.00 [27.00–27.00] n=3 | 27.00 [27.00–27.00] n=3 | 1.00× | no change | ±0.00 |"), "{md}");
        assert!(md.contains("| graphed mode=2 T=8 → graphed mode=1 T=8 | 28.00 [28.00–28.00] n=3 | 26.90 [26.82–26.98] n=3 | 0.96× | faster | −1.10 |"), "{md}");
        assert!(
            md.contains("**Geomean head/base period over 2 cells: 0.98× [0.96–1.00]**"),
            "{md}"
        );
        assert!(
            md.contains(
                "period −1.10 µs = gaps: external event wait −1.10 (external event-wait node"
            ),
            "{md}"
        );
        assert!(md.contains("graphed mode=2 T=512 (base only)"));
        assert!(md.contains("synthetic trace, not recorded on a GPU"));
        assert!(md.contains("Base inputs") && md.contains("Head inputs"));
    }

    #[test]
    fn a_pass_with_slower_rows_counts_them() {
        let mut c = fixtures::comparison(1.02, vec![]);
        c.cells[0].change = Some(crate::analysis::stats::Change::Slower);
        c.cells[0].ratio = Some(1.01);
        let md = comparison_markdown(&c);
        assert!(
            md.contains("**PASS: no cell slower than 1.02× beyond spread (2 cells compared; 1 slower beyond its spread, within 1.02×)**"),
            "{md}"
        );
    }

    #[test]
    fn comparison_fail_names_the_cells() {
        let c = fixtures::comparison(1.02, vec!["graphed T=8: 1.05× (p10–p90 ±0.4 %)".into()]);
        let md = comparison_markdown(&c);
        assert!(md.contains("**FAIL: 1 cell(s) slower than 1.02× beyond spread: graphed T=8: 1.05× (p10–p90 ±0.4 %)**"), "{md}");
        assert!(!md.contains("PASS"));
    }

    #[test]
    fn a_slowdown_grown_in_host_launch_bound_gaps_carries_a_caution_everywhere() {
        let mut c = fixtures::comparison(1.02, vec![]);
        assert_eq!(
            host_bound_caution(&c),
            None,
            "the fixture's change is a graph change"
        );
        // HEAD 7 µs slower, 5 of them gaps where the host launched later (as when one run's
        // processes got the host's slower speed): 71 %.
        let m = &mut c.cells[1];
        m.change = Some(crate::analysis::stats::Change::Slower);
        m.period_delta = Some(7_000.0);
        m.gap_growth_by_cause = vec![
            (
                crate::analysis::CauseKind::GraphLaunchHostBound,
                "graph launch host-bound".into(),
                5_000.0,
            ),
            (
                crate::analysis::CauseKind::ExternalEventWait,
                "external event wait".into(),
                1_000.0,
            ),
        ];
        assert!(c.cells[1].host_bound_slowdown());
        c.host_bound_slowdowns = crate::analysis::compare::host_bound_slowdowns(&c.cells);
        let line = host_bound_caution(&c).expect("a caution");
        assert!(line.contains("(71 %)"), "{line}");
        assert!(comparison_markdown(&c).contains(&format!("> {line}")));
        assert!(comparison_github(&c, None).contains(&format!("> {line}")));
        let screen = crate::report::summary::comparison_summary(&c, None);
        assert!(screen.contains(&line), "{screen}");
        // Mostly the graph: no caution.
        c.cells[1].gap_growth_by_cause[0].2 = 2_000.0;
        assert!(!c.cells[1].host_bound_slowdown());
        c.host_bound_slowdowns = crate::analysis::compare::host_bound_slowdowns(&c.cells);
        assert_eq!(host_bound_caution(&c), None);
    }

    #[test]
    fn with_a_picture_the_github_table_folds_under_it_and_compare_md_shows_it() {
        let c = fixtures::comparison(1.02, vec![]);
        let plain = comparison_github(&c, None);
        assert!(!plain.contains("<details>") && !plain.contains("!["));
        let pictured = comparison_github(&c, Some("out/compare.svg"));
        let picture = pictured.find("](out/compare.svg)").expect("the picture");
        let details = pictured
            .find("<details><summary>2 cell(s) compared</summary>")
            .unwrap();
        let table = pictured.find("| cell | base µs |").unwrap();
        assert!(picture < details && details < table, "{pictured}");
        assert!(pictured.trim_end().ends_with("</details>"), "{pictured}");
        assert!(comparison_markdown_pictured(&c).contains("](compare.svg)"));
        assert!(!comparison_markdown(&c).contains("](compare.svg)"));
    }
}
