//! The Python frames of the thread that creates a graph node (node creation only: a capture is
//! rare, never on the launch hot path).
//!
//! torch's op bindings and Triton's launchers release the GIL before they call CUDA, so the
//! creating thread usually does not hold it, and the interpreter's C API (which needs the GIL)
//! is no way in: waiting for the GIL inside a driver callback could deadlock. The thread's own
//! Python frames cannot change while it is inside that callback, though, so they are read as
//! py-spy reads another process's, from memory (the process reading itself needs no ptrace
//! permission), matched to the thread by its OS thread id (CPython 3.11+) or its pthread id.
//! Other threads' stacks, read in the same pass, may be torn: a failed pass is retried once.
#![forbid(unsafe_code)]

use crate::trace::HostFrame;
use std::sync::Mutex;

/// Frames kept per node, innermost first: enough to pass torch's and a model library's
/// frames and reach the program's own code.
const MOST_FRAMES: usize = 48;

/// The reader of this process's Python stacks, opened at the first node created.
enum Reader {
    Unopened,
    Open(Box<py_spy::PythonSpy>),
    /// Not a Python process, or one py-spy cannot read: the reason, said once.
    Refused,
}

static READER: Mutex<Reader> = Mutex::new(Reader::Unopened);

/// Which thread to read: its OS thread id and its pthread id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThreadIds {
    pub os: u64,
    pub pthread: u64,
}

impl ThreadIds {
    pub(crate) fn current() -> ThreadIds {
        ThreadIds {
            os: nix::unistd::gettid().as_raw() as u64,
            pthread: nix::sys::pthread::pthread_self() as u64,
        }
    }

    fn matches(&self, trace: &py_spy::StackTrace) -> bool {
        match trace.os_thread_id {
            Some(os) => os == self.os,
            None => trace.thread_id == self.pthread,
        }
    }
}

/// What reading the creating thread's stack gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CreatingStack {
    /// Frames innermost first, one [`HostFrame::stack_line`] each, joined by newlines.
    Frames(String),
    /// The thread runs no Python code (a library's own thread), or the pass failed twice.
    None,
    /// The first refusal in a process that looks like Python: the note to keep, once.
    RefusedFirst(String),
}

/// The Python frames of the calling thread.
pub(crate) fn creating_stack() -> CreatingStack {
    let mut reader = READER.lock().unwrap_or_else(|p| p.into_inner());
    if matches!(*reader, Reader::Unopened) {
        match open(std::process::id()) {
            Ok(spy) => *reader = Reader::Open(Box::new(spy)),
            Err(why) => {
                *reader = Reader::Refused;
                return if looks_like_python(std::process::id()) {
                    CreatingStack::RefusedFirst(format!(
                        "graph nodes made without their Python frames (py-spy could not read \
                         this process: {why})"
                    ))
                } else {
                    CreatingStack::None
                };
            }
        }
    }
    match &mut *reader {
        Reader::Open(spy) => read_thread(spy, ThreadIds::current()),
        _ => CreatingStack::None,
    }
}

/// Why py-spy cannot read a process's Python stacks; displays as one line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpyRefused {
    #[error("process id {0} out of range")]
    PidOutOfRange(u32),
    /// py-spy's own error, its first line.
    #[error("{0}")]
    Spy(String),
}

/// A reader of process `pid`'s Python stacks, never pausing it.
pub(crate) fn open(pid: u32) -> Result<py_spy::PythonSpy, SpyRefused> {
    let config = crate::record::host_sampler::py_spy_config();
    let raw = i32::try_from(pid).map_err(|_| SpyRefused::PidOutOfRange(pid))?;
    py_spy::PythonSpy::new(raw, &config).map_err(|e| {
        let text = format!("{e:#}");
        SpyRefused::Spy(text.lines().next().unwrap_or("").to_owned())
    })
}

/// The stack of one thread of the process `spy` reads.
pub(crate) fn read_thread(spy: &mut py_spy::PythonSpy, thread: ThreadIds) -> CreatingStack {
    for _ in 0..2 {
        let Ok(traces) = spy.get_stack_traces() else {
            continue;
        };
        let Some(trace) = traces.iter().find(|t| thread.matches(t)) else {
            return CreatingStack::None;
        };
        if trace.frames.is_empty() {
            return CreatingStack::None;
        }
        let lines: Vec<String> = trace
            .frames
            .iter()
            .take(MOST_FRAMES)
            .map(|f| {
                HostFrame::stack_line(&f.filename, u32::try_from(f.line).unwrap_or(0), &f.name)
            })
            .collect();
        return CreatingStack::Frames(lines.join("\n"));
    }
    CreatingStack::None
}

/// Whether the process runs a Python interpreter (its executable or a loaded libpython), so a
/// reader that failed is worth a note; other programs have no Python frames to miss.
fn looks_like_python(pid: u32) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    is_python_executable(&exe.to_string_lossy())
        || std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .is_ok_and(|maps| maps.contains("/libpython"))
}

/// Whether an executable's path names a Python interpreter (`…/python3.12`).
fn is_python_executable(exe: &str) -> bool {
    exe.rsplit('/')
        .next()
        .is_some_and(|f| f.starts_with("python"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A real `python3` whose main thread sleeps inside `inner` called from `outer`: its stack
    /// read by OS thread id (the main thread's is the process id), innermost first.
    #[test]
    fn reads_one_thread_of_a_python_process_innermost_first() {
        let program = "import sys, time\n\
                       def inner():\n    print('ready', flush=True)\n    time.sleep(30)\n\
                       def outer():\n    inner()\n\
                       outer()\n";
        let mut child = crate::record::python_when_ready(program);
        let pid = child.id();
        let read = open(pid).map(|mut spy| {
            let main = ThreadIds {
                os: u64::from(pid),
                pthread: u64::MAX,
            };
            let other = ThreadIds {
                os: u64::MAX,
                pthread: u64::MAX - 1,
            };
            (read_thread(&mut spy, main), read_thread(&mut spy, other))
        });
        let _ = child.kill();
        let _ = child.wait();
        let (main, other) = read.expect("py-spy opens a python3 child");
        let CreatingStack::Frames(frames) = main else {
            panic!("the main thread's frames: {main:?}");
        };
        let frames = HostFrame::parse_stack(&frames);
        let at = |name: &str| frames.iter().position(|f| f.function == name).unwrap();
        assert!(at("inner") < at("outer"), "innermost first: {frames:?}");
        let inner = &frames[at("inner")];
        assert_eq!((inner.file.as_str(), inner.line), ("<string>", 4));
        assert_eq!(other, CreatingStack::None, "a thread that is not there");
    }

    #[test]
    fn a_process_that_is_not_python_is_refused_and_not_noted() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let pid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let refused = open(pid);
        let python = looks_like_python(pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(refused.is_err());
        assert!(!python, "sleep is not Python");
        assert!(is_python_executable("/usr/bin/python3.12"));
    }
}
