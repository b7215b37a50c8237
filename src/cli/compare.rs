#![forbid(unsafe_code)]
//! `gapscope compare BASE HEAD`: exit 3 when HEAD is slower beyond `--threshold`.

use super::args::CompareArgs;
use super::inputs::{analyze, expand, load_with_steps, select};
use super::{Failure, bad_input, print_stdout};
use gapscope::analysis;
use gapscope::report;
use std::process::ExitCode;

pub fn command(a: &CompareArgs) -> Result<ExitCode, Failure> {
    let CompareArgs {
        base,
        head,
        threshold,
        format,
        base_select,
        head_select,
        out,
    } = a;
    let (threshold, base_select, head_select) =
        (*threshold, base_select.as_deref(), head_select.as_deref());
    if !(threshold.is_finite() && threshold > 0.0) {
        return Err(Failure {
            code: 2,
            error: anyhow::anyhow!(
                "--threshold must be a positive ratio such as 1.02, got {threshold}"
            ),
        });
    }
    let steps = out.step_range.as_deref();
    let (mut base_traces, base_names) = load_with_steps(&expand(base)?, steps)?;
    let (mut head_traces, head_names) = load_with_steps(&expand(head)?, steps)?;
    select(&mut base_traces, base_select, "--base-select")?;
    select(&mut head_traces, head_select, "--head-select")?;
    let comparison = analysis::align::compare(
        analyze(&base_traces, &base_names),
        analyze(&head_traces, &head_names),
        threshold,
    );
    if comparison.cells.is_empty() {
        // A CI gate must not pass on nothing.
        return Err(bad_input(format!(
            "BASE and HEAD have no cell in common: nothing compared ({})",
            comparison.unmatched.join("; ")
        )));
    }
    if let Some(dir) = &out.output {
        report::output::write_comparison_set(dir, &comparison)?;
    }
    print_stdout(&if out.json {
        report::json::comparison_json(&comparison)
    } else if out.full {
        report::markdown::comparison_markdown(&comparison)
    } else if format.is_some() {
        report::markdown::comparison_github(&comparison)
    } else {
        let path = out
            .output
            .as_ref()
            .map(|d| d.join("compare.md").display().to_string());
        report::summary::comparison_summary(&comparison, path.as_deref())
    })?;
    Ok(if comparison.breached.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
