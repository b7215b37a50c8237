#![forbid(unsafe_code)]
//! Every clap struct of the command line, and their conversions into the library's plain
//! types ([`RecordArgs`] → [`RecordOptions`], [`SweepArgs`] → [`SweepOptions`], [`ClockArg`] →
//! [`ClockAlignment`]).
//!
//! Renamed flags keep their old spelling as a hidden alias, so scripts do not break:
//! `--origin-step` (was `--align-step`) and `merge --clock` (was `merge --align`).

use super::record::RecordOptions;
use clap::{Args, Parser, Subcommand, ValueEnum};
use gapscope::analysis::merge::ClockAlignment;
use gapscope::experiment::{RankSweepError, SweepOptions, Workload};
use gapscope::record::cupti::ApiCallbacks;
use gapscope::record::host_sampler::HostSampling;
use gapscope::report::PerfettoFormat;
use gapscope::workload::capture::Launch;
use gapscope::workload::collective::{Backend, BackendArg};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "gapscope",
    // Help wraps at the terminal's width, at most 100 columns (100 when piped): clap's
    // `wrap_help`, whose own cap is unbounded when the terminal is wide or COLUMNS is large.
    max_term_width = 100,
    // "0.1.0 (commit abc1234def)" from a git checkout, else the crate's version (build.rs).
    version = env!("GAPSCOPE_VERSION"),
    about = "Where did my graphed CUDA step lose time, and did the fix remove it?",
    long_about = "gapscope records a step eagerly and as a replayed CUDA graph under CUPTI, aligns the two \
kernel timelines, attributes every idle gap to a cause from the graph DAG and API records \
(e.g. the external event wait NCCL graph usage mode 2 puts in front of a captured ncclAllGather), \
and writes Perfetto, Markdown, JSON and SVG outputs.",
    // Example lines stay under 100 columns whole (comments on their own line): a wrapped
    // command could not be copied.
    after_help = "Examples:\n  gapscope run      # record on the GPU, or analyse the bundled H200 traces\n  gapscope analyze traces/emu-h200.json -o out\n  gapscope compare traces/ht-decode-2rank-h200/mode2-rank0.json \\\n      traces/ht-decode-2rank-h200/mode1-rank0.json\n  # which setting removes the gap:\n  gapscope try --env NCCL_GRAPH_MIXING_SUPPORT=0 -o try-out -- python step.py"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Analyse trace files: steps, eager ↔ graphed alignment, gaps by cause.
    #[command(
        after_help = "Examples:\n  # writes out/report.md, report.json, trace.perfetto-trace, step.svg:\n  gapscope analyze traces/emu-h200.json -o out\n  # an Nsight Systems export (nsys export --type sqlite; a .nsys-rep is exported by the nsys\n  # on PATH):\n  gapscope analyze traces/nsys/serial-event-node.sqlite"
    )]
    Analyze {
        /// Traces: gapscope trace files (.json), torch.profiler (Kineto) exports (.json,
        /// .json.gz), or folders of them; Nsight Systems SQLite exports (.sqlite, .sqlite.gz)
        /// and reports (.nsys-rep, exported with the `nsys` on PATH).
        #[arg(required = true, value_name = "TRACES")]
        traces: Vec<PathBuf>,
        #[command(flatten)]
        out: OutputArgs,
        #[command(flatten)]
        perfetto: PerfettoArg,
        /// Also write the rank summary of the one trace given to FILE: what `merge` needs of
        /// this rank, about 1 % of the trace's size (analyse each rank where it was recorded,
        /// merge the summaries).
        #[arg(long, value_name = "FILE")]
        summary: Option<PathBuf>,
    },
    /// Compare BASE with HEAD (e.g. mode 2 vs mode 1, or main vs a PR).
    ///
    /// Compare BASE with HEAD (e.g. mode 2 vs mode 1, or main vs a PR); exit 3 when HEAD is
    /// slower than --threshold beyond the run-to-run spread.
    #[command(
        after_help = "Examples:\n  # writes out/compare.md, compare.json:\n  gapscope compare traces/ht-decode-2rank-h200/mode2-rank0.json \\\n      traces/ht-decode-2rank-h200/mode1-rank0.json -o out\n  gapscope compare main.json pr.json --threshold 1.02 || echo 'graphed step regressed'"
    )]
    Compare(CompareArgs),
    /// Export one output format of an analysis to a file.
    #[command(
        after_help = "Example:\n  gapscope export traces/emu-h200.json --format perfetto -o emu.perfetto-trace --origin-step 5"
    )]
    Export {
        /// Traces: gapscope trace files (.json), torch.profiler (Kineto) exports (.json,
        /// .json.gz), Nsight Systems exports (.sqlite) and reports (.nsys-rep).
        #[arg(required = true, value_name = "TRACES")]
        traces: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Perfetto)]
        format: Format,
        /// Output file (its folder must exist); a FIFO or device is written in place.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        origin: OriginStepArg,
    },
    /// Run the HT-decode experiment on the GPU, or analyse the bundled H200 traces.
    ///
    /// Run the HT-decode experiment on the GPU (eager and graphed, graph usage modes, T sweep)
    /// and analyse it; without a GPU, analyse the bundled H200 traces instead.
    #[command(
        after_help = "Examples:\n  gapscope run -o out            # GPU: records live; no GPU: bundled traces\n  gapscope run --tokens 1,8,64 --modes 1,2 --steps 300"
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
        after_help = "Examples:\n  gapscope record -o my-traces --step-range step -- python examples/torch_step.py\n  gapscope analyze my-traces"
    )]
    Record(RecordArgs),
    /// Try candidate fixes (environment settings) on your program, and judge each.
    ///
    /// Try candidate fixes on your program: run it as given (BASE) and with each variant's
    /// environment settings, in interleaved rounds, each run recorded as `record` does; say per
    /// variant and cell whether it removes a gap, helps, has no effect or hurts.
    #[command(
        name = "try",
        after_help = "Examples:\n  gapscope try --env NCCL_GRAPH_MIXING_SUPPORT=0 --env NCCL_MEM_SYNC_DOMAIN=0 -o try-out \\\n      -- torchrun --nproc-per-node 2 step.py\n  gapscope try --variant no-mixing='NCCL_GRAPH_MIXING_SUPPORT=0 NCCL_CGA_CLUSTER_SIZE=0' \\\n      --expect-fix no-mixing -- python step.py\n  gapscope try --from try-out   # the same report again, running nothing"
    )]
    Try(TryArgs),
    /// Merge per-rank traces or summaries into one report, the slowest rank highlighted.
    ///
    /// Merge per-rank traces (trace-0.json, trace-1.json…) into one Perfetto trace and one
    /// report with a row per rank, the slowest rank highlighted. Rank summaries (`analyze
    /// --summary`) stand for their traces: same report, no Perfetto trace.
    #[command(
        after_help = "Examples:\n  # writes out/report.md, report.json, trace.perfetto-trace:\n  gapscope merge traces/torch-graphs-2rank-h200/mixing-1 -o out\n  # per rank, e.g. in a batch array job:\n  gapscope analyze traces/torch-graphs-2rank-h200/mixing-1/trace-0.json --summary rank-0.json\n  # then the ranks at once: summaries, traces or both:\n  gapscope merge rank-0.json traces/torch-graphs-2rank-h200/mixing-1/trace-1.json"
    )]
    Merge {
        /// Per-rank trace files or rank summaries, or folders of them (*.json, *.json.gz).
        #[arg(required = true, value_name = "TRACES")]
        traces: Vec<PathBuf>,
        /// Folder for report.md, report.json and trace.perfetto-trace (the Perfetto trace
        /// only when every input is a trace).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        json: JsonArg,
        /// Clock alignment; default: collectives when the traces name several hosts, else none.
        #[arg(long, value_enum, alias = "align")]
        clock: Option<ClockArg>,
        #[command(flatten)]
        perfetto: PerfettoArg,
    },
    /// Print a completion script for a shell on stdout.
    #[command(
        after_help = "Examples:\n  gapscope completions bash > ~/.local/share/bash-completion/completions/gapscope\n  gapscope completions zsh > ~/.zfunc/_gapscope     # with fpath+=(~/.zfunc) in .zshrc\n  gapscope completions fish > ~/.config/fish/completions/gapscope.fish"
    )]
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff) on stdout, or write one per command into DIR (all or none).
    #[command(
        after_help = "Examples:\n  gapscope man | man -l -\n  gapscope man ~/.local/share/man/man1"
    )]
    Man {
        /// Folder for gapscope.1, gapscope-analyze.1, … (created if missing).
        dir: Option<PathBuf>,
    },
    /// Test helper (hidden): behaves as a process recorded under `gapscope record` that hands
    /// over `deliveries` buffers of `records` kernels and markers, then kills itself with
    /// SIGKILL (see `gapscope::record::spill::deliver_then_die`).
    #[command(name = "spill-test-child", hide = true)]
    SpillTestChild {
        #[arg(long, default_value_t = 3)]
        deliveries: usize,
        #[arg(long, default_value_t = 100)]
        records: usize,
    },
}

