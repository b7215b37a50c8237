//! Host samples: the Python stacks of the recorded program's threads, read by `gapscope
//! record` (the program's parent) while it runs, with the `py-spy` library.
//!
//! * **What is sampled**: the program and every process below it (a `torchrun` launcher's
//!   workers, found through `/proc` every [`DISCOVER_PERIOD`]) that is a CPython process
//!   py-spy can read; each read takes the stacks of all its Python threads.
//! * **Cost**: py-spy runs non-blocking ([`LockingStrategy::NonBlocking`]): it reads the
//!   process's memory (`process_vm_readv`) without stopping it, so the program is never paused;
//!   the reads cost gapscope's CPU, not the program's (measured in benches/README.md, "Host
//!   samples"). A read may then catch a stack
//!   being changed: it fails (counted in [`HostSamples::failed_reads`]) or, rarely, shows a
//!   partial stack.
//! * **Rate**: at most [`SAMPLE_RATE_HZ`] reads per second per process while its recorder
//!   traces, by up to [`READERS_PER_PROCESS`] threads taking turns (a read of a deep torch
//!   stack takes longer than one period; the readers of traced processes keep to a quarter of
//!   the host's cores, [`READER_CORES_DIVISOR`]); a process that has not written its tracing
//!   flag (no CUDA yet, or never: torch.compile's workers) is only looked at every
//!   [`DISCOVER_PERIOD`]. At most [`MAX_SAMPLES_PER_PROCESS`] samples are kept per process.
//! * **Clock**: sample times are `CLOCK_REALTIME` ns read in this process just before each
//!   read, the clock CUPTI stamps its records with on Linux (the processes share it: offset 0
//!   by construction); each sample keeps how long its read took, the window its stack is from.
//! * **Refusal**: a process that is not Python, or that may not be read (ptrace permission, as
//!   in some containers), is not sampled; when nothing could be sampled, `record` says why
//!   in one note ([`Sampled::note`]) and the recording is otherwise unchanged.
//!
//! Native frames (`--host-samples native`) need py-spy's `unwind` feature (libunwind), which
//! this build leaves out: that value samples Python frames and says so.
#![forbid(unsafe_code)]

use crate::trace::{HostFrame, HostSample, HostSamples, Trace, TraceError};
use py_spy::config::LockingStrategy;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Reads per second per process while its recorder traces. A py-spy read of a torch program
/// (stacks 50 frames deep, ~11 µs a frame) takes about 0.5 ms, and the host-bound gap that
/// matters may be one 200 µs gap in each of ~30 traced steps: 4 kHz puts ~20 reads in it,
/// enough to name its code ([`crate::analysis::host_samples::MIN_SAMPLES`]). Reached by
/// [`READERS_PER_PROCESS`] readers taking turns; py-spy's own default is 100 Hz.
pub const SAMPLE_RATE_HZ: u32 = 4000;

/// Threads reading one process at most, staggered: each reads every `readers / rate`, so a
/// read may take that long (0.75 ms with 3 at 4 kHz) without the rate falling. Outside the
/// recorder's traced windows they only look at its tracing flag.
pub const READERS_PER_PROCESS: u32 = 3;

/// The share of the host's cores the readers of traced processes may take, beyond one reader
/// a process: a quarter, so that reading every rank of a node never takes the cores the
/// ranks' launching threads need (8 ranks on a 128-core node get 3 readers each; one process
/// on 16 cores, 3; on 2 cores, 1, which then reads at the whole rate itself). Readers of a
/// process that never traces wait for its flag and take no share.
pub const READER_CORES_DIVISOR: u32 = 4;

/// Samples kept per process: about 35 minutes of one Python thread at [`SAMPLE_RATE_HZ`],
/// about 80 MB in the trace file. Later ones are counted ([`HostSamples::left_out`]).
pub const MAX_SAMPLES_PER_PROCESS: usize = 2_000_000;

/// How often the processes below the program are looked for.
pub const DISCOVER_PERIOD: Duration = Duration::from_millis(200);

/// How long a process is tried before it is taken for one py-spy cannot read (a Python
/// process is readable once its interpreter has started, about 0.1 s after exec).
pub const ATTACH_PATIENCE: Duration = Duration::from_secs(3);

/// The variable that `--host-samples` may be given as (`off` for an overhead bench's variant).
pub const HOST_SAMPLES_VAR: &str = crate::settings::Setting::HostSamples.name();

