#![forbid(unsafe_code)]
//! `gapscope compare BASE HEAD`: exit 3 when HEAD is slower beyond `--threshold`.

use super::analyze::{note_damage, note_wrote};
use super::args::CompareArgs;
use super::inputs::{analyze, expand, load_with_steps, select};
use super::{Failure, bad_input, check_output_folder, print_stdout};
use gapscope::analysis;
use gapscope::report;
use std::process::ExitCode;

pub fn command(a: &CompareArgs) -> Result<ExitCode, Failure> {
    analysis::compare::check_threshold(a.threshold).map_err(Failure::bad_input)?;
    if let Some(dir) = &a.output {
        check_output_folder(dir)?;
    }
    let steps = a.steps.step_range.as_deref();
    let (mut base_traces, base_names) = load_with_steps(&expand(&a.base)?, steps)?;
    let (mut head_traces, head_names) = load_with_steps(&expand(&a.head)?, steps)?;
    // The fixes BASE's cells are judged by come from all of BASE, selected or not.
    let whole_base = a
        .base_select
        .is_some()
        .then(|| analyze(&base_traces, &base_names));
    select(&mut base_traces, a.base_select.as_deref(), "--base-select")?;
    select(&mut head_traces, a.head_select.as_deref(), "--head-select")?;
    let (mut base, head) = (
        analyze(&base_traces, &base_names),
        analyze(&head_traces, &head_names),
    );
    if let Some(whole) = &whole_base {
        analysis::compare::adopt_remedies(&mut base, whole);
    }
    note_damage(&base);
    note_damage(&head);
    let comparison = analysis::compare::compare(base, head, a.threshold);
    if comparison.cells.is_empty() {
        // A CI gate must not pass on nothing.
        return Err(bad_input(format!(
            "BASE and HEAD have no cell in common: nothing compared ({})",
            comparison.unmatched.join("; ")
        )));
    }
    // compare.md shows the picture only where it is written beside it.
    let pictured = a.output.is_some()
        && report::output_set::comparison_files(&comparison)
            .contains(&report::output_set::COMPARISON_SVG);
    let reports = report::output_set::comparison_reports(&comparison, pictured);
    if a.print.json() {
        print_stdout(reports.json())?;
    } else if a.print.full {
        print_stdout(reports.markdown())?;
    } else if a.format.is_some() {
        let picture = a.output.as_ref().filter(|_| pictured).map(|d| {
            d.join(report::output_set::COMPARISON_SVG)
                .display()
                .to_string()
        });
        print_stdout(&report::markdown::comparison_github(
            &comparison,
            picture.as_deref(),
        ))?;
    } else {
        let path = a
            .output
            .as_ref()
            .map(|d| d.join("compare.md").display().to_string());
        print_stdout(&report::summary::fit_screen(
            &report::summary::comparison_summary(&comparison, path.as_deref()),
        ))?;
    }
    if let Some(dir) = &a.output {
        let written =
            report::output_set::write_comparison_set(dir, &reports, [&base_traces, &head_traces])?;
        note_wrote("", dir, &written, None);
    }
    Ok(super::exit::of_comparison(!comparison.breached.is_empty()))
}
