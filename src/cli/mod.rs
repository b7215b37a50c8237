#![forbid(unsafe_code)]
//! The binary's command line: the clap structs ([`args`]) and, per command, the glue between
//! them and the library: load the inputs ([`inputs`]), call the analysis, hand the output set
//! to [`gapscope::report::output`], print stdout. Nothing here analyses, renders or writes
//! files itself.
//!
//! Exit codes: 0 success; 1 runtime failure (GPU, libraries); 2 bad input (usage, unreadable or
//! malformed trace); 3 `compare` found a slowdown beyond `--threshold`.

pub mod analyze;
pub mod args;
pub mod compare;
pub mod inputs;
pub mod merge;
pub mod run;

use gapscope::trace::{self, TraceError};
use std::io::Write;

/// A failure with its exit code; displayed as one line.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
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

/// Bad input (exit 2) described by `message`.
pub fn bad_input(message: String) -> Failure {
    Failure {
        code: 2,
        error: anyhow::anyhow!(message),
    }
}

/// Writes `text` and a newline to stdout. A closed pipe (`| head`) ends the output quietly;
/// another failure (`> /dev/full`) is an error.
pub fn print_stdout(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure {
            code: 1,
            error: anyhow::anyhow!("cannot write to standard output: {e}"),
        }),
        _ => Ok(()),
    }
}

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary files being written, then exit 128 + the
/// signal's number, so an interrupted command leaves neither temporaries nor a partial output
/// set (outputs are renamed into place only when all are complete, and a commit under way is
/// finished before the exit: [`trace::exit_removing_temporaries`]).
pub fn remove_temporaries_on_signal() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            trace::exit_removing_temporaries(128 + signal);
        }
    });
}

/// With `GAPSCOPE_TIMINGS` set, the wall time of each phase on stderr (for benchmarks).
pub struct PhaseTimer(Option<std::time::Instant>);

impl PhaseTimer {
    pub fn from_env() -> PhaseTimer {
        PhaseTimer(std::env::var_os("GAPSCOPE_TIMINGS").map(|_| std::time::Instant::now()))
    }

    pub fn lap(&mut self, phase: &str) {
        if let Some(since) = &mut self.0 {
            eprintln!("gapscope: {phase}: {:.3} s", since.elapsed().as_secs_f64());
            *since = std::time::Instant::now();
        }
    }
}