/// `--host-samples`: which host stacks `record` samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostSampling {
    /// None.
    Off,
    /// Python frames.
    #[default]
    Python,
    /// Python and native frames: not built (see the module's doc); samples Python frames.
    Native,
}

/// Said when `--host-samples native` is asked for.
pub const NATIVE_NOT_BUILT: &str = "--host-samples native: native frames need py-spy's unwind feature, which this gapscope is built without; sampling Python frames only";

/// A running sampler; [`Sampler::finish`] stops it and hands over what it sampled.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Sampled>>,
}

/// What a sampler sampled: per process id, its samples; and why processes were not sampled.
#[derive(Debug, Default)]
pub struct Sampled {
    pub processes: BTreeMap<u32, HostSamples>,
    /// The program's own process could not be read: py-spy's reason.
    pub root_refused: Option<String>,
    /// Processes py-spy could read (sampled or not: one whose recorder never traced has no
    /// samples, and nothing for them to name).
    pub attached: usize,
}

impl Sampled {
    /// The one note `record` prints when no process could be sampled, `None` when one was.
    pub fn note(&self) -> Option<String> {
        if !self.processes.is_empty() || self.attached > 0 {
            return None;
        }
        let why = self
            .root_refused
            .as_deref()
            .unwrap_or("no Python process found");
        let hint = if is_permission_error(why) {
            " (reading another process's memory needs ptrace permission: kernel.yama.ptrace_scope ≤ 1, or CAP_SYS_PTRACE in a container)"
        } else {
            ""
        };
        Some(format!(
            "no host samples: {why}{hint}; the recording is otherwise unchanged (--host-samples off skips sampling)"
        ))
    }
}

fn is_permission_error(why: &str) -> bool {
    let why = why.to_ascii_lowercase();
    why.contains("permission") || why.contains("eperm") || why.contains("not permitted")
}

impl Sampler {
    /// Starts sampling `root` and the processes below it, at `rate_hz` reads per second per
    /// process (at most [`SAMPLE_RATE_HZ`]), by up to [`READERS_PER_PROCESS`] threads each. With `flags` (the trace folder), a process is read
    /// only while its recorder's tracing flag says it traces ([`crate::record::env::TracingFlag`]);
    /// without, throughout.
    pub fn start(root: u32, rate_hz: u32, flags: Option<PathBuf>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let rate_hz = rate_hz.clamp(1, SAMPLE_RATE_HZ);
        let thread = std::thread::Builder::new()
            .name("gapscope-host-samples".into())
            .spawn(move || sample(root, rate_hz, flags, &flag))
            .ok();
        Sampler { stop, thread }
    }

    /// Stops sampling and returns the samples, after the reads in progress.
    pub fn finish(mut self) -> Sampled {
        self.stop.store(true, Ordering::Release);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(sampled)) => sampled,
            Some(Err(_)) => Sampled {
                root_refused: Some("the sampler failed".into()),
                ..Sampled::default()
            },
            None => Sampled {
                root_refused: Some("the sampling thread could not be started".into()),
                ..Sampled::default()
            },
        }
    }
}

/// One process being read: what its readers share.
struct Process {
    shared: Arc<ProcessShared>,
}

/// What the readers of one process share.
struct ProcessShared {
    pid: u32,
    /// The trace folder holding the recorders' tracing flags.
    flags: Option<PathBuf>,
    config: py_spy::Config,
    admission: Admission,
    rate_hz: u32,
    samples: Mutex<Interned>,
    /// Its readers' threads (the first starts the others once admitted).
    readers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Its admitted readers: each reads every `reading / rate_hz`.
    reading: std::sync::atomic::AtomicU32,
    /// The sampler's stop.
    stop: Arc<AtomicBool>,
    /// Set by a reader that found the process ended.
    ended: AtomicBool,
    /// Where its threads' descriptors keep their kernel ids (CPython before 3.11).
    kernel_ids: crate::record::thread_ids::KernelIdOffset,
}

impl Process {
    /// Starts its first reader, with `first` (the spy that attached).
    fn start(first: py_spy::PythonSpy, pid: u32, tree: &Tree, stop: &Arc<AtomicBool>) -> Process {
        let shared = Arc::new(ProcessShared {
            pid,
            flags: tree.flags.clone(),
            config: tree.config.clone(),
            admission: tree.admission.clone(),
            rate_hz: tree.rate_hz,
            samples: Mutex::new(Interned::new(tree.rate_hz)),
            readers: Mutex::default(),
            reading: std::sync::atomic::AtomicU32::new(0),
            stop: Arc::clone(stop),
            ended: AtomicBool::new(false),
            kernel_ids: Default::default(),
        });
        Reader::spawn(&shared, 0, Some(first));
        Process { shared }
    }

