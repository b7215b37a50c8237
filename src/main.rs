//! gapscope command line: parses arguments, calls the library, maps errors to exit codes.
//!
//! Exit codes: 0 success; 1 runtime failure (GPU, libraries); 2 bad input (usage, unreadable or
//! malformed trace); 3 `compare` found a slowdown beyond `--threshold`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use gapscope::analysis::{self, Analysis, AnalysisOptions};
use gapscope::report;
use gapscope::report::output::OutputSet;
use gapscope::trace::{self, Trace, TraceError};
use std::io::Write;
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
        /// `github`: print the PR table (Markdown for a pull-request comment or
        /// $GITHUB_STEP_SUMMARY) instead of the summary.
        #[arg(long, value_enum)]
        format: Option<CompareFormat>,
        /// Only the base cells whose request has KEY=VALUE (e.g. graph_usage_mode=2).
        #[arg(long, value_name = "KEY=VALUE")]
        base_select: Option<String>,
        /// Only the head cells whose request has KEY=VALUE (e.g. graph_usage_mode=1).
        #[arg(long, value_name = "KEY=VALUE")]
        head_select: Option<String>,
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
    Record(gapscope::record::launch::RecordArgs),
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
        align: Option<gapscope::analysis::merge::Align>,
    },
}

#[derive(Args, Clone)]
struct OutputArgs {
    /// Folder for report.md, report.json, trace.perfetto.json and step.svg.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Print the JSON report on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// Print the whole Markdown report on stdout instead of the summary.
    #[arg(long)]
    full: bool,
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
    /// Print the JSON report on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// Print the whole Markdown report on stdout instead of the summary.
    #[arg(long)]
    full: bool,
    /// Analyse the bundled traces even when a GPU is present.
    #[arg(long)]
    bundled: bool,
    #[command(flatten)]
    sweep: gapscope::workload::SweepArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum CompareFormat {
    Github,
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
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

/// Help and version go to stdout (exit 0); a usage error is one line on stderr (exit 2).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("gapscope: error: {first} (see --help)");
            ExitCode::from(2)
        }
    }
}

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary files being written, then exit 128 + the
/// signal's number, so an interrupted command leaves neither temporaries nor a partial output
/// set (outputs are renamed into place only when all are complete).
fn remove_temporaries_on_signal() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            trace::remove_temporaries();
            std::process::exit(128 + signal);
        }
    });
}

/// Writes `text` and a newline to stdout. A closed pipe (`| head`) ends the output quietly;
/// another failure (`> /dev/full`) is an error.
fn print_stdout(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure {
            code: 1,
            error: anyhow::anyhow!("cannot write to standard output: {e}"),
        }),
        _ => Ok(()),
    }
}

