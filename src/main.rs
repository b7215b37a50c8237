//! gapscope command line: parses arguments, calls the library, maps errors to exit codes.
//!
//! Exit codes: 0 success; 1 runtime failure (GPU, libraries); 2 bad input (usage, unreadable or
//! malformed trace); 3 `compare` found a slowdown beyond `--threshold`.

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use gapscope::analysis::{self, Analysis, AnalysisOptions};
use gapscope::report;
use gapscope::trace::{self, Trace, TraceError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gapscope",
    version,
    about = "Where did my graphed CUDA step lose time, and did the fix remove it?",
    long_about = "gapscope records a step eagerly and as a replayed CUDA graph under CUPTI, aligns the two \
kernel timelines, attributes every idle gap to a cause from the graph DAG and API records \
(e.g. the external event wait NCCL graph usage mode 2 puts in front of a captured ncclAllGather), \
and writes Perfetto, Markdown, JSON and SVG outputs.",
    after_help = "Examples:\n  gapscope run                      # record on the GPU, or analyse the bundled H200 traces\n  gapscope analyze traces/*.json -o out\n  gapscope compare mode2.json mode1.json --threshold 1.02"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyse trace files: steps, eager ↔ graphed alignment, gaps by cause.
    #[command(
        after_help = "Example:\n  gapscope analyze traces/emu-h200.json -o out   # writes out/report.md, report.json, trace.perfetto.json, step.svg"
    )]
    Analyze {
        /// Trace files (gapscope JSON).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Compare BASE with HEAD (e.g. mode 2 vs mode 1, or main vs a PR); exit 3 when HEAD is
    /// slower than --threshold beyond the run-to-run spread.
    #[command(
        after_help = "Example:\n  gapscope compare main.json pr.json --threshold 1.02 || echo 'graphed step regressed'"
    )]
    Compare {
        /// Trace file or folder of trace files (*.json) for the base.
        base: PathBuf,
        /// Trace file or folder of trace files for the head.
        head: PathBuf,
        /// Largest allowed head/base period ratio (1.02 = 2 % slower).
        #[arg(long, default_value_t = 1.02)]
        threshold: f64,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Export one output format of an analysis to a file.
    #[command(
        after_help = "Example:\n  gapscope export traces/emu-h200.json --format perfetto -o emu.perfetto.json --align-step 5"
    )]
    Export {
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Perfetto)]
        format: Format,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
        /// Perfetto/SVG: put step K of every cell at the same origin.
        #[arg(long)]
        align_step: Option<usize>,
    },
    /// Run the HT-decode experiment on the GPU (eager and graphed, graph usage modes, T sweep)
    /// and analyse it; without a GPU, analyse the bundled H200 traces instead.
    #[command(
        after_help = "Example:\n  gapscope run -o out            # GPU: records live; no GPU: bundled traces\n  gapscope run --tokens 1,8,64 --modes 1,2 --steps 300"
    )]
    Run(RunArgs),
    /// Check the HT-decode kernels against the CPU reference on the GPU.
    #[command(after_help = "Example:\n  gapscope check-kernels --tokens 1,8,512")]
    CheckKernels {
        #[arg(long, value_delimiter = ',', default_value = "1,8,512")]
        tokens: Vec<usize>,
    },
    /// Trace an unmodified CUDA program through CUDA injection: one trace per process.
    #[command(
        after_help = "Example:\n  gapscope record -o traces --step-range step -- python examples/torch_step.py\n  gapscope analyze traces/trace-*.json"
    )]
    Record(gapscope::record::RecordArgs),
    /// Merge per-rank traces (trace-0.json, trace-1.json…) into one Perfetto trace and one
    /// report with a row per rank, the slowest rank highlighted.
    #[command(
        after_help = "Example:\n  gapscope merge traces/trace-*.json -o out   # out/report.md, report.json, trace.perfetto.json"
    )]
    Merge {
        /// Per-rank trace files, or folders of them (*.json).
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// Folder for report.md, report.json and trace.perfetto.json.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print the JSON report on stdout instead of the Markdown summary.
        #[arg(long)]
        json: bool,
        /// Clock alignment; default: collectives when the traces name several hosts, else none.
        #[arg(long, value_enum)]
        align: Option<gapscope::merge::Align>,
    },
}