    fn ended(&self) -> bool {
        self.shared.ended.load(Ordering::Acquire)
    }

    /// Waits for its readers (stopped, or the process ended; one waiting for the flag is
    /// woken) and hands over their samples.
    fn finish(self) -> HostSamples {
        // A first reader may start the others while it is waited for: until none is left.
        loop {
            let readers = std::mem::take(&mut *lock_any(&self.shared.readers));
            if readers.is_empty() {
                break;
            }
            for r in readers {
                r.thread().unpark();
                let _ = r.join();
            }
        }
        let mut samples = lock_any(&self.shared.samples);
        let rate_hz = samples.out.rate_hz;
        std::mem::replace(&mut *samples, Interned::new(rate_hz)).finish()
    }
}

/// A lock, whether or not a reader panicked holding it (the samples stay good).
fn lock_any<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Who may read beyond one reader a process: readers of processes that trace, up to a share
/// of the host's cores ([`READER_CORES_DIVISOR`]).
#[derive(Clone)]
struct Admission {
    active: Arc<std::sync::atomic::AtomicUsize>,
    share: usize,
}

impl Admission {
    fn new(cores: usize) -> Admission {
        Admission {
            active: Arc::default(),
            share: cores / READER_CORES_DIVISOR as usize,
        }
    }

    /// Admits reader `index` of its process: the first always, the others while the active
    /// readers are fewer than the share. An admitted reader [`Admission::leave`]s at its end.
    fn admit(&self, index: u32) -> bool {
        let before = self.active.fetch_add(1, Ordering::AcqRel);
        if index == 0 || before < self.share {
            return true;
        }
        self.leave();
        false
    }

    fn leave(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One reader of a process.
struct Reader {
    shared: Arc<ProcessShared>,
    /// Its place among its process's readers (0 reads with the spy that attached, and starts
    /// the others).
    index: u32,
    /// Its recorder's tracing flag, once it has written one.
    flag: Option<std::fs::File>,
    /// The spy that attached (the first reader's); the others attach once admitted.
    spy: Option<py_spy::PythonSpy>,
}

impl Reader {
    /// Starts reader `index` of a process in its own thread.
    fn spawn(shared: &Arc<ProcessShared>, index: u32, spy: Option<py_spy::PythonSpy>) {
        let reader = Reader {
            shared: Arc::clone(shared),
            index,
            flag: None,
            spy,
        };
        let thread = std::thread::Builder::new()
            .name(format!("gapscope-host-samples-{}-{index}", shared.pid))
            .spawn(move || reader.run());
        if let Ok(thread) = thread {
            lock_any(&shared.readers).push(thread);
        }
    }

    fn over(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire) || self.shared.ended.load(Ordering::Acquire)
    }

    /// The first reader waits for its process's recorder to write its tracing flag (a
    /// process that never initialises CUDA, such as torch.compile's workers or torchrun's
    /// launcher, costs one thread and a look every [`DISCOVER_PERIOD`]), is admitted and
    /// starts the others ([`READERS_PER_PROCESS`] in all). Each admitted reader then reads,
    /// the `index`-th `index / READERS_PER_PROCESS` of a period in, every `readers / rate`
    /// (its process's admitted readers) while the recorder traces, until the sampler stops or
    /// the process ended (then it sets `ended`).
    fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        while !self.flag_found() {
            if !is_alive(shared.pid) {
                shared.ended.store(true, Ordering::Release);
                return;
            }
            // `Process::finish` wakes it.
            std::thread::park_timeout(DISCOVER_PERIOD);
            if self.over() {
                return;
            }
        }
        if !shared.admission.admit(self.index) {
            return;
        }
        shared.reading.fetch_add(1, Ordering::AcqRel);
        if self.index == 0 {
            for i in 1..READERS_PER_PROCESS {
                Reader::spawn(&shared, i, None);
            }
        }
        let spy = self.spy.take().or_else(|| {
            py_spy::PythonSpy::new(i32::try_from(shared.pid).ok()?, &shared.config).ok()
        });
        if let Some(mut spy) = spy {
            let period = |readers: u32| Duration::from_secs(1) * readers / shared.rate_hz;
            let mut next =
                Instant::now() + period(READERS_PER_PROCESS) * self.index / READERS_PER_PROCESS;
            while !self.over() {
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                if self.traces() && !self.read(&mut spy) {
                    shared.ended.store(true, Ordering::Release);
                }
                next += period(shared.reading.load(Ordering::Acquire).max(1));
                // Behind (a read slower than the period): start again from now.
                next = next.max(Instant::now());
            }
        }
        shared.reading.fetch_sub(1, Ordering::AcqRel);
        shared.admission.leave();
    }

