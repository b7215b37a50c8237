//! gapscope: where did my graphed step lose time, and did the fix remove it?
//!
//! # Where things are
//!
//! Data flows one way, and the folders follow it:
//!
//! | folder | stage | holds |
//! |---|---|---|
//! | `workload/` | make work on the GPU | the HT-decode step (NVRTC kernels from `kernels/`, CPU reference), the emu step, the collectives (emulated, NCCL with its FFI leaf), graph capture |
//! | `experiment/` | `gapscope run` | the sweep over cells (`plan`, `cells`), recorded under the recorder, and its rank processes (`ranks`) |
//! | `record/` | trace it | `cupti/` in layers: bindgen `sys` → `loader` (the library resolved) → `result` (every CUPTI call, safe, as `Result`) with `params` (CUPTI's callback data read), `activity` (its records read) and `dl` (the loader and the stack asked) → `state`, `callbacks`, `decode`, `graph` (with `frames` and `python_stack`: the native and Python frames that created each node), `budget/` → `recorder`. `budget/` is the trace budget whole: its type and one parser, the schedule, the decisions, which CUPTI calls switch it, the NVTX ranges it keeps and the step range it chooses. `inject` (the CUDA injection entry of `libgapscope.so`), `env` (what `record` hands its child, and the tracing flag through which the child says when it traces), `host_sampler` (the program's Python stacks, sampled from `record` with py-spy) |
//! | `trace/` | the file between recording and analysis | the versioned schema (with its optional `host_samples`), reading and writing (through `output`), the Kineto importer (`kineto/`: the general reader `scan`, the torch event `templates`, `numbers`, and `bytes`, the one SWAR helper), synthetic traces for tests and the bundled H200 traces (`bundled`) |
//! | `analysis/` | answer the question | `steps` (markers and graph launches → steps and cells), `timeline`, `align` (the LCS of op names; which cells pair), `compare` (cells and analyses compared: the period verdict, what the difference is made of, `compare`'s threshold verdict), `cause` (each gap's cause from the DAG and API records), `host_samples` (the host code sampled in host-bound gaps), `stats`, `thresholds` (every threshold a verdict is judged against, each with why), `remedy`, `merge` (ranks), `trial` (`try`: each variant's verdict against BASE over rounds) |
//! | `report/` | say it | Markdown, JSON, Perfetto, SVG, the terminal summary, `trial` (`try`'s screen and try.md), and `output_set` (the one writer of every output set) |
//! | `cuda.rs` | | the one libcuda loader and "is CUDA here" check |
//! | `exit.rs` | | every exit code, by name |
//! | `messages.rs` | | every line gapscope writes to stderr (`gapscope: note: …`), the escaping that keeps a name from a trace or a path on one line, and the quoting of a word for a shell |
//! | `output.rs` | | every output file written whole or not at all (a temporary renamed into place), and the temporaries removed on a signal |
//! | `settings.rs` | | every `GAPSCOPE_*` environment variable, read by one rule (trimmed; a value refused is one line) |
//! | `threads.rs`, `parallel.rs` | | how many threads work split over cores gets, and the split itself (`parallel_map`) |
//! | `panic_message.rs` | | a panic's message as one line, for the hooks that print one |
//! | `library_search.rs` | | where CUPTI and NCCL are looked for (variable, the program's Python environment, `LD_LIBRARY_PATH`, the toolkit): pure, tested on fake trees |
//! | `main.rs`, `cli/` | the command line | every clap struct, and the commands: the glue from arguments to the stages (`record`: running a program with the injection library, `try`: its rounds) |
//!
//! Nothing after `trace/` touches the GPU: analysis, import and reports run anywhere. FFI and
//! `unsafe` live only in FFI leaves (`record/cupti`'s sys, loader, result, params, activity, dl
//! and the buffer hand-over `buffers`; `record/inject`; `cuda.rs`; the workload's CUDA and
//! NCCL leaves); every other module says `#![forbid(unsafe_code)]`. `trace/` imports nothing above it.

// libtest captures a unit test's eprintln!; everywhere else stderr is messages'.
#![cfg_attr(test, allow(clippy::disallowed_macros))]

pub mod analysis;
pub mod cuda;
pub mod exit;
pub mod experiment;
pub mod library_search;
pub mod messages;
pub mod output;
pub mod panic_message;
pub mod parallel;
pub mod record;
pub mod report;
pub mod settings;
pub mod threads;
pub mod trace;
pub mod workload;

// The analysis calls these by their old path; its files are being moved by issue 58 a.
pub use parallel::{parallel_map, parallel_map_on};
pub use threads::worker_threads;
