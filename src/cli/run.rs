#![forbid(unsafe_code)]
//! `gapscope run`: the sweep on the GPU (recorded by [`gapscope::workload`]), or the bundled
//! traces without one; then the analysis set, and a merged report per multi-rank folder.

use super::analyze::{note_damage, note_wrote, print_summary, write_outputs};
use super::args::{OutputArgs, RunArgs};
use super::inputs::analyze;
use super::{Failure, check_output_folder, note, remove_temporaries_on_signal};
use gapscope::analysis::merge;
use gapscope::report;
use gapscope::trace::Trace;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `given`: the sweep flags given on the command line ([`super::args::run_sweep_flags_given`]).
pub fn command(args: RunArgs, given: &[String]) -> Result<ExitCode, Failure> {
    let sweep = args.sweep_options().map_err(Failure::bad_input)?;
    sweep.validate().map_err(Failure::bad_input)?;
    check_output_folder(&args.output)?;
    let gpu = !args.bundled && gapscope::experiment::gpu_available();
    if !gpu {
        remove_temporaries_on_signal();
    }
    let (traces, names) = if gpu {
        // The sweep writes its own per-cell traces (src/experiment/).
        let recorded = gapscope::experiment::run_sweep(&sweep, &args.output)?;
        if sweep.rank_process {
            // A rank started by `gapscope run`: its parent analyses every rank.
            return Ok(ExitCode::SUCCESS);
        }
        merge_ranks(&recorded, args.perfetto.format())?;
        // The report is rank 0's (every mode set); the merged reports compare the ranks.
        let rank0: Vec<(PathBuf, Trace)> = recorded
            .into_iter()
            .filter(|(_, t)| t.metadata.rank == 0)
            .collect();
        if rank0.is_empty() {
            // One rank of several started by a launcher: rank 0 reports on its own trace.
            return Ok(ExitCode::SUCCESS);
        }
        let names = rank0.iter().map(|(p, _)| p.display().to_string()).collect();
        (rank0.into_iter().map(|(_, t)| t).collect(), names)
    } else {
        note(&format!(
            "{}: analysing the bundled traces instead",
            if args.bundled {
                "--bundled"
            } else {
                "no CUDA GPU found"
            }
        ));
        if !given.is_empty() {
            let flags: Vec<String> = given
                .iter()
                .map(|id| format!("--{}", id.replace('_', "-")))
                .collect();
            note(&format!(
                "{} ignored: they choose what a GPU sweep records, and the bundled traces are already recorded",
                flags.join(", ")
            ));
        }
        gapscope::trace::bundled::traces()?
    };
    let analysis = analyze(&traces, &names);
    note_damage(&analysis);
    let out = OutputArgs {
        output: Some(args.output.clone()),
        print: args.print,
        origin: Default::default(),
        steps: Default::default(),
    };
    let reports = report::output_set::analysis_reports(&analysis);
    print_summary(&reports, &out)?;
    write_outputs(&traces, &reports, &out, args.perfetto.format())?;
    Ok(ExitCode::SUCCESS)
}

/// Per-rank traces of one run, by folder (one folder per mode set): each folder with more than
/// one rank gets a merged report in `<folder>/merged` (a row per rank, the slowest marked).
fn merge_ranks(
    recorded: &[(PathBuf, Trace)],
    perfetto: report::PerfettoFormat,
) -> Result<(), Failure> {
    let mut by_set: std::collections::BTreeMap<PathBuf, (Vec<Trace>, Vec<String>)> =
        Default::default();
    for (path, trace) in recorded.iter().filter(|(_, t)| t.metadata.world > 1) {
        let set = by_set
            .entry(path.parent().unwrap_or(Path::new(".")).to_owned())
            .or_default();
        set.0.push(trace.clone());
        set.1.push(path.display().to_string());
    }
    for (dir, (traces, names)) in by_set {
        // Our own recordings failing to merge is a runtime failure (exit 1), not bad input.
        let merged = merge::merge(traces, names, None).map_err(Failure::runtime)?;
        let out = dir.join("merged");
        let written = report::output_set::write_merge_set(
            &out,
            &report::output_set::merge_reports(&merged),
            Some(perfetto),
        )?;
        note_wrote("ranks compared: ", &out, &written, None);
    }
    Ok(())
}
