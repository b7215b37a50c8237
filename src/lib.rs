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
//! | `report/` | say it | Markdown, JSON, Perfetto, SVG, the terminal summary, `trial` (`try`'s screen and try.md), and `output` (the one writer of every output set) |
//! | `cuda.rs` | | the one libcuda loader and "is CUDA here" check |
//! | `exit.rs` | | every exit code, by name |
//! | `output.rs` | | every output file written whole or not at all (a temporary renamed into place), and the temporaries removed on a signal |
//! | `settings.rs` | | every `GAPSCOPE_*` environment variable, read in one place |
//! | `library_search.rs` | | where CUPTI and NCCL are looked for (variable, the program's Python environment, `LD_LIBRARY_PATH`, the toolkit): pure, tested on fake trees |
//! | `main.rs`, `cli/` | the command line | every clap struct, and the commands: the glue from arguments to the stages (`record`: running a program with the injection library, `try`: its rounds) |
//!
//! Nothing after `trace/` touches the GPU: analysis, import and reports run anywhere. FFI and
//! `unsafe` live only in FFI leaves (`record/cupti`'s sys, loader, result, params, activity, dl
//! and the buffer hand-over `buffers`; `record/inject`; `cuda.rs`; the workload's CUDA and
//! NCCL leaves); every other module says `#![forbid(unsafe_code)]`. `trace/` imports nothing above it.

// libtest captures a unit test's eprintln!; everywhere else stderr is report::stderr's.
#![cfg_attr(test, allow(clippy::disallowed_macros))]

pub mod analysis;
pub mod cuda;
pub mod exit;
pub mod experiment;
pub mod library_search;
pub mod output;
pub mod record;
pub mod report;
pub mod settings;
pub mod trace;
pub mod workload;

/// A panic's message as one line, for panic hooks that must not print a multi-line report
/// (the injection library, examples).
pub fn panic_message(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
        .replace('\n', " ")
}

/// Threads for work split over cores (the Kineto import, step attribution): see
/// [`thread_count`]. (The command line refuses a `GAPSCOPE_THREADS` that is no positive number
/// first: [`threads_setting`].)
pub fn worker_threads() -> usize {
    thread_count(threads_setting().ok().flatten(), available_cores())
}

/// The threads for `asked` threads (`GAPSCOPE_THREADS`) on a machine of `cores`: what was asked,
/// at most the cores (a thread more only waits for a core, and each split of the work spawns
/// them anew: `GAPSCOPE_THREADS=1000000` made 17,801 threads for a 100-rank merge, 3× slower);
/// when none was asked, the cores, at most 8.
pub fn thread_count(asked: Option<usize>, cores: usize) -> usize {
    let cores = cores.max(1);
    match asked {
        Some(asked) => asked.clamp(1, cores),
        None => cores.min(8),
    }
}

/// The cores this process may run on (1 when unknown).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// One line when `GAPSCOPE_THREADS` asks for more threads than [`worker_threads`] gives.
pub fn threads_capped_note() -> Option<String> {
    let asked = threads_setting().ok().flatten()?;
    let used = worker_threads();
    (asked > used).then(|| {
        format!("{}={asked}: using {used} threads, one per core available (more would only wait for a core)", settings::Setting::Threads)
    })
}

/// `GAPSCOPE_THREADS`: `None` when unset or empty, else the positive count it names; anything
/// else (`0`, `-1`, `abc`) is an error, as one line.
pub fn threads_setting() -> Result<Option<usize>, BadThreadsSetting> {
    let Some(value) = settings::Setting::Threads.read_os() else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(BadThreadsSetting {
            text: text.to_owned(),
        }),
    }
}

/// A `GAPSCOPE_THREADS` that [`threads_setting`] refuses (its trimmed text): typed for the
/// command line, which refuses it before any work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}={text:?}: expected a positive number of threads (or unset it for the cores available, at most 8)",
    settings::Setting::Threads
)]
pub struct BadThreadsSetting {
    pub text: String,
}

/// `items` mapped through `f` on up to [`worker_threads`] threads, in order: the result is the
/// one a plain `map` gives. Threads take chunks in turn, so uneven items balance out.
pub fn parallel_map<T: Send, U: Send>(items: Vec<T>, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    parallel_map_on(worker_threads(), items, f)
}

/// [`parallel_map`] on up to `threads` threads.
pub fn parallel_map_on<T: Send, U: Send>(
    threads: usize,
    items: Vec<T>,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads * 4);
    let mut chunks = Vec::new();
    let mut items = items.into_iter();
    loop {
        let part: Vec<T> = items.by_ref().take(chunk).collect();
        if part.is_empty() {
            break;
        }
        chunks.push(part);
    }
    let queue = std::sync::Mutex::new(chunks.into_iter().enumerate());
    let work = || {
        let mut done = Vec::new();
        while let Some((k, part)) = queue.lock().ok().and_then(|mut q| q.next()) {
            done.push((k, part.into_iter().map(&f).collect::<Vec<U>>()));
        }
        done
    };
    let mut results = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in helpers {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    results.sort_unstable_by_key(|(k, _)| *k);
    results.into_iter().flat_map(|(_, part)| part).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_count_is_what_was_asked_at_most_the_cores() {
        assert_eq!(thread_count(Some(1_000_000), 16), 16);
        assert_eq!(thread_count(Some(3), 2), 2);
        assert_eq!(thread_count(Some(4), 16), 4);
        // Asked for nothing: the cores, at most 8.
        assert_eq!(thread_count(None, 64), 8);
        assert_eq!(thread_count(None, 2), 2);
        // Never none, even on a machine that says it has no core.
        assert_eq!(thread_count(Some(5), 0), 1);
        assert_eq!(thread_count(None, 0), 1);
    }

    #[test]
    fn parallel_map_keeps_the_order_of_a_plain_map() {
        for len in [0, 1, 2, 7, 100, 1001] {
            let items: Vec<u64> = (0..len).collect();
            let want: Vec<u64> = items.iter().map(|x| x * x + 1).collect();
            for threads in [1, 2, 3, 8, 64] {
                assert_eq!(
                    parallel_map_on(threads, items.clone(), |x| x * x + 1),
                    want,
                    "{len} items on {threads} threads"
                );
            }
        }
    }
}
