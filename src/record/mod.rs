//! Recording: CUPTI tracing of a running CUDA process, turned into a [`crate::trace::Trace`].
//! The command that runs a program with it (`gapscope record -- CMD`) is the binary's
//! `cli/record.rs`.
//!
//! * [`cupti`]: CUPTI in layers (sys → loader → result/params/activity/dl → state, callbacks,
//!   decode, graph, budget → recorder);
//! * [`env`](mod@env): the environment `gapscope record` hands its program and the recorder reads;
//! * [`host_sampler`]: the Python stacks of the program's threads, sampled from `record` (the
//!   program's parent) with py-spy while it runs;
//! * [`inject`]: the CUDA injection entry point of `libgapscope.so` (one recorder per process);
//! * [`spill`]: the records an injected recorder hands to `gapscope record` as it goes, and
//!   the trace written from them when the program was killed before writing its own.

pub mod cupti;
pub mod env;
pub mod host_sampler;
pub mod inject;
pub mod spill;