    /// Whether its recorder has written its tracing flag (always, without tracing flags:
    /// the whole run is read).
    fn flag_found(&mut self) -> bool {
        let Some(dir) = self.shared.flags.as_deref() else {
            return true;
        };
        if self.flag.is_none() {
            let path = crate::record::env::tracing_flag_path(dir, self.shared.pid);
            self.flag = std::fs::File::open(path).ok();
        }
        self.flag.is_some()
    }

    /// Whether its recorder traces now (always, without tracing flags).
    fn traces(&self) -> bool {
        match (&self.shared.flags, &self.flag) {
            (None, _) => true,
            (Some(_), Some(flag)) => crate::record::env::reads_tracing(flag).unwrap_or(false),
            (Some(_), None) => false,
        }
    }

    /// One read of every Python thread's stack; `false` once the process has ended.
    fn read(&mut self, spy: &mut py_spy::PythonSpy) -> bool {
        let began = SystemTime::now();
        let clock = Instant::now();
        let traces = spy.get_stack_traces();
        let read_ns = u32::try_from(clock.elapsed().as_nanos()).unwrap_or(u32::MAX);
        let traces = traces.map(|mut traces| {
            self.shared.kernel_ids.fill(self.shared.pid, &mut traces);
            traces
        });
        let mut samples = lock_any(&self.shared.samples);
        match traces {
            Ok(traces) => {
                let time = realtime_ns(began);
                for t in &traces {
                    samples.add(time, read_ns, t);
                }
                true
            }
            Err(_) => {
                samples.failed_reads += 1;
                is_alive(self.shared.pid)
            }
        }
    }
}

/// A process not (yet) readable: when it was first seen, and why it failed last.
struct Pending {
    since: Instant,
    error: String,
    /// Its command (`/proc/PID/comm`) when last tried.
    command: String,
}

impl Pending {
    /// Why it was not read: for a process that ended while still tried, that (py-spy's reason
    /// is then no more than "not Python yet"); else py-spy's reason, after its command.
    fn reason(self, ended: bool) -> String {
        if ended || self.error.is_empty() {
            return format!(
                "the program ended before it could be read (a process is tried for {} s, until its Python interpreter has started)",
                ATTACH_PATIENCE.as_secs()
            );
        }
        match self.command.as_str() {
            "" => self.error,
            command => format!("{command}: {}", self.error),
        }
    }
}

/// The sampler's loop: until `stop`, find processes and start their readers; collect those
/// that ended.
fn sample(root: u32, rate_hz: u32, flags: Option<PathBuf>, stop: &Arc<AtomicBool>) -> Sampled {
    let mut tree = Tree::new(root, rate_hz, flags);
    while !stop.load(Ordering::Acquire) {
        tree.discover(stop);
        tree.collect_ended();
        let next_discovery = Instant::now() + DISCOVER_PERIOD;
        // Look at `stop` often: `finish` waits for this loop.
        while !stop.load(Ordering::Acquire) && Instant::now() < next_discovery {
            std::thread::sleep(STOP_POLL);
        }
    }
    tree.finish()
}

/// How often the sampler's loop looks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(10);

/// The processes of the program's tree, by state.
struct Tree {
    root: u32,
    rate_hz: u32,
    /// The trace folder holding the recorders' tracing flags (see [`Sampler::start`]).
    flags: Option<PathBuf>,
    config: py_spy::Config,
    admission: Admission,
    /// Being read.
    live: BTreeMap<u32, Process>,
    /// Not readable yet.
    pending: BTreeMap<u32, Pending>,
    /// Read until they ended.
    done: BTreeMap<u32, HostSamples>,
    /// Not readable: py-spy's reason.
    refused: BTreeMap<u32, String>,
}