/// `--perfetto-json`, for the commands whose output set holds a Perfetto trace.
#[derive(Args, Clone, Copy, Default)]
pub struct PerfettoArg {
    /// Write the Perfetto trace as Chrome JSON (trace.perfetto.json, a format Perfetto loads
    /// best-effort) instead of TrackEvent protobuf (trace.perfetto-trace).
    #[arg(long)]
    pub perfetto_json: bool,
}

impl PerfettoArg {
    pub fn format(self) -> PerfettoFormat {
        if self.perfetto_json {
            PerfettoFormat::Json
        } else {
            PerfettoFormat::Protobuf
        }
    }
}

/// `--origin-step K` (old name `--align-step`), shared by `export` and the output set.
#[derive(Args, Clone, Copy, Default)]
pub struct OriginStepArg {
    /// Perfetto/SVG: put step K of every cell at the same origin.
    #[arg(long, alias = "align-step")]
    pub origin_step: Option<usize>,
}

/// `--json`, shared by `merge` and [`PrintArgs`].
#[derive(Args, Clone, Copy, Default)]
pub struct JsonArg {
    /// Print the JSON report on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// What stdout gets instead of the summary: `--json` or `--full`, not both.
#[derive(Args, Clone, Copy, Default)]
pub struct PrintArgs {
    #[command(flatten)]
    pub json: JsonArg,
    /// Print the whole Markdown report on stdout instead of the summary.
    #[arg(long, conflicts_with = "json")]
    pub full: bool,
}

impl PrintArgs {
    /// `--json`: the JSON report on stdout.
    pub fn json(self) -> bool {
        self.json.json
    }
}

/// `-o`, stdout and steps of `analyze` (and `run`, which sets them itself).
#[derive(Args, Clone)]
pub struct OutputArgs {
    /// Folder for report.md, report.json, trace.perfetto-trace (--perfetto-json:
    /// trace.perfetto.json) and step.svg (made if missing).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub print: PrintArgs,
    #[command(flatten)]
    pub origin: OriginStepArg,
    #[command(flatten)]
    pub steps: StepRangeArg,
}

/// `--step-range NAME`, shared by `analyze` and `compare`.
#[derive(Args, Clone, Default)]
pub struct StepRangeArg {
    /// Use the host ranges of this name (NVTX ranges, torch record_function) as the steps.
    #[arg(long, value_name = "NAME")]
    pub step_range: Option<String>,
}

#[derive(Args, Clone)]
pub struct RunArgs {
    /// Output folder: the recorded traces (GPU) and report.md, report.json,
    /// trace.perfetto-trace, step.svg.
    #[arg(short, long, default_value = "gapscope-out")]
    pub output: PathBuf,
    #[command(flatten)]
    pub print: PrintArgs,
    /// Analyse the bundled traces even when a GPU is present.
    #[arg(long)]
    pub bundled: bool,
    #[command(flatten)]
    pub perfetto: PerfettoArg,
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// A rank process started by `gapscope run`: its sweep, serialised by the parent.
    #[arg(long = "rank-sweep", value_name = "JSON", hide = true)]
    pub rank_sweep: Option<String>,
}

impl RunArgs {
    /// The sweep to run: the flags', or the one a parent handed this rank process.
    pub fn sweep_options(&self) -> Result<SweepOptions, RankSweepError> {
        match &self.rank_sweep {
            Some(json) => SweepOptions::from_rank_sweep(json),
            None => Ok(self.sweep.clone().into()),
        }
    }
}

/// What `gapscope run` sweeps on the GPU (flattened into its arguments): every flag, its
/// default and its help; [`SweepOptions`] is what they ask, for the library.
#[derive(Args, Clone)]
pub struct SweepArgs {
    #[arg(long, value_enum, default_value_t = WorkloadArg::HtDecode)]
    pub workload: WorkloadArg,
    /// Tokens per step (T), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,256,512"
    )]
    pub tokens: Vec<usize>,
    /// Graph usage modes, comma-separated (0, 1, 2).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub modes: Vec<u8>,
    /// Graph launch patterns, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "replay,fresh"
    )]
    pub launch: Vec<Launch>,
    /// Timed steps per cell.
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
    /// Untimed eager steps before timing (graph replays are all recorded: the report shows
    /// first launches apart).
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Which all-gather runs.
    #[arg(long, value_parser = BackendArg, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Simulated ranks of the emulated all-gather.
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// CUPTI activity buffer size in KiB (tiny values provoke dropped records).
    #[arg(long, default_value_t = 8192)]
    pub cupti_buffer_kib: usize,
    /// Most CUPTI activity buffers at once (0: no limit); with tiny buffers this provokes
    /// dropped records, which every report then shows.
    #[arg(long, default_value_t = 0)]
    pub cupti_max_buffers: usize,
    /// API calls that get a CUPTI callback: only those that build graphs (default), or all.
    #[arg(long, value_enum, default_value_t = ApiCallbacks::GraphBuilding)]
    pub cupti_api_callbacks: ApiCallbacks,
    /// Record every executed event record with its device timestamp (CUPTI KIND_CUDA_EVENT).
    #[arg(long)]
    pub cupti_event_records: bool,
    /// After recording, run every cell again untraced in the same process and report the
    /// traced/untraced CUDA-event period ratio.
    #[arg(long)]
    pub overhead: bool,
    /// NCCL ranks, one process and one GPU each, started by gapscope (default: every GPU when
    /// there are two or more). Under torchrun, srun or mpirun each launched process is one
    /// rank instead.
    #[arg(long, value_name = "N")]
    pub gpus: Option<usize>,
    /// Seconds a set of rank processes may run before it is stopped.
    #[arg(long, value_name = "S", default_value_t = 3600)]
    pub rank_timeout: u64,
}

