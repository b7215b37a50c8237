//! Recording: CUPTI tracing of a running CUDA process, turned into a [`crate::trace::Trace`].
//!
//! * [`cupti`]: CUPTI's FFI floors (sys → loader → decode/graph/callbacks → recorder);
//! * [`env`](mod@env): the environment `gapscope record` hands its program and the recorder reads;
//! * [`host_sampler`]: the Python stacks of the program's threads, sampled from `record` (the
//!   program's parent) with py-spy while it runs;
//! * [`inject`]: the CUDA injection entry point of `libgapscope.so` (one recorder per process);
//! * [`launch`]: `gapscope record -- CMD`, which runs a program with that library injected;
//! * [`spill`]: the records an injected recorder hands to `gapscope record` as it goes, and
//!   the trace written from them when the program was killed before writing its own.

pub mod cupti;
pub mod env;
pub mod host_sampler;
pub mod inject;
pub mod launch;
pub mod spill;