impl Tree {
    fn new(root: u32, rate_hz: u32, flags: Option<PathBuf>) -> Tree {
        Tree {
            root,
            rate_hz,
            flags,
            config: py_spy_config(),
            admission: Admission::new(
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            ),
            live: BTreeMap::new(),
            pending: BTreeMap::new(),
            done: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    fn known(&self, pid: u32) -> bool {
        self.live.contains_key(&pid)
            || self.pending.contains_key(&pid)
            || self.done.contains_key(&pid)
            || self.refused.contains_key(&pid)
    }

    /// Finds new processes below the root and tries every pending one once; gives up on those
    /// tried for [`ATTACH_PATIENCE`] or gone.
    fn discover(&mut self, stop: &Arc<AtomicBool>) {
        for pid in process_tree(self.root) {
            if !self.known(pid) {
                let since = Instant::now();
                let (error, command) = (String::new(), String::new());
                let p = Pending {
                    since,
                    error,
                    command,
                };
                self.pending.insert(pid, p);
            }
        }
        let pids: Vec<u32> = self.pending.keys().copied().collect();
        for pid in pids {
            let Ok(raw) = i32::try_from(pid) else {
                continue;
            };
            let attached = py_spy::PythonSpy::new(raw, &self.config);
            let Some(mut p) = self.pending.remove(&pid) else {
                continue;
            };
            match attached {
                Ok(spy) => {
                    let process = Process::start(spy, pid, self, stop);
                    self.live.insert(pid, process);
                }
                Err(e) => {
                    let alive = is_alive(pid);
                    if let Ok(command) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                        p.command = command.trim().to_owned();
                    }
                    p.error = one_line(&e);
                    if !alive || p.since.elapsed() >= ATTACH_PATIENCE {
                        self.refused.insert(pid, p.reason(!alive));
                    } else {
                        self.pending.insert(pid, p);
                    }
                }
            }
        }
    }

    /// Moves the processes whose readers found them ended to `done`.
    fn collect_ended(&mut self) {
        let ended: Vec<u32> = self
            .live
            .iter()
            .filter_map(|(&pid, p)| p.ended().then_some(pid))
            .collect();
        for pid in ended {
            if let Some(p) = self.live.remove(&pid) {
                self.done.insert(pid, p.finish());
            }
        }
    }

    fn finish(mut self) -> Sampled {
        let live = std::mem::take(&mut self.live);
        self.done
            .extend(live.into_iter().map(|(pid, p)| (pid, p.finish())));
        let attached = self.done.len();
        self.done.retain(|_, s| !s.samples.is_empty());
        let root = self.root;
        Sampled {
            attached,
            processes: self.done,
            root_refused: self.refused.remove(&root).or_else(|| {
                let ended = !is_alive(root);
                self.pending.remove(&root).map(|p| p.reason(ended))
            }),
        }
    }
}

/// How gapscope reads Python stacks with py-spy, here and for graph nodes
/// ([`crate::record::cupti`]): never pausing the process, Python frames only.
pub fn py_spy_config() -> py_spy::Config {
    py_spy::Config {
        blocking: LockingStrategy::NonBlocking,
        native: false,
        ..py_spy::Config::default()
    }
}

/// py-spy's error as one line: its message, and its root cause where that says more
/// ("Failed to open process - check if it is running.: Permission denied (os error 13)").
fn one_line(e: &anyhow::Error) -> String {
    let (top, root) = (e.to_string(), e.root_cause().to_string());
    let line = if top.contains(&root) {
        top
    } else {
        format!("{top}: {root}")
    };
    line.replace('\n', " ")
}

/// Whether `pid` runs (exists and is no zombie waiting for its parent).
fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// `CLOCK_REALTIME` in ns (what [`SystemTime`] reads on Linux).
fn realtime_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Samples of one process as they come, frames and stacks interned.
struct Interned {
    out: HostSamples,
    frames: FxHashMap<HostFrame, u32>,
    stacks: FxHashMap<Vec<u32>, u32>,
    failed_reads: u64,
}

impl Interned {
    fn new(rate_hz: u32) -> Interned {
        Interned {
            out: HostSamples {
                sampler: format!(
                    "py-spy {}, non-blocking (the program is never stopped)",
                    PY_SPY_VERSION
                ),
                rate_hz,
                clock: "CLOCK_REALTIME read by gapscope record just before each read, the clock of CUPTI's records on Linux: offset 0 by construction; each sample's read_ns is its uncertainty; samples more than 1 s from every API record of the trace are not kept (away_from_records)".into(),
                ..HostSamples::default()
            },
            frames: FxHashMap::default(),
            stacks: FxHashMap::default(),
            failed_reads: 0,
        }
    }

