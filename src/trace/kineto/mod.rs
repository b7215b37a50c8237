//! torch.profiler (Kineto) Chrome-trace JSON → [`Trace`], streamed.
//!
//! The document is never built in memory. The input is read in blocks; the elements of the
//! top-level `traceEvents` array are parsed straight from the block's bytes by a small reader
//! that knows the keys the import uses (`scan`; templates of torch's layouts are tried first,
//! `templates`), on several threads at once (`stream`), and become compact records at once
//! (names interned, looked up by their bytes before anything is allocated). The rest of the
//! document (metadata, a few KiB) is parsed by serde after, with `traceEvents` left empty.
//! Memory is bounded by the imported records plus a block or two, not by the size of the JSON,
//! and the result does not depend on the block size or the number of threads. Gzip-compressed
//! files (torch's `.json.gz`) are decompressed as they stream.
//!
//! Mapping (complete events, `"ph": "X"`, by `cat`):
//!
//! | Kineto `cat` | gapscope record |
//! |---|---|
//! | `kernel` | [`Kernel`] (`args`: `device`, `stream`, `correlation`, `graph id`, `graph node id`) |
//! | `gpu_memcpy` | [`MemOp`] in `memcpys` (kind from the name, e.g. `HtoD`; `args.bytes`) |
//! | `gpu_memset` | [`MemOp`] in `memsets` (kind `memset`) |
//! | `cuda_runtime`, `cuda_driver` | [`ApiCall`] (`args.correlation`, thread from `tid`) |
//! | `user_annotation` (or `cpu_op`) named `ProfilerStep#N` | [`Marker`] of kind [`MarkerKind::Step`] |
//! | other `user_annotation` | [`Marker`] of kind [`MarkerKind::Range`] |
//! | `python_function` (`with_stack=True`) | [`Trace::host_samples`], exact: each thread's calls nested into spans of one innermost stack |
//!
//! Everything else (`cpu_op`, `gpu_user_annotation`, `ac2g` flow events —
//! redundant with correlation ids —, metadata events) is checked and skipped. Timestamps are
//! microseconds with fractional nanoseconds; they become nanoseconds (rounded to the nearest)
//! as they are, without `baseTimeNanoseconds` (torch 2.x on CUDA 13 writes absolute `ts` and a
//! base as well; only differences matter to the analysis). Kernels launched by
//! `cudaGraphLaunch` without a `graph id` argument (torch 2.x on CUDA 13 writes none) get
//! [`UNNAMED_GRAPH`].
//!
//! Step markers go to one cell; when a trace holds both eager steps and graph replays, eager
//! and graphed steps go to two cells so the analysis pairs them.
#![forbid(unsafe_code)]

mod bytes;
mod error;
mod numbers;
mod scan;
mod stream;
mod templates;

#[cfg(test)]
mod fixtures;

pub use stream::ImportOptions;

use crate::trace::input::{Opened, refusal};
use crate::trace::{
    ApiCall, ApiDomain, Cell, DeviceInfo, Kernel, Marker, MarkerKind, MemOp, Metadata, Source,
    StrId, Trace, TraceBuilder, Versions,
};
use error::{EventError, UnusableTrace};
use rustc_hash::FxHashMap;
use scan::{ArgVal, Cat, RawEvent, Str};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use stream::{EventsError, Input, Skeleton};

/// The note every imported trace carries (shown in every report).
pub const KINETO_NOTE: &str = "imported from torch.profiler (Kineto): no graph DAG; causes that \
need it (external event waits, host nodes) cannot be established";

/// Errors importing a Kineto trace. Each displays as one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a usable torch.profiler (Kineto) trace: {message}")]
    Malformed { path: PathBuf, message: String },
    /// Refused by a limit on the input ([`crate::trace::input`]), whatever its format.
    #[error("{path}: {message}")]
    Refused { path: PathBuf, message: String },
}

