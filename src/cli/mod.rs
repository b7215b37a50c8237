#![forbid(unsafe_code)]
//! The binary's command line: the clap structs ([`args`]) and, per command, the glue between
//! them and the library: load the inputs ([`inputs`]), call the analysis, hand the output set
//! to [`gapscope::report::output_set`], print stdout. Nothing here analyses, renders or writes
//! files itself.
//!
//! Exit codes: 0 success; 1 runtime failure (GPU, libraries); 2 bad input (usage, unreadable or
//! malformed trace); 3 `compare` found a slowdown beyond `--threshold`; 4 `try --expect-fix`:
//! the variant did not remove a gap.
//!
//! Messages: every line gapscope itself writes to stderr is `gapscope: note: …`,
//! `gapscope: warning: …` or, last and once, `gapscope: error: …`, each escaped to one line
//! ([`gapscope::messages::printable`]: a newline in a path cannot split it), through
//! [`gapscope::messages`], so that a full or closed stderr changes no exit code. A command checks its
//! output folder before any work ([`check_output_folder`]), writes stdout before its files (a
//! full stdout fails the command with nothing written), and says what it wrote only once
//! everything succeeded.

pub mod analyze;
pub mod args;
pub mod compare;
pub mod exit;
pub mod inputs;
pub mod merge;
pub mod record;
pub mod run;
pub mod shell;
pub mod trial;

pub use exit::Failure;
use gapscope::trace::TraceError;
use std::io::Write;
use std::path::Path;

/// Notes and the error line: written as [`gapscope::messages`] writes every stderr line
/// (one line each; a full or closed stderr changes no exit code).
pub use gapscope::messages::{error, note};

/// The one line of a failure: the outermost context and its causes joined (a cause that a
/// message already ends with, as "cannot read: <io error>", is not repeated).
pub fn failure_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain().map(|e| e.to_string()) {
        if line.ends_with(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

/// `-o DIR` checked before any work: `DIR` is a folder, or can be made in the nearest folder
/// above it, and a file can be created there (a read-only folder, a file in the way, a path
/// under `/proc` fail here, not after a sweep or an analysis). Nothing is left behind.
pub fn check_output_folder(dir: &Path) -> Result<(), Failure> {
    let cannot = |path: &Path, source: std::io::Error| {
        Failure::runtime(TraceError::Write {
            path: path.to_owned(),
            source,
        })
    };
    let mut existing = dir;
    loop {
        match std::fs::metadata(existing) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(Failure::runtime(anyhow::anyhow!(
                    "{}: not a folder (-o names the folder the outputs go to)",
                    existing.display()
                )));
            }
            // Missing, or under a file ("afile/out"): the folder above decides.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                match existing.parent() {
                    Some(p) if !p.as_os_str().is_empty() => existing = p,
                    _ => {
                        existing = Path::new(".");
                        break;
                    }
                }
            }
            Err(e) => return Err(cannot(existing, e)),
        }
    }
    let probe = existing.join(format!(".gapscope-{}.probe", std::process::id()));
    match std::fs::File::create_new(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => {
            // "No such file or directory" for a file in a folder that exists: a file system
            // that makes no files (/proc, /sys); the OS's words would say the folder is missing.
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "its file system takes no new files (as /proc and /sys)".to_owned()
            } else {
                e.to_string()
            };
            let line = if existing == dir {
                format!("{}: cannot write into this folder: {why}", dir.display())
            } else {
                format!(
                    "{}: cannot make this folder: cannot write into {}: {why}",
                    dir.display(),
                    existing.display()
                )
            };
            Err(Failure::runtime(anyhow::anyhow!(line)))
        }
    }
}

/// Refuses an output file that is one of the command's inputs (the same file, by any path):
/// writing it would destroy the input. Bad input (exit 2), before any work.
pub fn refuse_input_as_output(output: &Path, inputs: &[std::path::PathBuf]) -> Result<(), Failure> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(()); // not there yet: no input can be it
    };
    let same = |p: &std::path::PathBuf| {
        std::fs::metadata(p).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino())
    };
    if inputs.iter().any(same) {
        return Err(bad_input(format!(
            "{}: this is an input of the command; write the output to another file",
            output.display()
        )));
    }
    Ok(())
}

/// Bad input (exit 2) described by `message`.
pub fn bad_input(message: String) -> Failure {
    Failure::bad_input(anyhow::anyhow!(message))
}

/// Writes `text` and a newline to stdout. A closed pipe (`| head`) ends the output quietly;
/// another failure (`> /dev/full`) is an error.
pub fn print_stdout(text: &str) -> Result<(), Failure> {
    print_stdout_with(|out| out.write_all(text.as_bytes()))
}

/// [`print_stdout`] of what `write` writes (then a newline), through a buffer.
pub fn print_stdout_with(
    write: impl FnOnce(&mut std::io::BufWriter<std::io::StdoutLock<'static>>) -> std::io::Result<()>,
) -> Result<(), Failure> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match write(&mut out)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::runtime(
            anyhow::anyhow!("cannot write to standard output: {e}"),
        )),
        _ => Ok(()),
    }
}

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary files being written, then exit 128 + the
/// signal's number, so an interrupted command leaves neither temporaries nor a partial output
/// set (outputs are renamed into place only when all are complete, and a commit under way is
/// finished before the exit: [`gapscope::output::exit_removing_temporaries`]).
pub fn remove_temporaries_on_signal() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            gapscope::output::exit_removing_temporaries(exit::of_signal(signal).into());
        }
    });
}

/// With `GAPSCOPE_TIMINGS` set, the wall time of each phase on stderr (for benchmarks).
pub struct PhaseTimer {
    since: Option<std::time::Instant>,
    /// Parts of the next lap, summed over the traces: (name, seconds).
    parts: Vec<(&'static str, f64)>,
}

impl PhaseTimer {
    pub fn from_env() -> PhaseTimer {
        PhaseTimer {
            since: gapscope::settings::Setting::Timings
                .read_os()
                .map(|_| std::time::Instant::now()),
            parts: Vec::new(),
        }
    }

    /// Adds the time since the last mark to `part` of the next lap (e.g. the load of each
    /// trace), printed with that lap.
    pub fn part(&mut self, part: &'static str) {
        let Some(since) = &mut self.since else { return };
        let secs = since.elapsed().as_secs_f64();
        *since = std::time::Instant::now();
        match self.parts.iter_mut().find(|(name, _)| *name == part) {
            Some((_, sum)) => *sum += secs,
            None => self.parts.push((part, secs)),
        }
    }

    pub fn lap(&mut self, phase: &str) {
        if let Some(since) = &mut self.since {
            let mut total = since.elapsed().as_secs_f64();
            for (part, secs) in self.parts.drain(..) {
                note(&format!("{phase}, {part}: {secs:.3} s"));
                total += secs;
            }
            note(&format!("{phase}: {total:.3} s"));
            *since = std::time::Instant::now();
        }
    }
}
