#![forbid(unsafe_code)]
//! Markdown for remedies: "What to change" (an analysis) and "Predicted vs realised" (a
//! comparison). The remedies themselves are data in [`crate::analysis::remedy`].

use super::{md_cell, us2};
use crate::analysis::saving::Saving;
use crate::analysis::{Analysis, Comparison};
use std::fmt::Write;

/// "### What to change": per remedy, the cell, the evidence, the action and the predicted
/// saving with its basis.
pub fn remedies_section(a: &Analysis) -> String {
    let mut s = String::from("### What to change\n\n");
    if a.remedies.is_empty() {
        s.push_str("No cause with a known remedy.\n");
        withheld_lines(&mut s, a);
        return s;
    }
    s.push_str(
        "| cell | cause (evidence) | remedy | predicted saving µs a step | basis |\n|---|---|---|--:|---|\n",
    );
    for r in &a.remedies {
        let cell = a.cells.get(r.cell).map_or("—", |c| c.label.as_str());
        let _ = writeln!(
            s,
            "| {} | {} | {}: {} | {} | {} |",
            md_cell(cell),
            md_cell(&r.evidence),
            r.kind.label(),
            md_cell(&r.action),
            r.predicted_saving_ns
                .as_ref()
                .map_or("—".to_owned(), saving),
            md_cell(&r.basis)
        );
    }
    withheld_lines(&mut s, a);
    s
}

/// The remedies not given, each with why (too few steps, no saving predicted, a saving inside
/// its spread or under 1 % of the step, a graphed twin already there).
fn withheld_lines(s: &mut String, a: &Analysis) {
    if a.withheld_remedies.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nNot given ({}):\n",
        crate::analysis::remedy::given_only_when()
    );
    for w in &a.withheld_remedies {
        let cell = a.cells.get(w.remedy.cell).map_or("—", |c| c.label.as_str());
        let _ = writeln!(
            s,
            "- {}: {}: {}",
            md_cell(cell),
            w.remedy.kind.label(),
            md_cell(&w.why)
        );
    }
}

/// "### Predicted vs realised": per matched pair whose base had a predicted saving, the
/// prediction, the measured saving (base − head) and the verdict.
pub fn realised_section(c: &Comparison) -> String {
    let mut s = String::from("### Predicted vs realised\n\n");
    if c.realised.is_empty() {
        s.push_str("No matched cell has a remedy with a predicted saving.\n");
        return s;
    }
    s.push_str(
        "| cell (base → head) | remedy | predicted saving µs | measured saving µs (base − head) | verdict | why |\n|---|---|--:|--:|---|---|\n",
    );
    for r in &c.realised {
        let _ = writeln!(
            s,
            "| {} → {} | {} | {} | {} | {} | {} |",
            md_cell(&r.base_label),
            md_cell(&r.head_label),
            r.kind.label(),
            saving(&r.predicted_ns),
            r.measured_ns.as_ref().map_or("—".to_owned(), saving),
            r.verdict.label(),
            md_cell(&r.why)
        );
    }
    s
}

/// "0.95 [0.92–0.98] n=59"; a negative saving (the change would cost time) with "−"; of too
/// few steps for a spread, "0.95 n=2".
pub(crate) fn saving(v: &Saving) -> String {
    saving_with_unit(v, "")
}

/// [`saving`] with the unit right after the median: "0.95 µs [0.92–0.98] n=59" (the screen).
pub(crate) fn saving_us(v: &Saving) -> String {
    saving_with_unit(v, " µs")
}

fn saving_with_unit(v: &Saving, unit: &str) -> String {
    let us = us2;
    if !v.has_spread() {
        return format!("{}{unit} n={}", us(v.median), v.n);
    }
    format!(
        "{}{unit} [{}–{}] n={}",
        us(v.median),
        us(v.p10),
        us(v.p90),
        v.n
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{self, AnalysisOptions};
    use crate::trace::synthetic::{self, SyntheticCell};

    fn graphed(mode: u8) -> Analysis {
        analysis::analyze(
            &[synthetic::trace(&[SyntheticCell::emu(true, mode, 60)], 11)],
            &["synthetic".to_owned()],
            &AnalysisOptions::default(),
        )
    }

    #[test]
    fn what_to_change_lists_the_remedy_with_its_prediction() {
        let md = remedies_section(&graphed(2));
        assert!(md.starts_with("### What to change\n\n| cell |"), "{md}");
        let row = md
            .lines()
            .find(|l| l.starts_with("| graphed mode=2"))
            .unwrap();
        assert!(
            row.contains("| NCCL graph usage mode 1: create this communicator with `ncclConfig_t.graphUsageMode = 1`"),
            "{row}"
        );
        assert!(row.contains("| 0.96 [0.93–0.99] n=59 |"), "{row}");
        assert!(row.ends_with("dependency latency (0.74 µs) |"), "{row}");
        assert_eq!(
            remedies_section(&graphed(1)),
            "### What to change\n\nNo cause with a known remedy.\n"
        );
    }

    #[test]
    fn predicted_vs_realised_row() {
        let c = analysis::compare::compare(graphed(2), graphed(1), 1.01);
        let md = realised_section(&c);
        let row = md
            .lines()
            .find(|l| l.starts_with("| graphed mode=2"))
            .unwrap();
        assert!(
            row.contains("| 0.96 [0.93–0.99] n=59 | 0.90 [0.85–0.95] n=59 | realised |"),
            "{row}"
        );
        let none = analysis::compare::compare(graphed(1), graphed(1), 1.01);
        assert!(
            realised_section(&none)
                .ends_with("No matched cell has a remedy with a predicted saving.\n")
        );
    }

    #[test]
    fn negative_savings_use_a_real_minus() {
        let v = Saving {
            median: -224.0,
            p10: -416.0,
            p90: 65.0,
            n: 49,
        };
        assert_eq!(saving(&v), "−0.22 [−0.42–0.07] n=49");
    }
}