#[derive(Args, Clone)]
struct OutputArgs {
    /// Folder for report.md, report.json, trace.perfetto.json and step.svg.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Print the JSON report on stdout instead of the Markdown summary.
    #[arg(long)]
    json: bool,
    /// Perfetto/SVG: put step K of every cell at the same origin.
    #[arg(long)]
    align_step: Option<usize>,
    /// Use the host ranges of this name (NVTX ranges, torch record_function) as the steps.
    #[arg(long, value_name = "NAME")]
    step_range: Option<String>,
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Output folder.
    #[arg(short, long, default_value = "gapscope-out")]
    output: PathBuf,
    /// Print the JSON report on stdout instead of the Markdown summary.
    #[arg(long)]
    json: bool,
    /// Analyse the bundled traces even when a GPU is present.
    #[arg(long)]
    bundled: bool,
    #[command(flatten)]
    sweep: gapscope::runner::SweepArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Perfetto,
    Markdown,
    Json,
    Svg,
}

/// A failure with its exit code; displayed as one line.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        let error = e.into();
        let code = if error
            .downcast_ref::<TraceError>()
            .is_some_and(|e| !matches!(e, TraceError::Write { .. }))
        {
            2
        } else {
            1
        };
        Failure { code, error }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(f) => {
            // One line: the outermost context and its causes joined (a cause that a message
            // already ends with, as "cannot read: <io error>", is not repeated).
            let mut line = String::new();
            for cause in f.error.chain().map(|e| e.to_string()) {
                if line.ends_with(&cause) {
                    continue;
                }
                if !line.is_empty() {
                    line.push_str(": ");
                }
                line.push_str(&cause);
            }
            eprintln!("gapscope: error: {line}");
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.command {
        Command::Analyze { traces, out } => {
            let mut timer = PhaseTimer::from_env();
            // A folder stands for its trace files (as HTA's trace_dir).
            let mut paths = Vec::new();
            for t in &traces {
                paths.extend(expand(t)?);
            }
            let (traces, names) = load_with_steps(&paths, out.step_range.as_deref())?;
            timer.lap("load");
            let analysis = analyze(&traces, &names);
            timer.lap("analysis");
            write_outputs(&traces, &analysis, &out)?;
            print_summary(&analysis, out.json);
            timer.lap("reports");
            Ok(ExitCode::SUCCESS)
        }
        Command::Compare {
            base,
            head,
            threshold,
            out,
        } => {
            if !(threshold.is_finite() && threshold > 0.0) {
                return Err(Failure {
                    code: 2,
                    error: anyhow::anyhow!(
                        "--threshold must be a positive ratio such as 1.02, got {threshold}"
                    ),
                });
            }
            let steps = out.step_range.as_deref();
            let (base_traces, base_names) = load_with_steps(&expand(&base)?, steps)?;
            let (head_traces, head_names) = load_with_steps(&expand(&head)?, steps)?;
            let comparison = analysis::align::compare(
                analyze(&base_traces, &base_names),
                analyze(&head_traces, &head_names),
                threshold,
            );
            let md = report::markdown::comparison_markdown(&comparison);
            let json = report::json::comparison_json(&comparison);
            if let Some(dir) = &out.output {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                trace::write_atomically(&dir.join("compare.md"), md.as_bytes())?;
                trace::write_atomically(&dir.join("compare.json"), json.as_bytes())?;
            }
            println!("{}", if out.json { json } else { md });
            Ok(if comparison.breached.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        Command::Export {
            traces,
            format,
            output,
            align_step,
        } => {
            let (traces, names) = load(&traces)?;
            let analysis = analyze(&traces, &names);
            export(&traces, &analysis, format, &output, align_step)?;
            eprintln!("wrote {}", output.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => run_experiment(args),
        Command::CheckKernels { tokens } => {
            gapscope::cupti::ensure_cuda_driver()?;
            let summary = gapscope::runner::htdecode::run_correctness_check(&tokens)
                .map_err(|e| anyhow::anyhow!(e))?;
            println!("{summary}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Record(args) => Ok(gapscope::record::run(&args)?),
        Command::Merge {
            traces,
            output,
            json,
            align,
        } => {
            let paths: Vec<PathBuf> = traces
                .iter()
                .map(|p| expand(p))
                .collect::<Result<Vec<_>, _>>()?
                .concat();
            let (traces, names) = load(&paths)?;
            let merged = gapscope::merge::merge(traces, names, align).map_err(|e| Failure {
                code: 2,
                error: e.into(),
            })?;
            if let Some(dir) = &output {
                merged.write_outputs(dir)?;
                eprintln!(
                    "wrote {}/{{report.md,report.json,trace.perfetto.json}}",
                    dir.display()
                );
            }
            println!(
                "{}",
                if json {
                    merged.json()
                } else {
                    merged.markdown()
                }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// With `GAPSCOPE_TIMINGS` set, the wall time of each phase on stderr (for benchmarks).
struct PhaseTimer(Option<std::time::Instant>);

impl PhaseTimer {
    fn from_env() -> PhaseTimer {
        PhaseTimer(std::env::var_os("GAPSCOPE_TIMINGS").map(|_| std::time::Instant::now()))
    }

    fn lap(&mut self, phase: &str) {
        if let Some(since) = &mut self.0 {
            eprintln!("gapscope: {phase}: {:.3} s", since.elapsed().as_secs_f64());
            *since = std::time::Instant::now();
        }
    }
}

fn analyze(traces: &[Trace], names: &[String]) -> Analysis {
    analysis::analyze(traces, names, &AnalysisOptions::default())
}

/// A file, or every `*.json` file of a folder (sorted).
fn expand(path: &Path) -> Result<Vec<PathBuf>, Failure> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        // torch.profiler also writes `.json.gz`, which the import reads as is.
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".json") || name.ends_with(".json.gz")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Failure {
            code: 2,
            error: anyhow::anyhow!(
                "{}: no *.json or *.json.gz trace files in this folder",
                path.display()
            ),
        });
    }
    Ok(files)
}

fn load(paths: &[PathBuf]) -> Result<(Vec<Trace>, Vec<String>), Failure> {
    load_with_steps(paths, None)
}

/// Loads traces; with `step_range`, plain ranges of that name (NVTX ranges, torch
/// `record_function`s) become the steps.
fn load_with_steps(
    paths: &[PathBuf],
    step_range: Option<&str>,
) -> Result<(Vec<Trace>, Vec<String>), Failure> {
    let mut traces = Vec::with_capacity(paths.len());
    for p in paths {
        if gapscope::import::is_kineto_file(p) {
            // torch.profiler (Kineto) Chrome trace: imported; bad input exits 2 as for traces.
            let imported = gapscope::import::read_kineto(p).map_err(|e| Failure {
                code: 2,
                error: e.into(),
            })?;
            traces.push(imported);
        } else {
            traces.push(trace::read_trace(p)?);
        }
    }
    if let Some(name) = step_range {
        for (t, p) in traces.iter_mut().zip(paths) {
            if t.mark_steps(name) == 0 {
                eprintln!("gapscope: note: {}: no range named '{name}'", p.display());
            }
        }
    }
    Ok((
        traces,
        paths.iter().map(|p| p.display().to_string()).collect(),
    ))
}

fn write_outputs(traces: &[Trace], analysis: &Analysis, out: &OutputArgs) -> Result<(), Failure> {
    let Some(dir) = &out.output else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (format, name) in [
        (Format::Markdown, "report.md"),
        (Format::Json, "report.json"),
        (Format::Perfetto, "trace.perfetto.json"),
        (Format::Svg, "step.svg"),
    ] {
        export(traces, analysis, format, &dir.join(name), out.align_step)?;
    }
    eprintln!(
        "wrote {}/{{report.md,report.json,trace.perfetto.json,step.svg}} (open the .perfetto.json at https://ui.perfetto.dev)",
        dir.display()
    );
    Ok(())
}

fn export(
    traces: &[Trace],
    analysis: &Analysis,
    format: Format,
    output: &Path,
    align_step: Option<usize>,
) -> Result<(), Failure> {
    match format {
        Format::Markdown => trace::write_atomically(
            output,
            report::markdown::analysis_markdown(analysis).as_bytes(),
        )?,
        Format::Json => {
            trace::write_atomically(output, report::json::analysis_json(analysis).as_bytes())?
        }
        Format::Perfetto => {
            let opts = report::perfetto::PerfettoOptions {
                align_steps: align_step,
            };
            trace::write_atomically_with(output, |w| {
                report::perfetto::write_chrome_trace(w, traces, analysis, &opts)
            })?
        }
        Format::Svg => {
            // The pair where the graph loses most against eager: what a reader wants to see.
            let Some(pair) = analysis.regime_pairs.iter().max_by(|a, b| {
                let d = |p: &analysis::CellComparison| p.period_delta.unwrap_or(f64::MIN);
                d(a).total_cmp(&d(b))
            }) else {
                // Nothing to draw side by side; an SVG of nothing would mislead.
                if matches!(format, Format::Svg) && output.extension().is_some_and(|e| e == "svg") {
                    eprintln!("note: no eager/graphed pair in the input: no SVG written");
                }
                return Ok(());
            };
            let step = align_step.unwrap_or(1);
            trace::write_atomically(
                output,
                report::svg::step_svg(traces, analysis, pair, step).as_bytes(),
            )?
        }
    }
    Ok(())
}

fn print_summary(analysis: &Analysis, json: bool) {
    if json {
        println!("{}", report::json::analysis_json(analysis));
    } else {
        println!("{}", report::markdown::analysis_markdown(analysis));
    }
}

/// Per-rank traces of one run, by folder (one folder per mode set): each folder with more than
/// one rank gets a merged report in `<folder>/merged` (a row per rank, the slowest marked).
fn merge_ranks(recorded: &[(PathBuf, Trace)]) -> Result<(), Failure> {
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
        let merged = gapscope::merge::merge(traces, names, None).map_err(|e| Failure {
            code: 1,
            error: e.into(),
        })?;
        let out = dir.join("merged");
        merged.write_outputs(&out)?;
        eprintln!(
            "gapscope: ranks compared in {}/{{report.md,report.json,trace.perfetto.json}}",
            out.display()
        );
    }
    Ok(())
}

fn run_experiment(args: RunArgs) -> Result<ExitCode, Failure> {
    let gpu = !args.bundled && gapscope::runner::gpu_available();
    let (traces, names) = if gpu {
        let recorded = gapscope::runner::run_sweep(&args.sweep, &args.output)?;
        if args.sweep.rank_process {
            // A rank started by `gapscope run`: its parent analyses every rank.
            return Ok(ExitCode::SUCCESS);
        }
        merge_ranks(&recorded)?;
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
        eprintln!(
            "gapscope: {}: analysing the bundled traces instead",
            if args.bundled {
                "--bundled"
            } else {
                "no CUDA GPU found"
            }
        );
        gapscope::bundled::traces()?
    };
    let analysis = analyze(&traces, &names);
    let out = OutputArgs {
        output: Some(args.output.clone()),
        json: args.json,
        align_step: None,
        step_range: None,
    };
    write_outputs(&traces, &analysis, &out)?;
    print_summary(&analysis, args.json);
    Ok(ExitCode::SUCCESS)
}