fn bad_input(message: String) -> Failure {
    Failure {
        code: 2,
        error: anyhow::anyhow!(message),
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    if !matches!(cli.command, Command::Run(_) | Command::Record(_)) {
        remove_temporaries_on_signal();
    }
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
            print_summary(&analysis, &out)?;
            timer.lap("reports");
            Ok(ExitCode::SUCCESS)
        }
        Command::Compare {
            base,
            head,
            threshold,
            format,
            base_select,
            head_select,
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
            let (mut base_traces, base_names) = load_with_steps(&expand(&base)?, steps)?;
            let (mut head_traces, head_names) = load_with_steps(&expand(&head)?, steps)?;
            select(&mut base_traces, base_select.as_deref(), "--base-select")?;
            select(&mut head_traces, head_select.as_deref(), "--head-select")?;
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
            let md = report::markdown::comparison_markdown(&comparison);
            let json = report::json::comparison_json(&comparison);
            if let Some(dir) = &out.output {
                let mut set = OutputSet::create(dir)?;
                set.add("compare.md", |w| w.write_all(md.as_bytes()))?;
                set.add("compare.json", |w| w.write_all(json.as_bytes()))?;
                set.commit(&["compare.md", "compare.json"])?;
            }
            let summary = || {
                let path = out
                    .output
                    .as_ref()
                    .map(|d| d.join("compare.md").display().to_string());
                report::summary::comparison_summary(&comparison, path.as_deref())
            };
            print_stdout(&if out.json {
                json
            } else if out.full {
                md
            } else if format.is_some() {
                report::markdown::comparison_github(&comparison)
            } else {
                summary()
            })?;
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
            gapscope::record::cupti::ensure_cuda_driver()?;
            let summary = gapscope::workload::htdecode::run_correctness_check(&tokens)
                .map_err(|e| anyhow::anyhow!(e))?;
            print_stdout(&summary)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Record(args) => Ok(gapscope::record::launch::run(&args)?),
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
            let merged =
                gapscope::analysis::merge::merge(traces, names, align).map_err(|e| Failure {
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
            print_stdout(&if json {
                merged.json()
            } else {
                merged.markdown()
            })?;
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
        if gapscope::trace::is_kineto_file(p) {
            // torch.profiler (Kineto) Chrome trace: imported; bad input exits 2 as for traces.
            let imported = gapscope::trace::read_kineto(p).map_err(|e| Failure {
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

/// `KEY=VALUE`: keeps only the cells whose request has it ([`Trace::select_cells`]).
fn select(traces: &mut [Trace], selection: Option<&str>, flag: &str) -> Result<(), Failure> {
    let Some(selection) = selection else {
        return Ok(());
    };
    let Some((key, value)) = selection.split_once('=') else {
        return Err(bad_input(format!(
            "{flag} {selection}: expected KEY=VALUE, e.g. graph_usage_mode=2"
        )));
    };
    let kept: usize = traces.iter_mut().map(|t| t.select_cells(key, value)).sum();
    if kept == 0 {
        return Err(bad_input(format!(
            "{flag} {selection}: no cell's request has {key}={value}"
        )));
    }
    Ok(())
}

/// The files of an `-o DIR` output set.
const REPORT_SET: [&str; 4] = [
    "report.md",
    "report.json",
    "trace.perfetto.json",
    "step.svg",
];

fn write_outputs(traces: &[Trace], analysis: &Analysis, out: &OutputArgs) -> Result<(), Failure> {
    let Some(dir) = &out.output else {
        return Ok(());
    };
    check_align_step(analysis, out.align_step)?;
    let mut set = OutputSet::create(dir)?;
    set.add("report.md", |w| {
        w.write_all(report::markdown::analysis_markdown(analysis).as_bytes())
    })?;
    set.add("report.json", |w| {
        w.write_all(report::json::analysis_json(analysis).as_bytes())
    })?;
    let opts = report::perfetto::PerfettoOptions {
        align_steps: out.align_step,
    };
    set.add("trace.perfetto.json", |w| {
        report::perfetto::write_chrome_trace(w, traces, analysis, &opts)
    })?;
    match svg_pair(analysis) {
        Some(pair) => {
            let step = out.align_step.unwrap_or(1);
            set.add("step.svg", |w| {
                w.write_all(report::svg::step_svg(traces, analysis, pair, step).as_bytes())
            })?;
        }
        None => eprintln!("gapscope: note: no eager/graphed pair in the input: no step.svg"),
    }
    let written = set.commit(&REPORT_SET)?;
    eprintln!(
        "wrote {}/{{{}}} (open the .perfetto.json at https://ui.perfetto.dev)",
        dir.display(),
        written.join(",")
    );
    Ok(())
}

/// The pair where the graph loses most against eager: what a reader wants to see in the SVG.
fn svg_pair(analysis: &Analysis) -> Option<&analysis::CellComparison> {
    analysis.regime_pairs.iter().max_by(|a, b| {
        let d = |p: &analysis::CellComparison| p.period_delta.unwrap_or(f64::MIN);
        d(a).total_cmp(&d(b))
    })
}

/// `--align-step K` must name a step some cell has.
fn check_align_step(analysis: &Analysis, align_step: Option<usize>) -> Result<(), Failure> {
    let Some(k) = align_step else {
        return Ok(());
    };
    let longest = analysis
        .cells
        .iter()
        .map(|c| c.steps.len())
        .max()
        .unwrap_or(0);
    if k >= longest {
        return Err(bad_input(format!(
            "--align-step {k}: no cell has a step {k} (steps count from 0; the longest cell has {longest})"
        )));
    }
    Ok(())
}

fn export(
    traces: &[Trace],
    analysis: &Analysis,
    format: Format,
    output: &Path,
    align_step: Option<usize>,
) -> Result<(), Failure> {
    check_align_step(analysis, align_step)?;
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
            let Some(pair) = svg_pair(analysis) else {
                return Err(bad_input(
                    "no eager/graphed pair in the input: nothing to draw, no SVG written".into(),
                ));
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

/// stdout of `analyze` and `run`: the summary (with where the full report is), the whole
/// Markdown report (`--full`) or the JSON report (`--json`).
fn print_summary(analysis: &Analysis, out: &OutputArgs) -> Result<(), Failure> {
    if out.json {
        print_stdout(&report::json::analysis_json(analysis))
    } else if out.full {
        print_stdout(&report::markdown::analysis_markdown(analysis))
    } else {
        let path = out
            .output
            .as_ref()
            .map(|d| d.join("report.md").display().to_string());
        print_stdout(&report::summary::analysis_summary(
            analysis,
            path.as_deref(),
        ))
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
        let merged =
            gapscope::analysis::merge::merge(traces, names, None).map_err(|e| Failure {
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
    args.sweep.validate().map_err(bad_input)?;
    let gpu = !args.bundled && gapscope::workload::gpu_available();
    if !gpu {
        remove_temporaries_on_signal();
    }
    let (traces, names) = if gpu {
        let recorded = gapscope::workload::run_sweep(&args.sweep, &args.output)?;
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
        gapscope::trace::bundled::traces()?
    };
    let analysis = analyze(&traces, &names);
    let out = OutputArgs {
        output: Some(args.output.clone()),
        json: args.json,
        full: args.full,
        align_step: None,
        step_range: None,
    };
    write_outputs(&traces, &analysis, &out)?;
    print_summary(&analysis, &out)?;
    Ok(ExitCode::SUCCESS)
}