impl From<SweepArgs> for SweepOptions {
    fn from(a: SweepArgs) -> SweepOptions {
        SweepOptions {
            workload: match a.workload {
                WorkloadArg::HtDecode => Workload::HtDecode,
                WorkloadArg::Emu => Workload::Emu,
            },
            tokens: a.tokens,
            modes: a.modes,
            launch: a.launch,
            steps: a.steps,
            warmup: a.warmup,
            backend: a.backend,
            ranks: a.ranks,
            device: a.device,
            cupti_buffer_kib: a.cupti_buffer_kib,
            cupti_max_buffers: a.cupti_max_buffers,
            cupti_api_callbacks: a.cupti_api_callbacks,
            cupti_event_records: a.cupti_event_records,
            overhead: a.overhead,
            gpus: a.gpus,
            rank_timeout: a.rank_timeout,
            rank_process: false,
        }
    }
}

/// `run --workload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
    /// nccl_ep-style HT decode: routing map, routing all-gather, preprocessing, dispatch, combine.
    HtDecode,
    /// examples/probe/emu.cu's step: spin 5 µs → collective stand-in → spin 10 µs → spin 5 µs.
    Emu,
}

/// Arguments of `gapscope compare`.
#[derive(Args)]
pub struct CompareArgs {
    /// The base: a trace file (gapscope, or torch.profiler .json/.json.gz) or a folder of them.
    pub base: PathBuf,
    /// The head: a trace file or a folder of them, as BASE.
    pub head: PathBuf,
    /// Largest allowed head/base period ratio (1.02 = 2 % slower).
    #[arg(long, default_value_t = 1.02)]
    pub threshold: f64,
    /// `github`: print the PR table (Markdown for a pull-request comment or
    /// $GITHUB_STEP_SUMMARY) instead of the summary.
    #[arg(long, value_enum, conflicts_with_all = ["json", "full"])]
    pub format: Option<CompareFormat>,
    /// Only the base cells whose request has KEY=VALUE (e.g. graph_usage_mode=2).
    #[arg(long, value_name = "KEY=VALUE")]
    pub base_select: Option<String>,
    /// Only the head cells whose request has KEY=VALUE (e.g. graph_usage_mode=1).
    #[arg(long, value_name = "KEY=VALUE")]
    pub head_select: Option<String>,
    /// Folder for compare.md and compare.json (made if missing).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub print: PrintArgs,
    #[command(flatten)]
    pub steps: StepRangeArg,
}