/// Whether the start of a file (its first few KiB) looks like a Kineto trace rather than a
/// gapscope trace: a `traceEvents`, `schemaVersion` or `deviceProperties` key before any
/// `schema_version` key (gapscope writes `schema_version` first). Gzip data counts as Kineto
/// (torch writes `.json.gz`; gapscope never compresses its traces).
pub fn looks_like_kineto(head: &[u8]) -> bool {
    if head.starts_with(&GZIP_MAGIC) {
        return true;
    }
    let find = |pat: &[u8]| head.windows(pat.len()).position(|w| w == pat);
    let kineto = [
        &b"\"traceEvents\""[..],
        b"\"schemaVersion\"",
        b"\"deviceProperties\"",
    ]
    .iter()
    .filter_map(|p| find(p))
    .min();
    match (kineto, find(b"\"schema_version\"")) {
        (Some(k), Some(g)) => k < g,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Opens and imports a Kineto trace file (gzip-compressed or not; a pipe works).
pub fn read_kineto(path: &Path) -> Result<Trace, ImportError> {
    let opened = Opened::open(path).map_err(|e| read_error(path, e))?;
    import_opened(opened, path, &ImportOptions::default())
}

/// Imports a torch.profiler (Kineto) Chrome trace, streaming, with the default
/// [`ImportOptions`]. `path` is only used in error messages and cell labels.
pub fn import_kineto(reader: impl Read, path: &Path) -> Result<Trace, ImportError> {
    import_kineto_with(reader, path, &ImportOptions::default())
}

/// The first bytes of gzip data.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// [`import_kineto`] with chosen block size and threads (the trace is the same with any).
/// Gzip data (torch writes `.json.gz` when asked) is decompressed as it streams, within the
/// limits of [`crate::trace::input`].
pub fn import_kineto_with(
    reader: impl Read,
    path: &Path,
    opts: &ImportOptions,
) -> Result<Trace, ImportError> {
    let opened = Opened::new(reader).map_err(|e| read_error(path, e))?;
    import_opened(opened, path, opts)
}

/// The import of an opened input (its head already read, see [`Opened`]).
pub(crate) fn import_opened<R: Read>(
    opened: Opened<R>,
    path: &Path,
    opts: &ImportOptions,
) -> Result<Trace, ImportError> {
    import_json(opened.into_reader(), path, opts).map_err(|e| match e {
        ImportError::Io { path, source } => read_error(&path, source),
        other => other,
    })
}

/// A read error: [`ImportError::Refused`] when a limit of the input raised it.
fn read_error(path: &Path, source: std::io::Error) -> ImportError {
    match refusal(&source) {
        Some(message) => ImportError::Refused {
            path: path.to_owned(),
            message: message.to_owned(),
        },
        None => ImportError::Io {
            path: path.to_owned(),
            source,
        },
    }
}

/// The import of the (decompressed) JSON text.
fn import_json(reader: impl Read, path: &Path, opts: &ImportOptions) -> Result<Trace, ImportError> {
    let io_error = |source| ImportError::Io {
        path: path.to_owned(),
        source,
    };
    let malformed = |message| ImportError::Malformed {
        path: path.to_owned(),
        message,
    };
    let mut input = Input::new(reader);
    input.fill(64 << 10).map_err(io_error)?;
    let mut imp = Importer::new();
    let mut skeleton = Skeleton::new();
    loop {
        if input.available().is_empty() {
            if input.eof {
                break;
            }
            input.fill(64 << 10).map_err(io_error)?;
            continue;
        }
        let (taken, opened) = skeleton.take(input.available());
        input.consume(taken);
        if opened {
            stream::events(&mut input, &mut imp.sink, opts).map_err(|e| match e {
                EventsError::Io(source) => io_error(source),
                EventsError::Bad {
                    index,
                    offset,
                    message,
                } => malformed(format!(
                    "traceEvents[{index}]: {message} (at byte {offset})"
                )),
                EventsError::CutShort { index } => malformed(format!(
                    "traceEvents[{index}]: the file ends early (cut short?)"
                )),
            })?;
            skeleton.close_events();
        }
    }
    imp.framed = skeleton.extracted;
    let mut de = serde_json::Deserializer::from_slice(&skeleton.bytes);
    let parsed = TopSeed(&mut imp)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Err(e) = parsed {
        return Err(imp.error(path, e));
    }
    imp.finish().map_err(|e| malformed(e.to_string()))
}

/// A serde_json error's message without its " at line L column C".
fn without_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match s.strip_suffix(&suffix) {
        Some(m) => m.to_owned(),
        None => s,
    }
}

/// Records imported so far and the names they use. Each thread of the stream fills its own;
/// they are appended in file order, so the trace does not depend on how the work was split.
struct Sink {
    b: TraceBuilder,
    /// Names as written (without escapes) → string id: a name seen before costs no UTF-8
    /// check and no copy.
    raw_names: FxHashMap<Box<[u8]>, StrId>,
    /// The ids of the names last looked up (written without escapes: their text is their
    /// bytes), by a cheap mix of their bytes: a name seen a moment ago (most events' names
    /// repeat) is found with one comparison, without hashing it.
    recent: [Option<StrId>; RECENT_NAMES],
    /// Memcpy name → kind.
    memcpy_kinds: FxHashMap<StrId, StrId>,
    /// Events read, imported or skipped: the index of the next one.
    events: u64,
    /// MTIA events (runtime calls, device activity): not imported, counted.
    mtia_events: u64,
    /// For a thread's sink: its string ids → the ids of the sink it is appended to.
    to_global: Vec<StrId>,
    /// `python_function` events: (start, end, thread, name).
    python: Vec<(u64, u64, u32, StrId)>,
}

impl Sink {
    fn new() -> Sink {
        Sink {
            b: TraceBuilder::new(Metadata::default()),
            raw_names: FxHashMap::default(),
            recent: [None; RECENT_NAMES],
            memcpy_kinds: FxHashMap::default(),
            events: 0,
            mtia_events: 0,
            to_global: Vec::new(),
            python: Vec::new(),
        }
    }

    fn name(&mut self, name: Option<Str>, what: &'static str) -> Result<StrId, EventError> {
        let name = name.ok_or(EventError::NoName { what })?;
        if name.escaped {
            return Ok(self.b.intern(&name.text()?));
        }
        let slot = recent_slot(name.raw);
        if let Some(id) = self.recent[slot]
            && self.b.trace.strings[id as usize].as_bytes() == name.raw
        {
            return Ok(id);
        }
        let id = match self.raw_names.get(name.raw) {
            Some(&id) => id,
            None => {
                let id = self.b.intern(&name.text()?);
                self.raw_names.insert(name.raw.into(), id);
                id
            }
        };
        self.recent[slot] = Some(id);
        Ok(id)
    }

    fn memcpy_kind(&mut self, name: StrId) -> StrId {
        if let Some(&kind) = self.memcpy_kinds.get(&name) {
            return kind;
        }
        let text = memcpy_kind(&self.b.trace.strings[name as usize]).to_owned();
        let kind = self.b.intern(&text);
        self.memcpy_kinds.insert(name, kind);
        kind
    }

    /// Turns one event into a record (or skips it).
    fn add_event(&mut self, ev: &RawEvent) -> Result<(), EventError> {
        if !ev.imported() {
            return Ok(());
        }
        if ev.cat == Cat::Mtia {
            self.mtia_events += 1;
            return Ok(());
        }
        let start = ev.ts.ok_or(EventError::NoTime { key: "ts" })?.to_ns("ts")?;
        let dur = ev
            .dur
            .ok_or(EventError::NoTime { key: "dur" })?
            .to_ns("dur")?;
        let end = start.checked_add(dur).ok_or(EventError::EndOverflows)?;
        let what = ev.cat.label();
        let a = &ev.args;
        match ev.cat {
            Cat::Kernel => {
                let d = DeviceArgs::of(a, what)?;
                let kernel = Kernel {
                    start,
                    end,
                    device: d.device,
                    stream: d.stream,
                    corr: d.corr,
                    name: self.name(ev.name, what)?,
                    graph: d.graph,
                    node: d.node,
                };
                self.b.trace.kernels.push(kernel);
            }
            Cat::Memcpy | Cat::Memset => self.add_mem_op(ev, start, end)?,
            Cat::Runtime | Cat::Driver => {
                let call = ApiCall {
                    start,
                    end,
                    corr: arg_u32(a.correlation, what, "correlation")?.unwrap_or(0),
                    thread: ev.tid.unwrap_or(0),
                    name: self.name(ev.name, what)?,
                    domain: if ev.cat == Cat::Runtime {
                        ApiDomain::Runtime
                    } else {
                        ApiDomain::Driver
                    },
                };
                self.b.trace.api_calls.push(call);
            }
            Cat::UserAnnotation | Cat::CpuOp => {
                let name = self.name(ev.name, what)?;
                let step = scan::is_step_name(self.b.trace.strings[name as usize].as_bytes());
                let marker = Marker {
                    start,
                    end,
                    name,
                    kind: if step {
                        MarkerKind::Step
                    } else {
                        MarkerKind::Range
                    },
                    thread: ev.tid.unwrap_or(0),
                    cell: None,
                };
                self.b.trace.markers.push(marker);
            }
            Cat::PythonFunction => {
                let name = self.name(ev.name, what)?;
                self.python.push((start, end, ev.tid.unwrap_or(0), name));
            }
            Cat::Mtia | Cat::Other => {}
        }
        Ok(())
    }

    /// A copy or memset event, `start` to `end` ns.
    fn add_mem_op(&mut self, ev: &RawEvent, start: u64, end: u64) -> Result<(), EventError> {
        let what = ev.cat.label();
        let name = self.name(ev.name, what)?;
        let kind = if ev.cat == Cat::Memcpy {
            self.memcpy_kind(name)
        } else {
            self.b.intern("memset")
        };
        let d = DeviceArgs::of(&ev.args, what)?;
        let op = MemOp {
            start,
            end,
            device: d.device,
            stream: d.stream,
            corr: d.corr,
            bytes: arg_u64(ev.args.bytes, what, "bytes")?.unwrap_or(0),
            kind,
            graph: d.graph,
            node: d.node,
        };
        if ev.cat == Cat::Memcpy {
            self.b.trace.memcpys.push(op);
        } else {
            self.b.trace.memsets.push(op);
        }
        Ok(())
    }

    /// Forgets the records read since the last append (names stay).
    fn clear_records(&mut self) {
        let t = &mut self.b.trace;
        t.kernels.clear();
        t.memcpys.clear();
        t.memsets.clear();
        t.api_calls.clear();
        t.markers.clear();
        self.python.clear();
        self.events = 0;
        self.mtia_events = 0;
    }

    /// Moves the records of `later`, read from the bytes right after this sink's, to the end of
    /// this one. `later` keeps its names and its allocations for the next block: its names are
    /// interned here once, in its order, so the string table is the one a single pass builds
    /// (a name it had before is here already, having been read earlier in the file).
    fn append(&mut self, later: &mut Sink) {
        let known = later.to_global.len();
        for s in &later.b.trace.strings[known..] {
            later.to_global.push(self.b.intern(s));
        }
        let ids = &later.to_global;
        let id = |old: StrId| ids[old as usize];
        let (from, to) = (&mut later.b.trace, &mut self.b.trace);
        to.kernels.extend(from.kernels.drain(..).map(|k| Kernel {
            name: id(k.name),
            ..k
        }));
        to.memcpys.extend(from.memcpys.drain(..).map(|m| MemOp {
            kind: id(m.kind),
            ..m
        }));
        to.memsets.extend(from.memsets.drain(..).map(|m| MemOp {
            kind: id(m.kind),
            ..m
        }));
        to.api_calls
            .extend(from.api_calls.drain(..).map(|a| ApiCall {
                name: id(a.name),
                ..a
            }));
        to.markers.extend(from.markers.drain(..).map(|m| Marker {
            name: id(m.name),
            ..m
        }));
        self.python.extend(
            later
                .python
                .drain(..)
                .map(|(s, e, thread, name)| (s, e, thread, id(name))),
        );
        self.events += std::mem::take(&mut later.events);
        self.mtia_events += std::mem::take(&mut later.mtia_events);
    }
}

/// Names kept in [`Sink::recent`].
const RECENT_NAMES: usize = 64;

/// The slot of [`Sink::recent`] for a name: its length and a few of its bytes, mixed.
fn recent_slot(raw: &[u8]) -> usize {
    let (len, first, last) = (raw.len(), raw.first(), raw.last());
    let byte = |b: Option<&u8>| usize::from(b.copied().unwrap_or(0));
    let middle = byte(raw.get(len / 2));
    (len.wrapping_mul(31) ^ byte(first).wrapping_mul(7) ^ byte(last) ^ middle.wrapping_mul(13))
        % RECENT_NAMES
}

/// What the top level and the events have filled in so far.
struct Importer {
    sink: Sink,
    /// Events were split off: error positions in the rest are not the file's.
    framed: bool,
    saw_events: bool,
    devices: Vec<DeviceInfo>,
    versions: Versions,
    rank: Option<u32>,
    world: Option<u32>,
}

impl Importer {
    fn new() -> Importer {
        Importer {
            sink: Sink::new(),
            framed: false,
            saw_events: false,
            devices: Vec::new(),
            versions: Versions::default(),
            rank: None,
            world: None,
        }
    }

    /// A parse error of the document around the events, as one line.
    fn error(&self, path: &Path, e: serde_json::Error) -> ImportError {
        if e.is_io() {
            return ImportError::Io {
                path: path.to_owned(),
                source: e.into(),
            };
        }
        let is_eof = e.is_eof();
        let e = if self.framed {
            without_position(&e)
        } else {
            e.to_string()
        };
        let message = if is_eof {
            format!("the file ends early (cut short?): {e}")
        } else {
            e
        };
        ImportError::Malformed {
            path: path.to_owned(),
            message,
        }
    }

    /// After the document: time base, device, cells, checks.
    fn finish(mut self) -> Result<Trace, UnusableTrace> {
        if !self.saw_events {
            return Err(UnusableTrace::NoTraceEvents);
        }
        let python = std::mem::take(&mut self.sink.python);
        let mut trace = self.sink.b.finish();
        trace.host_samples = python_stacks(&trace, python);
        if trace.kernels.is_empty() && trace.memcpys.is_empty() && trace.memsets.is_empty() {
            if self.sink.mtia_events > 0 {
                return Err(UnusableTrace::MtiaOnly {
                    events: self.sink.mtia_events,
                });
            }
            return Err(UnusableTrace::NoGpuActivity);
        }
        mark_graph_launches(&mut trace);
        let device = trace.first_device();
        let md = &mut trace.metadata;
        md.tool = format!("gapscope {} (Kineto import)", env!("CARGO_PKG_VERSION"));
        md.source = Source::Kineto;
        md.notes = vec![KINETO_NOTE.to_owned()];
        md.versions = self.versions;
        md.rank = self.rank.unwrap_or(0);
        md.world = self.world.unwrap_or(1).max(1);
        md.device = self
            .devices
            .iter()
            .find(|d| d.index == device)
            .or(self.devices.first())
            .cloned();
        assign_step_cells(&mut trace);
        trace.cap_long_names();
        trace.kernels.shrink_to_fit();
        trace.api_calls.shrink_to_fit();
        trace.markers.shrink_to_fit();
        trace.validate()?;
        Ok(trace)
    }

    fn device_properties(&mut self, v: serde_json::Value) {
        let Some(list) = v.as_array() else { return };
        for d in list {
            let int = |k: &str| d.get(k).and_then(serde_json::Value::as_u64);
            let Some(name) = d.get("name").and_then(serde_json::Value::as_str) else {
                continue;
            };
            self.devices.push(DeviceInfo {
                name: name.to_owned(),
                index: int("id").and_then(|i| u32::try_from(i).ok()).unwrap_or(0),
                compute_capability: match (int("computeMajor"), int("computeMinor")) {
                    (Some(a), Some(b)) => format!("{a}.{b}"),
                    _ => String::new(),
                },
            });
        }
    }
}

/// torch.profiler's Python calls (`with_stack=True`) as exact host samples: per thread, the
/// calls nested by time (a call that outlives its caller is cut at the caller's end), each
/// span of one innermost stack one sample, as long as the span (see
/// [`crate::trace::HostSamples::exact`]). `None` without `python_function` events.
fn python_stacks(
    trace: &Trace,
    mut calls: Vec<(u64, u64, u32, StrId)>,
) -> Option<crate::trace::HostSamples> {
    if calls.is_empty() {
        return None;
    }
    calls.sort_unstable_by_key(|&(s, e, thread, _)| (thread, s, std::cmp::Reverse(e)));
    let mut out = PythonStacks::default();
    for thread_calls in calls.chunk_by(|a, b| a.2 == b.2) {
        out.thread(trace, thread_calls);
    }
    Some(crate::trace::HostSamples {
        sampler: "torch.profiler with_stack=True (python_function events)".into(),
        rate_hz: 0,
        clock: "the trace's own (Kineto's timestamps)".into(),
        exact: true,
        ..out.samples
    })
}

/// [`python_stacks`] as it goes: frames and stacks interned.
#[derive(Default)]
struct PythonStacks {
    samples: crate::trace::HostSamples,
    frames: FxHashMap<StrId, u32>,
    stacks: FxHashMap<Vec<u32>, u32>,
}

impl PythonStacks {
    /// One thread's calls, sorted by start (longer first).
    fn thread(&mut self, trace: &Trace, calls: &[(u64, u64, u32, StrId)]) {
        // Open calls: (end, frame), outermost first.
        let mut open: Vec<(u64, u32)> = Vec::new();
        let mut at = 0;
        for &(start, end, thread, name) in calls {
            while let Some(&(top_end, _)) = open.last().filter(|c| c.0 <= start) {
                self.span(at, top_end, thread, &open);
                at = at.max(top_end);
                open.pop();
            }
            self.span(at, start, thread, &open);
            at = start;
            let end = open.last().map_or(end, |c| end.min(c.0));
            let frame = self.frame(trace, name);
            open.push((end, frame));
        }
        let thread = calls.first().map_or(0, |c| c.2);
        while let Some(&(top_end, _)) = open.last() {
            self.span(at, top_end, thread, &open);
            at = at.max(top_end);
            open.pop();
        }
    }

    /// The span `[from, to)` of the stack `open` (outermost first), split where longer than a
    /// sample's `read_ns` holds.
    fn span(&mut self, from: u64, to: u64, thread: u32, open: &[(u64, u32)]) {
        if open.is_empty() || to <= from {
            return;
        }
        let stack: Vec<u32> = open.iter().rev().map(|&(_, f)| f).collect();
        let next = self.stacks.len() as u32;
        let stack = *self.stacks.entry(stack).or_insert_with_key(|s| {
            self.samples.stacks.push(s.clone());
            next
        });
        let mut time = from;
        while time < to {
            let read_ns = u32::try_from(to - time).unwrap_or(u32::MAX);
            self.samples.samples.push(crate::trace::HostSample {
                time,
                read_ns,
                thread,
                stack,
            });
            time += u64::from(read_ns);
        }
    }

    fn frame(&mut self, trace: &Trace, name: StrId) -> u32 {
        let next = self.frames.len() as u32;
        *self.frames.entry(name).or_insert_with(|| {
            self.samples.frames.push(python_frame(trace.str(name)));
            next
        })
    }
}

/// A `python_function` event's name as a frame: `FILE(LINE): FUNCTION`, else the name as the
/// function of no file (`<built-in method …>`, `nn.Module: Linear_0`), an object address cut.
fn python_frame(name: &str) -> crate::trace::HostFrame {
    let parsed = name.split_once("): ").and_then(|(head, function)| {
        let (file, line) = head.rsplit_once('(')?;
        Some(crate::trace::HostFrame {
            file: file.to_owned(),
            function: function.to_owned(),
            line: line.parse().ok()?,
        })
    });
    parsed.unwrap_or_else(|| crate::trace::HostFrame {
        file: String::new(),
        function: name.split(" at 0x").next().unwrap_or(name).to_owned(),
        line: 0,
    })
}

/// Graph id given to device ops launched by a graph launch call when the trace names no graph
/// (torch 2.x with CUDA 13 writes no `graph id` argument): "some graph, id not recorded".
pub const UNNAMED_GRAPH: u32 = u32::MAX;

/// Ops without a graph id whose launching call is a graph launch (`cudaGraphLaunch`,
/// `cuGraphLaunch`) get [`UNNAMED_GRAPH`], so the analysis sees graph replays as such.
fn mark_graph_launches(t: &mut Trace) {
    let launch_names: Vec<u32> = t
        .strings
        .iter()
        .enumerate()
        .filter(|(_, s)| crate::trace::is_graph_launch_call(s))
        .map(|(i, _)| i as u32)
        .collect();
    if launch_names.is_empty() {
        return;
    }
    let mut corrs: Vec<u32> = t
        .api_calls
        .iter()
        .filter(|a| launch_names.contains(&a.name))
        .map(|a| a.corr)
        .collect();
    corrs.sort_unstable();
    let launched = |corr: u32| corrs.binary_search(&corr).is_ok();
    for k in &mut t.kernels {
        if k.graph == 0 && launched(k.corr) {
            k.graph = UNNAMED_GRAPH;
        }
    }
    for m in t.memcpys.iter_mut().chain(t.memsets.iter_mut()) {
        if m.graph == 0 && launched(m.corr) {
            m.graph = UNNAMED_GRAPH;
        }
    }
}

/// Puts the step markers into cells: one cell, or two (eager, graphed) when the trace holds
/// both: a step is graphed when a device op with a graph id was launched inside it (as the
/// analysis joins them: by the launching call's start and correlation id). Replaces
/// `metadata.cells`. The importer calls it; call it again after changing which markers are steps.
pub fn assign_step_cells(t: &mut Trace) {
    let mut graph_corrs: Vec<u32> = t
        .kernels
        .iter()
        .filter(|k| k.graph != 0)
        .map(|k| k.corr)
        .chain(
            t.memcpys
                .iter()
                .chain(&t.memsets)
                .filter(|m| m.graph != 0)
                .map(|m| m.corr),
        )
        .collect();
    graph_corrs.sort_unstable();
    graph_corrs.dedup();
    let graph_launches: Vec<u64> = t
        .api_calls
        .iter()
        .filter(|a| graph_corrs.binary_search(&a.corr).is_ok())
        .map(|a| a.start)
        .collect();
    let mut steps: Vec<usize> = (0..t.markers.len())
        .filter(|&i| t.markers[i].kind == MarkerKind::Step)
        .collect();
    steps.sort_unstable_by_key(|&i| (t.markers[i].start, t.markers[i].end));
    // A launch belongs to the last step marker starting at or before it (as in the analysis).
    let mut graphed = vec![false; steps.len()];
    let span = |&i: &usize| (t.markers[i].start, t.markers[i].end);
    for &launch in &graph_launches {
        if let Some(pos) = super::last_containing(&steps, span, launch) {
            graphed[pos] = true;
        }
    }
    let any_graphed = if steps.is_empty() {
        !graph_corrs.is_empty()
    } else {
        graphed.iter().any(|&g| g)
    };
    let all_graphed = !steps.is_empty() && graphed.iter().all(|&g| g);
    let cell = |label: &str, regime: &str| Cell {
        label: label.to_owned(),
        requested: BTreeMap::from([("regime".to_owned(), regime.into())]),
        ..Cell::default()
    };
    if any_graphed && !all_graphed && !steps.is_empty() {
        t.metadata.cells = vec![
            cell("torch.profiler eager steps", "eager"),
            cell("torch.profiler graphed steps", "graphed"),
        ];
        for (&i, &g) in steps.iter().zip(&graphed) {
            t.markers[i].cell = Some(u32::from(g));
        }
    } else {
        t.metadata.cells = vec![cell(
            "torch.profiler steps",
            if any_graphed { "graphed" } else { "eager" },
        )];
        for &i in &steps {
            t.markers[i].cell = Some(0);
        }
    }
}

/// `HtoD` from `Memcpy HtoD (Pageable -> Device)`; the whole name otherwise.
fn memcpy_kind(name: &str) -> &str {
    name.strip_prefix("Memcpy ")
        .and_then(|rest| rest.split(' ').next())
        .filter(|k| !k.is_empty())
        .unwrap_or(name)
}

/// The `args` every device op has.
struct DeviceArgs {
    device: u32,
    stream: u32,
    corr: u32,
    graph: u32,
    node: u64,
}

impl DeviceArgs {
    fn of(a: &scan::Args, what: &'static str) -> Result<DeviceArgs, EventError> {
        Ok(DeviceArgs {
            device: arg_u32(a.device, what, "device")?.unwrap_or(0),
            stream: required(arg_u32(a.stream, what, "stream")?, what, "stream")?,
            corr: required(
                arg_u32(a.correlation, what, "correlation")?,
                what,
                "correlation",
            )?,
            graph: arg_u32(a.graph, what, "graph id")?.unwrap_or(0),
            node: arg_u64(a.node, what, "graph node id")?.unwrap_or(0),
        })
    }
}

fn arg_u64(v: ArgVal, what: &'static str, key: &'static str) -> Result<Option<u64>, EventError> {
    match v {
        None => Ok(None),
        Some(None) => Err(EventError::NotAnInteger { what, key }),
        Some(Some(x)) => Ok(Some(x)),
    }
}

fn arg_u32(v: ArgVal, what: &'static str, key: &'static str) -> Result<Option<u32>, EventError> {
    arg_u64(v, what, key)?
        .map(|x| {
            u32::try_from(x).map_err(|_| EventError::Over32Bits {
                what,
                key,
                value: x,
            })
        })
        .transpose()
}

fn required(v: Option<u32>, what: &'static str, key: &'static str) -> Result<u32, EventError> {
    v.ok_or(EventError::RequiredArg { what, key })
}

#[derive(Clone, Copy)]
enum TopKey {
    TraceEvents,
    DeviceProperties,
    DistributedInfo,
    CudaRuntime,
    CudaDriver,
    Other,
}

fn top_key(s: &str) -> TopKey {
    match s {
        "traceEvents" => TopKey::TraceEvents,
        "deviceProperties" => TopKey::DeviceProperties,
        "distributedInfo" => TopKey::DistributedInfo,
        "cuda_runtime_version" => TopKey::CudaRuntime,
        "cuda_driver_version" => TopKey::CudaDriver,
        _ => TopKey::Other,
    }
}

/// "12.4" from Kineto's 12040.
fn cuda_version(v: &serde_json::Value) -> Option<String> {
    let v = v.as_u64()?;
    Some(format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// A string mapped through `f` without allocating (keys, `ph`, `cat`).
struct StrSeed<K> {
    what: &'static str,
    f: fn(&str) -> K,
}

impl<'de, K> DeserializeSeed<'de> for StrSeed<K> {
    type Value = K;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        d.deserialize_str(self)
    }
}

impl<K> Visitor<'_> for StrSeed<K> {
    type Value = K;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a string for {}", self.what)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<K, E> {
        Ok((self.f)(v))
    }
}