    /// One thread's stack; a thread whose OS id was not found ([`crate::record::thread_ids`])
    /// is left out (nothing in the trace could name it).
    fn add(&mut self, time: u64, read_ns: u32, t: &py_spy::StackTrace) {
        let Some(thread) = t.os_thread_id.and_then(|id| u32::try_from(id).ok()) else {
            return;
        };
        if self.out.samples.len() >= MAX_SAMPLES_PER_PROCESS {
            self.out.left_out += 1;
            return;
        }
        let stack: Vec<u32> = t
            .frames
            .iter()
            .map(|f| {
                let frame = HostFrame {
                    file: f.filename.clone(),
                    function: f.name.clone(),
                    line: u32::try_from(f.line).unwrap_or(0),
                };
                let next = self.frames.len() as u32;
                *self.frames.entry(frame.clone()).or_insert_with(|| {
                    self.out.frames.push(frame);
                    next
                })
            })
            .collect();
        let next = self.stacks.len() as u32;
        let stack = match self.stacks.get(&stack) {
            Some(&i) => i,
            None => {
                self.out.stacks.push(stack.clone());
                self.stacks.insert(stack, next);
                next
            }
        };
        self.out.samples.push(HostSample {
            time,
            read_ns,
            thread,
            stack,
        });
    }

    fn finish(mut self) -> HostSamples {
        self.out.failed_reads = self.failed_reads;
        self.out
    }
}

/// Puts the samples of the process that wrote `trace` (the process id in its workload, as the
/// recorder writes it) into its file at `path` ([`crate::trace::add_host_samples`]); returns
/// what the `wrote` line says of them ("1234 host samples"), `None` when that process was not
/// sampled.
pub fn add_to_trace(
    sampled: &mut Sampled,
    path: &std::path::Path,
    trace: &Trace,
) -> Result<Option<String>, TraceError> {
    let Some(pid) = trace
        .metadata
        .workload
        .get("pid")
        .and_then(serde_json::Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())
    else {
        return Ok(None);
    };
    let Some(mut samples) = sampled.processes.remove(&pid) else {
        return Ok(None);
    };
    keep_near_records(&mut samples, trace);
    crate::trace::add_host_samples(path, &samples)?;
    let kept = samples.samples.len();
    Ok(Some(match samples.away_from_records {
        // None near the trace's records: the two clocks disagree, or the program sampled
        // only outside what was traced.
        away if kept == 0 && away > 0 => format!(
            "no host samples kept: all {away} were more than {} s from every API record (clocks apart, or nothing traced while it was sampled)",
            RECORD_MARGIN_NS / 1_000_000_000
        ),
        _ => format!("{kept} host samples"),
    }))
}

/// Samples farther than this from every API record of their trace are not kept (counted in
/// [`HostSamples::away_from_records`]): no gap can hold them. A second, so that a long host
/// stall between two traced calls keeps its samples, while the program's start (before
/// CUDA), its end and the long stretches the trace budget leaves untraced drop theirs.
pub const RECORD_MARGIN_NS: u64 = 1_000_000_000;

/// Keeps the samples within [`RECORD_MARGIN_NS`] of an API record's start or end (all of them
/// for a trace without API records).
fn keep_near_records(samples: &mut HostSamples, trace: &Trace) {
    let mut times: Vec<u64> = trace
        .api_calls
        .iter()
        .flat_map(|a| [a.start, a.end])
        .collect();
    if times.is_empty() {
        return;
    }
    times.sort_unstable();
    let offset = samples.offset_ns;
    let before = samples.samples.len();
    samples.samples.retain(|s| {
        let t = s.time.saturating_add_signed(offset);
        let i = times.partition_point(|&c| c < t);
        let after = times.get(i).map(|&c| c - t);
        let before = i.checked_sub(1).map(|j| t - times[j]);
        after
            .into_iter()
            .chain(before)
            .any(|d| d <= RECORD_MARGIN_NS)
    });
    samples.away_from_records = (before - samples.samples.len()) as u64;
}

/// The py-spy this build samples with (for the trace's [`HostSamples::sampler`]).
const PY_SPY_VERSION: &str = "0.4.3";

/// `root` and every live process below it, from each process's parent in `/proc/*/stat`.
pub fn process_tree(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![root];
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parent_of(&stat)?))
        })
        .collect();
    let mut tree = vec![root];
    let mut k = 0;
    while k < tree.len() {
        let p = tree[k];
        tree.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        k += 1;
    }
    tree
}