/// Arguments of `gapscope try`.
#[derive(Debug, Clone, Args)]
pub struct TryArgs {
    /// A variant of one setting: the program with NAME=VALUE added to its environment,
    /// labelled NAME=VALUE. Repeat for more variants.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// A variant of several settings, labelled LABEL: LABEL='NAME=VALUE NAME2=VALUE2'.
    #[arg(long, value_name = "LABEL=SETTINGS")]
    pub variant: Vec<String>,
    /// Rounds; each runs BASE and every variant once, in turn (3 or more measure the spread).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: usize,
    /// Exit 4 unless the variant labelled LABEL removes a gap (for CI).
    #[arg(long, value_name = "LABEL")]
    pub expect_fix: Option<String>,
    /// Folder for every run's traces and logs, try-plan.json, try.md and try.json (default
    /// gapscope-try); with --from, a folder for try.md and try.json.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Judge the runs of an earlier try again from its folder, running nothing.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["env", "variant", "rounds", "command"])]
    pub from: Option<PathBuf>,
    /// The program to try and its arguments (after `--`).
    #[arg(
        trailing_var_arg = true,
        value_name = "CMD",
        required_unless_present = "from"
    )]
    pub command: Vec<OsString>,
}

/// Arguments of `gapscope record`.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// Folder for the traces (one `trace-<rank>.json` per process).
    #[arg(short, long, default_value = "gapscope-out")]
    pub output: PathBuf,
    /// NVTX range that marks one step (e.g. `step` for `torch.cuda.nvtx.range("step")`).
    ///
    /// Without it, the first outermost NVTX range that holds device work 8 times becomes the
    /// step range (the trace notes name it); with `--trace-budget 0` none is needed.
    #[arg(long, value_name = "NAME")]
    pub step_range: Option<String>,
    /// Sample size: the first N launches of each graph and N steps of each kind are traced,
    /// then windows of N/4 at each doubling; 0 traces everything.
    ///
    /// Each executable graph's first N launches, and each kind of `--step-range`
    /// step's first N (a kind is what the step before did: eager, replays of a graph, graph
    /// building), are traced; after them, one window of N/4 consecutive ones at each doubling
    /// of the count, so every phase of a long run is sampled from start to end. With neither
    /// steps nor graph launches to count (an unmarked eager loop), it is traced whole
    /// (`GAPSCOPE_BUDGET_PACE=1` samples it by time instead). Between windows,
    /// kernel and API tracing and the eager-hot callbacks pause; a capture, graph creation or
    /// instantiation resumes tracing, a capture holds it on until it ends, and the calls that
    /// only build graphs are never paused, so every graph is recorded whole. Untraced launches
    /// and steps are counted in the trace notes.
    #[arg(long, value_name = "N", env = gapscope::settings::Setting::TraceBudget.name(),
          default_value_t = gapscope::record::cupti::TraceBudget::DEFAULT_LIMIT,
          value_parser = gapscope::record::cupti::TraceBudget::parse_limit)]
    pub trace_budget: u32,
    /// Host stacks sampled while the program runs, to name the code behind host-bound gaps.
    ///
    /// `python` (py-spy from outside the process, never stopping it; up to 4 kHz per process while it traces) or
    /// `off`. `native` is accepted, but this build samples Python frames only. A program that
    /// cannot be read (not Python, no ptrace permission) gets one note and is recorded as
    /// without.
    #[arg(long, value_name = "WHAT", default_value = "python",
          env = gapscope::record::host_sampler::HOST_SAMPLES_VAR)]
    pub host_samples: HostSamplesArg,
    /// The program to trace and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl From<RecordArgs> for RecordOptions {
    fn from(a: RecordArgs) -> RecordOptions {
        RecordOptions {
            output: a.output,
            step_range: a.step_range,
            trace_budget: a.trace_budget,
            host_samples: match a.host_samples {
                HostSamplesArg::Off => HostSampling::Off,
                HostSamplesArg::Python => HostSampling::Python,
                HostSamplesArg::Native => HostSampling::Native,
            },
            command: a.command,
        }
    }
}

