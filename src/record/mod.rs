//! Recording: CUPTI tracing of a running CUDA process, turned into a [`crate::trace::Trace`].
//! The command that runs a program with it (`gapscope record -- CMD`) is the binary's
//! `cli/record.rs`.
//!
//! * [`cupti`]: CUPTI in layers (sys → loader → result/params/activity/dl → state, callbacks,
//!   decode, graph, budget → recorder);
//! * [`env`](mod@env): the environment `gapscope record` hands its program and the recorder reads;
//! * [`host_sampler`]: the Python stacks of the program's threads, sampled from `record` (the
//!   program's parent) with py-spy while it runs;
//! * [`thread_ids`]: the kernel id of a Python thread py-spy names by its pthread id only
//!   (CPython 3.9 and 3.10);
//! * [`inject`]: the CUDA injection entry point of `libgapscope.so` (one recorder per process);
//! * [`step_range`]: the NVTX range that marks one step, given or chosen, from the command line
//!   to the trace;
//! * [`spill`]: the records an injected recorder hands to `gapscope record` as it goes, and
//!   the trace written from them when the program was killed before writing its own.

pub mod cupti;
pub mod env;
pub mod host_sampler;
pub mod inject;
pub mod spill;
pub mod step_range;
pub mod thread_ids;

/// A `python3 -c PROGRAM` child, once it has printed its first line (`PROGRAM` prints one
/// when it is where a test wants to read it).
#[cfg(test)]
pub(crate) fn python_when_ready(program: &str) -> std::process::Child {
    interpreter_when_ready("python3", program)
}

/// [`python_when_ready`] with another interpreter.
#[cfg(test)]
pub(crate) fn interpreter_when_ready(python: &str, program: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(python)
        .args(["-c", program])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("its stdout"))
        .read_line(&mut line)
        .expect("its first line");
    child
}