/// The parent pid in a `/proc/PID/stat` line (after the command's closing parenthesis, which
/// the command itself may contain).
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `python3 -c` child spinning in `gapscope_busy_loop` until killed.
    fn python_busy_loop() -> std::process::Child {
        busy_loop_of("python3")
    }

    /// `python -c`, spinning in `gapscope_busy_loop` until killed, once its interpreter runs
    /// (a loaded machine may take longer than a test's sleep to start one).
    fn busy_loop_of(python: &str) -> std::process::Child {
        let script = "def gapscope_busy_loop():\n    while True:\n        sum(range(100))\n\nprint('ready', flush=True)\ngapscope_busy_loop()\n";
        crate::record::interpreter_when_ready(python, script)
    }

    #[test]
    fn the_parent_is_read_after_the_command_whatever_it_holds() {
        assert_eq!(parent_of("42 (python3) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("42 (a) b) (c) R 9 1 1"), Some(9));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn readers_keep_to_a_quarter_of_the_cores_and_one_a_process_at_least() {
        let on_16 = Admission::new(16);
        let admitted: Vec<bool> = (0..3).map(|i| on_16.admit(i)).collect();
        assert_eq!(admitted, [true, true, true], "one process on 16 cores: 3");
        // A second process: its first reader always, no more (4 of 4 taken).
        assert!(on_16.admit(0));
        assert!(!on_16.admit(1));
        on_16.leave();
        assert!(on_16.admit(2), "a reader that left makes room");
        let on_2 = Admission::new(2);
        assert!(
            on_2.admit(0) && !on_2.admit(1),
            "2 cores: one reader a process"
        );
        assert_eq!(on_2.active.load(Ordering::Acquire), 1);
    }

    #[test]
    fn the_process_tree_holds_the_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let tree = process_tree(me);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree[0], me);
        assert!(tree.contains(&child.id()), "{tree:?}");
    }

    #[test]
    fn the_refusal_note_is_one_line_and_names_ptrace_for_a_permission_error() {
        let refused = Sampled {
            root_refused: Some("Permission denied (os error 1)".into()),
            ..Sampled::default()
        };
        let note = refused.note().unwrap();
        assert!(
            note.starts_with("no host samples: Permission denied"),
            "{note}"
        );
        assert!(note.contains("ptrace"), "{note}");
        assert!(!note.contains('\n'));
        let sampled = Sampled {
            processes: BTreeMap::from([(1, HostSamples::default())]),
            root_refused: Some("x".into()),
            attached: 1,
        };
        assert_eq!(sampled.note(), None, "a process sampled: nothing to say");
        let never_traced = Sampled {
            attached: 1,
            ..Sampled::default()
        };
        assert_eq!(never_traced.note(), None, "read, but it never traced");
    }

    #[test]
    fn samples_far_from_every_api_record_are_not_kept() {
        let mut trace = Trace::new(crate::trace::Metadata::default());
        let second = RECORD_MARGIN_NS;
        for start in [10 * second, 11 * second] {
            trace.api_calls.push(crate::trace::ApiCall {
                start,
                end: start + 1_000,
                ..Default::default()
            });
        }
        let at = |time: u64| HostSample {
            time,
            ..HostSample::default()
        };
        let mut samples = HostSamples {
            stacks: vec![Vec::new()],
            samples: [
                0,
                9 * second - 1,
                9 * second,
                10 * second + 500_000_000,
                12 * second + 1_000,
                13 * second,
            ]
            .into_iter()
            .map(at)
            .collect(),
            ..HostSamples::default()
        };
        keep_near_records(&mut samples, &trace);
        let kept: Vec<u64> = samples.samples.iter().map(|s| s.time).collect();
        assert_eq!(
            kept,
            [9 * second, 10 * second + 500_000_000, 12 * second + 1_000]
        );
        assert_eq!(samples.away_from_records, 3);
    }

    /// A real CPython process, sampled from outside: its named function is in the samples, on
    /// its main thread (whose OS id is the process id), at times of this run. Needs `python3`
    /// and ptrace permission on one's own child (the default `kernel.yama.ptrace_scope` ≤ 1):
    /// without them this fails with the sampler's note.
    #[test]
    fn samples_a_python_busy_loop_by_its_function_name() {
        samples_the_busy_loop_of("python3");
    }

    /// The same of CPython 3.9 or 3.10, which keep no kernel thread id for py-spy to read
    /// ([`crate::record::thread_ids`]): `TEST_OLD_CPYTHON` names the interpreter.
    #[test]
    #[ignore = "needs a CPython 3.9 or 3.10 named by TEST_OLD_CPYTHON"]
    fn samples_a_python_before_3_11_on_its_threads_kernel_ids() {
        let python = std::env::var("TEST_OLD_CPYTHON")
            .expect("TEST_OLD_CPYTHON names a CPython 3.9 or 3.10");
        samples_the_busy_loop_of(&python);
    }

    fn samples_the_busy_loop_of(python: &str) {
        let before = realtime_ns(SystemTime::now());
        let mut child = busy_loop_of(python);
        let sampler = Sampler::start(child.id(), SAMPLE_RATE_HZ, None);
        std::thread::sleep(Duration::from_millis(1500));
        let sampled = sampler.finish();
        let after = realtime_ns(SystemTime::now());
        let _ = child.kill();
        let _ = child.wait();
        let Some(samples) = sampled.processes.get(&child.id()) else {
            panic!("python3 not sampled: {:?}", sampled.note());
        };
        let named: Vec<&HostSample> = samples
            .samples
            .iter()
            .filter(|s| {
                samples
                    .stack(s.stack)
                    .any(|f| f.function == "gapscope_busy_loop")
            })
            .collect();
        assert!(
            named.len() >= 100,
            "{} of {} samples in gapscope_busy_loop",
            named.len(),
            samples.samples.len()
        );
        assert!(named.iter().all(|s| s.thread == child.id()), "main thread");
        assert!(named.iter().all(|s| s.time >= before && s.time <= after));
        assert_eq!(samples.rate_hz, SAMPLE_RATE_HZ);
        // Never above the rate: 1.5 s at 4 kHz, one Python thread. (How close to it the
        // readers keep is a timing, measured in benches/README.md, not asserted here.)
        let n = samples.samples.len();
        assert!(n <= 6100, "{n} samples in 1.5 s");
        assert!(samples.validate().is_ok());
        assert_eq!(sampled.note(), None);
    }

    /// With tracing flags, a process is read only while its flag says it traces: none before
    /// it writes one, none while it says `0`, samples once it says `1`.
    #[test]
    fn samples_follow_the_recorders_tracing_flag() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = python_busy_loop();
        let pid = child.id();
        let sampler = Sampler::start(pid, SAMPLE_RATE_HZ, Some(dir.path().to_path_buf()));
        std::thread::sleep(Duration::from_millis(700)); // no flag yet
        let flag = crate::record::env::TracingFlag::create(dir.path(), pid, false).unwrap();
        std::thread::sleep(Duration::from_millis(500)); // not tracing
        let switched = realtime_ns(SystemTime::now());
        flag.set(true);
        std::thread::sleep(Duration::from_millis(800));
        let sampled = sampler.finish();
        let _ = child.kill();
        let _ = child.wait();
        let Some(samples) = sampled.processes.get(&pid) else {
            panic!("python3 not sampled: {:?}", sampled.note());
        };
        assert!(samples.samples.len() >= 100, "{}", samples.samples.len());
        assert!(
            samples.samples.iter().all(|s| s.time >= switched),
            "no sample before the flag said tracing"
        );
    }

    /// A Python process that never writes a tracing flag (torch.compile's workers,
    /// torchrun's launcher) is attached but never read: `finish` hands over no samples and
    /// says nothing (it was readable).
    #[test]
    fn a_process_that_never_traces_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = python_busy_loop();
        let sampler = Sampler::start(child.id(), SAMPLE_RATE_HZ, Some(dir.path().to_path_buf()));
        std::thread::sleep(Duration::from_millis(600));
        let _ = child.kill();
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(500));
        let sampled = sampler.finish();
        assert!(
            sampled.processes.is_empty(),
            "{:?}",
            sampled.processes.keys()
        );
        assert_eq!(sampled.attached, 1);
        assert_eq!(sampled.note(), None);
    }

    /// A process that is not Python: nothing sampled, and one note that says why.
    #[test]
    fn a_process_that_is_not_python_is_refused_with_one_note() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let sampler = Sampler::start(child.id(), SAMPLE_RATE_HZ, None);
        std::thread::sleep(Duration::from_millis(300));
        let sampled = sampler.finish();
        let _ = child.kill();
        let _ = child.wait();
        assert!(sampled.processes.is_empty());
        let note = sampled.note().expect("a note");
        assert!(note.starts_with("no host samples: "), "{note}");
        assert!(
            note.to_lowercase().contains("python"),
            "py-spy's reason: {note}"
        );
        assert!(!note.contains('\n'), "{note}");
    }
}