/// `record --host-samples`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostSamplesArg {
    /// No host samples.
    Off,
    /// Python frames of every Python process of the program (py-spy, non-blocking).
    Python,
    /// Python and native frames: not built here (py-spy's unwind feature); samples Python.
    Native,
}

/// `merge --clock`: how rank clocks are put on one time base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClockArg {
    /// Shift each rank so its collective kernels end when the reference rank's do.
    Collectives,
    /// Use the recorded timestamps (ranks on one host share CLOCK_REALTIME).
    None,
}

impl From<ClockArg> for ClockAlignment {
    fn from(c: ClockArg) -> ClockAlignment {
        match c {
            ClockArg::Collectives => ClockAlignment::Collectives,
            ClockArg::None => ClockAlignment::None,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum CompareFormat {
    Github,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// TrackEvent protobuf (open at ui.perfetto.dev).
    Perfetto,
    /// Chrome trace JSON, which Perfetto loads best-effort.
    PerfettoJson,
    Markdown,
    Json,
    Svg,
}

/// The flags of `gapscope run` given on the command line that choose what a GPU sweep records
/// (`--tokens`, `--modes`…): without a GPU they do nothing, and `run` says so.
pub fn run_sweep_flags_given(matches: &clap::ArgMatches) -> Vec<String> {
    let Some(("run", run)) = matches.subcommand() else {
        return Vec::new();
    };
    // clap's own ids of the flags, so none is listed by hand.
    SweepArgs::augment_args(clap::Command::new("run"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .filter(|id| run.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// `gapscope run`'s output folder and sweep, parsed as the real command line does.
    fn parse_run(args: impl IntoIterator<Item = String>) -> (PathBuf, SweepOptions) {
        let cli = Cli::parse_from(std::iter::once("gapscope".to_owned()).chain(args));
        match cli.command {
            Command::Run(run) => {
                let sweep = run.sweep_options().expect("a sweep");
                (run.output, sweep)
            }
            _ => panic!("not a run command"),
        }
    }

    #[test]
    fn a_rank_process_is_started_with_the_same_sweep_for_its_modes() {
        let (_, parent) = parse_run(
            [
                "run",
                "-o",
                "x",
                "--tokens",
                "1,64",
                "--modes",
                "0,1,2",
                "--launch",
                "fresh",
                "--steps",
                "30",
                "--warmup",
                "3",
                "--cupti-buffer-kib",
                "64",
                "--cupti-api-callbacks",
                "graph-building-with-launches",
                "--overhead",
                "--gpus",
                "2",
            ]
            .map(str::to_owned),
        );
        let line = parent.rank_command_line(&[2], Path::new("/out/modes-2"));
        let (output, child) = parse_run(line);
        assert_eq!(output, Path::new("/out/modes-2"));
        assert!(child.rank_process);
        assert_eq!(child.modes, [2]);
        assert_eq!(child.backend, Backend::Nccl);
        assert_eq!(child.tokens, parent.tokens);
        assert_eq!(child.launch, parent.launch);
        assert_eq!((child.steps, child.warmup), (30, 3));
        assert_eq!(child.cupti_buffer_kib, 64);
        assert_eq!(
            child.cupti_api_callbacks,
            ApiCallbacks::GraphBuildingWithLaunches
        );
        assert!(child.overhead && !child.cupti_event_records);
        assert_eq!(
            child.gpus, None,
            "a rank process starts no ranks of its own"
        );
    }
}