/// `traceEvents`: its elements were taken out by the stream, this checks it is an array.
struct EventsSeed;

impl<'de> DeserializeSeed<'de> for EventsSeed {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array for \"traceEvents\"")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// The top-level object.
struct TopSeed<'a>(&'a mut Importer);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object with a \"traceEvents\" array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let imp = self.0;
        while let Some(k) = map.next_key_seed(StrSeed {
            what: "a top-level key",
            f: top_key,
        })? {
            match k {
                TopKey::TraceEvents => {
                    if imp.saw_events {
                        return Err(de::Error::custom("two \"traceEvents\" arrays"));
                    }
                    map.next_value_seed(EventsSeed)?;
                    imp.saw_events = true;
                }
                TopKey::DeviceProperties => {
                    let v: serde_json::Value = map.next_value()?;
                    imp.device_properties(v);
                }
                TopKey::DistributedInfo => {
                    let v: serde_json::Value = map.next_value()?;
                    let int = |k: &str| {
                        v.get(k)
                            .and_then(serde_json::Value::as_u64)
                            .and_then(|x| u32::try_from(x).ok())
                    };
                    imp.rank = int("rank");
                    imp.world = int("world_size");
                }
                TopKey::CudaRuntime => {
                    let v: serde_json::Value = map.next_value()?;
                    imp.versions.cuda_runtime = cuda_version(&v);
                }
                TopKey::CudaDriver => {
                    let v: serde_json::Value = map.next_value()?;
                    imp.versions.driver = cuda_version(&v);
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcpy_kind_from_name() {
        assert_eq!(memcpy_kind("Memcpy HtoD (Pageable -> Device)"), "HtoD");
        assert_eq!(memcpy_kind("Memcpy DtoD (Device -> Device)"), "DtoD");
        assert_eq!(memcpy_kind("weird"), "weird");
    }

    #[test]
    fn sniffing() {
        assert!(looks_like_kineto(
            b"{\n  \"schemaVersion\": 1,\n  \"traceEvents\": []}"
        ));
        assert!(!looks_like_kineto(
            b"{\"schema_version\":1,\"metadata\":{\"notes\":[\"traceEvents\"]}}"
        ));
        assert!(!looks_like_kineto(b"not json"));
        assert!(looks_like_kineto(&[0x1f, 0x8b, 8, 0]));
    }
}
