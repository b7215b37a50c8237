//! The trace file: schema types, reader (with version check, through [`input`]) and writer
//! ([`write_trace`], through [`crate::output`]).
#![forbid(unsafe_code)]

pub mod bundled;
mod durations;
mod host_samples;
pub mod input;
pub mod kineto;
pub mod nsys;
mod ranges;
mod schema;
pub mod synthetic;
mod upgrade;

pub use durations::{DurationHistogram, bucket_bounds, duration_bucket};
pub use host_samples::{HostFrame, HostSample, HostSamples};
pub use ranges::{
    HostRanges, RangeNameMatch, last_containing, outermost, range_name_match, range_name_parts,
    step_range_rule,
};
pub use schema::*;

pub use kineto::{ImportError, assign_step_cells, import_kineto, looks_like_kineto, read_kineto};

/// Host ranges (NVTX) that name a library call: NCCL's own API ranges (`ncclAllGather`,
/// `ncclGroupEnd`, …), whichever NCCL the program loaded. Graph nodes made inside one are
/// tagged with it, and eager ops launched inside one belong to it.
pub fn is_library_call_range(name: &str) -> bool {
    name.starts_with("nccl")
}

use std::io::Read;
use std::path::{Path, PathBuf};

/// Errors reading or writing a trace file. Each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a gapscope trace: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error(
        "{path}: trace schema version {found} is not supported (this gapscope reads version {supported}); re-record it or use a matching gapscope"
    )]
    UnsupportedVersion {
        path: PathBuf,
        found: u64,
        supported: u32,
    },
    #[error("{path}: inconsistent trace: {problem}")]
    Inconsistent {
        path: PathBuf,
        problem: InvalidTrace,
    },
    /// Another kind of file that PyTorch writes (see [`other_pytorch_file`]).
    #[error("{path}: {message}")]
    OtherPytorchFile { path: PathBuf, message: String },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Refused by a limit on the input ([`input`]), whatever its format.
    #[error("{path}: {message}")]
    Refused { path: PathBuf, message: String },
    /// A torch.profiler (Kineto) trace that cannot be imported.
    #[error(transparent)]
    Kineto(#[from] ImportError),
    /// An Nsight Systems export or report that cannot be imported (boxed: it is rare, and
    /// keeps every `Result` of this type small).
    #[error(transparent)]
    Nsys(Box<nsys::NsysError>),
}

impl TraceError {
    /// A read error: [`TraceError::Refused`] when a limit of [`input`] raised it.
    fn reading(path: &Path, source: std::io::Error) -> TraceError {
        match input::refusal(&source) {
            Some(message) => TraceError::Refused {
                path: path.to_owned(),
                message: message.to_owned(),
            },
            None => TraceError::Io {
                path: path.to_owned(),
                source,
            },
        }
    }
}

/// The first problem [`Trace::validate`] (or [`HostSamples::validate`]) finds: typed so that
/// callers can carry it; each displays as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTrace {
    #[error("{what} #{index} names string {id}, but there are only {count}")]
    StringOutOfRange {
        what: &'static str,
        index: usize,
        id: StrId,
        count: u64,
    },
    #[error("{what} #{index} ends ({end}) before it starts ({start})")]
    EndsBeforeStart {
        what: &'static str,
        index: usize,
        start: u64,
        end: u64,
    },
    #[error("marker #{index} refers to cell {cell}, but there are only {count}")]
    CellOutOfRange {
        index: usize,
        cell: u32,
        count: usize,
    },
    #[error("host stack #{stack} names frame {frame}, but there are only {count}")]
    FrameOutOfRange {
        stack: usize,
        frame: u32,
        count: usize,
    },
    #[error("host sample #{sample} names stack {stack}, but there are only {count}")]
    StackOutOfRange {
        sample: usize,
        stack: u32,
        count: usize,
    },
}

/// Parses a trace from bytes. `path` is only used in error messages.
pub fn parse_trace(bytes: &[u8], path: &Path) -> Result<Trace, TraceError> {
    refuse_other_pytorch_file(bytes, path)?;
    check_start(bytes).map_err(|e| TraceError::Malformed {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    // Check the version before the full parse so a newer schema is refused with the right
    // message rather than with a field error.
    let version = peek_schema_version(bytes).map_err(|e| TraceError::Malformed {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    if version != u64::from(SCHEMA_VERSION) {
        return Err(TraceError::UnsupportedVersion {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let trace: Trace = serde_json::from_slice(bytes).map_err(|e| TraceError::Malformed {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    trace
        .validate()
        .map_err(|problem| TraceError::Inconsistent {
            path: path.to_owned(),
            problem,
        })?;
    let mut trace = trace;
    // Recordings made before the recorder demangled names align with torch.profiler's too.
    trace.demangle_kernel_names();
    upgrade::upgrade(&mut trace);
    trace.cap_long_names();
    Ok(trace)
}

/// Whether an API call of this name launches a graph (`cudaGraphLaunch`, `cuGraphLaunch`, and
/// their `_ptsz` forms).
pub fn is_graph_launch_call(name: &str) -> bool {
    name.strip_prefix("cuda")
        .or_else(|| name.strip_prefix("cu"))
        .is_some_and(|n| n.starts_with("GraphLaunch"))
}

/// The copy kind of a `CUpti_ActivityMemcpyKind` value ("HtoD", "DtoD", …), as CUPTI
/// records and Nsight Systems exports (`copyKind`) number them; "unknown" for any other value.
pub fn memcpy_kind_name(kind: u32) -> &'static str {
    const NAMES: [&str; 11] = [
        "unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP",
    ];
    NAMES.get(kind as usize).copied().unwrap_or("unknown")
}

/// The workload key `gapscope record` sets (to `true`) when it chose the `step_range` itself.
pub const STEP_RANGE_CHOSEN: &str = "step_range_chosen";

/// The workload key naming the range whose ranges are the trace's steps.
const STEP_RANGE: &str = "step_range";

impl Metadata {
    /// Says in the workload that the ranges named `name` are the steps, and whether the
    /// recorder (or an import) chose that range itself rather than being given it.
    pub fn set_step_range(&mut self, name: &str, chosen: bool) {
        self.workload.insert(STEP_RANGE.to_owned(), name.into());
        if chosen {
            self.workload
                .insert(STEP_RANGE_CHOSEN.to_owned(), true.into());
        }
    }

    /// The step range the recorder (or an import) chose itself, none being given (older
    /// recordings' notes are read into that field when the trace is read).
    pub fn chosen_step_range(&self) -> Option<&str> {
        let chosen = self.workload.get(STEP_RANGE_CHOSEN)?.as_bool() == Some(true);
        chosen.then(|| self.workload.get(STEP_RANGE)?.as_str())?
    }
}

/// The longest name kept whole (longer ones: [`Trace::cap_long_names`]).
pub const NAME_CAP_BYTES: usize = 4 << 10;

/// Reads and validates a gapscope trace file (gzip-compressed or not; a pipe works), within the
/// limits of [`input`]. Input that does not start like a JSON object is refused after its
/// first 64 KiB (so `/dev/zero` or a binary file is not read to its end).
pub fn read_trace(path: &Path) -> Result<Trace, TraceError> {
    let opened = input::Opened::open(path).map_err(|e| TraceError::reading(path, e))?;
    parse_opened(opened, path)
}

/// Reads a gapscope trace or imports a torch.profiler (Kineto) one, as the first bytes show
/// (after decompression): the path is opened and read once, so a pipe works as a file does. A
/// regular file that is an SQLite database is imported as an Nsight Systems export
/// ([`nsys::read_nsys`]).
pub fn read_any(path: &Path) -> Result<Trace, TraceError> {
    if nsys::is_sqlite_file(path) {
        return Ok(nsys::read_nsys(path)?);
    }
    let opened = input::Opened::open(path).map_err(|e| TraceError::reading(path, e))?;
    read_opened(opened, path, &kineto::ImportOptions::default())
}

/// [`read_any`] on a stream (a pipe, bytes in memory), a Kineto trace imported with `opts`;
/// `path` names it in errors.
pub fn read_any_from(
    reader: impl Read,
    path: &Path,
    opts: &kineto::ImportOptions,
) -> Result<Trace, TraceError> {
    let opened = input::Opened::new(reader).map_err(|e| TraceError::reading(path, e))?;
    read_opened(opened, path, opts)
}

/// A gapscope or Kineto trace, as the head of `opened` shows.
fn read_opened<R: Read>(
    opened: input::Opened<R>,
    path: &Path,
    opts: &kineto::ImportOptions,
) -> Result<Trace, TraceError> {
    if looks_like_kineto(opened.head()) {
        Ok(kineto::import_opened(opened, path, opts)?)
    } else {
        parse_opened(opened, path)
    }
}

/// The gapscope trace of an opened input.
fn parse_opened<R: Read>(opened: input::Opened<R>, path: &Path) -> Result<Trace, TraceError> {
    let head = opened.head();
    refuse_other_pytorch_file(head, path)?;
    if head.len() == input::HEAD_BYTES || head.is_empty() {
        check_start(head).map_err(|e| TraceError::Malformed {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    }
    let bytes = opened
        .read_all()
        .map_err(|e| TraceError::reading(path, e))?;
    parse_trace(&bytes, path)
}

/// What a file PyTorch writes that is not a profiler trace is, from its first bytes: an
/// execution trace (`torch.profiler.ExecutionTraceObserver`: a `schema` and a `nodes` array of
/// operators, no timings on a device) gets a name and the way to record what gapscope reads.
pub fn other_pytorch_file(head: &[u8]) -> Option<String> {
    let head = &head[..head.len().min(HEAD_BYTES)];
    let has_key = |key: &[u8]| {
        head.windows(key.len()).enumerate().any(|(at, w)| {
            w == key
                && head[at + key.len()..]
                    .iter()
                    .find(|b| !b.is_ascii_whitespace())
                    == Some(&b':')
        })
    };
    let execution_trace =
        has_key(b"\"schema\"") && has_key(b"\"nodes\"") && !has_key(b"\"schema_version\"");
    execution_trace.then(|| {
        "a PyTorch execution trace (`nodes` of operators, no device timings), not a profiler \
         trace: record with torch.profiler (activities=[ProfilerActivity.CPU, \
         ProfilerActivity.CUDA]) and pass the trace it exports (export_chrome_trace or \
         tensorboard_trace_handler)"
            .to_owned()
    })
}

/// [`other_pytorch_file`] as the error it is.
fn refuse_other_pytorch_file(head: &[u8], path: &Path) -> Result<(), TraceError> {
    match other_pytorch_file(head) {
        Some(message) => Err(TraceError::OtherPytorchFile {
            path: path.to_owned(),
            message,
        }),
        None => Ok(()),
    }
}

/// How much of a file is looked at before it is read whole.
const HEAD_BYTES: usize = input::HEAD_BYTES;

/// Why the input is no gapscope trace, found before or instead of the full parse: displays as
/// [`TraceError::Malformed`]'s message.
#[derive(Debug, thiserror::Error)]
enum NotATrace {
    #[error("the file is empty")]
    Empty,
    #[error("no JSON value in the first {bytes} bytes")]
    NoJsonValue { bytes: usize },
    #[error(
        "not JSON: byte {byte:#04x} at offset {offset} after the opening `{{` (a key or `}}` must follow)"
    )]
    NoKeyAfterBrace { byte: u8, offset: usize },
    #[error(
        "this is a gapscope report (report.json), not a trace: analyse the trace files it was made from"
    )]
    GapscopeReport,
    #[error(
        "the top level is an array; a gapscope trace is an object with `schema_version` (torch.profiler traces are objects with `traceEvents`)"
    )]
    TopLevelArray,
    #[error("the top level is null, not an object")]
    TopLevelNull,
    #[error("the top level is a single value, not an object")]
    TopLevelValue,
    #[error("not JSON: byte {byte:#04x} at offset {offset} (a gapscope trace is a JSON object)")]
    NotJson { byte: u8, offset: usize },
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("missing field `schema_version`")]
    NoSchemaVersion,
    #[error("`schema_version` {0} is not a non-negative integer")]
    VersionNotNonNegative(serde_json::Number),
    #[error("`schema_version` must be an integer, found {0}")]
    VersionNotInteger(serde_json::Value),
}

/// A trace is a JSON object: say what else the input is, from its first bytes.
fn check_start(bytes: &[u8]) -> Result<(), NotATrace> {
    let head = &bytes[..bytes.len().min(HEAD_BYTES)];
    let Some(at) = head.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Err(if bytes.is_empty() {
            NotATrace::Empty
        } else {
            NotATrace::NoJsonValue { bytes: head.len() }
        });
    };
    match head[at] {
        b'{' => {
            // An object's first key, or its end: anything else is not JSON, seen at once.
            if let Some(next) = head[at + 1..].iter().position(|b| !b.is_ascii_whitespace())
                && !matches!(head[at + 1 + next], b'"' | b'}')
            {
                return Err(NotATrace::NoKeyAfterBrace {
                    byte: head[at + 1 + next],
                    offset: at + 1 + next,
                });
            }
            if head
                .windows(25)
                .any(|w| w == b"\"gapscope_report_version\"")
            {
                return Err(NotATrace::GapscopeReport);
            }
            Ok(())
        }
        b'[' => Err(NotATrace::TopLevelArray),
        b'n' => Err(NotATrace::TopLevelNull),
        b'"' | b'-' | b'0'..=b'9' | b't' | b'f' => Err(NotATrace::TopLevelValue),
        other => Err(NotATrace::NotJson {
            byte: other,
            offset: at,
        }),
    }
}

/// Finds `schema_version` among the top-level keys without building the whole document.
fn peek_schema_version(bytes: &[u8]) -> Result<u64, NotATrace> {
    if let Some(v) = leading_schema_version(bytes) {
        return Ok(v);
    }
    walk_for_schema_version(bytes)
}

/// Fast path: gapscope writes `schema_version` as the first key, so `{"schema_version":N`
/// (with optional whitespace) is read directly; anything else returns `None`.
fn leading_schema_version(bytes: &[u8]) -> Option<u64> {
    let mut rest = bytes;
    let mut eat = |token: &[u8]| -> Option<()> {
        let trimmed = rest.trim_ascii_start();
        rest = trimmed.strip_prefix(token)?;
        Some(())
    };
    eat(b"{")?;
    eat(b"\"schema_version\"")?;
    eat(b":")?;
    let digits = rest.trim_ascii_start();
    let len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    // A number followed by a delimiter; leading zeros or fractions go the slow way.
    let after = digits.get(len..)?.trim_ascii_start();
    if len == 0
        || len > 19
        || (len > 1 && digits[0] == b'0')
        || !matches!(after.first(), Some(b',' | b'}'))
    {
        return None;
    }
    std::str::from_utf8(&digits[..len]).ok()?.parse().ok()
}

/// Slow path: a full tokenising pass that keeps only `schema_version`.
fn walk_for_schema_version(bytes: &[u8]) -> Result<u64, NotATrace> {
    #[derive(serde::Deserialize)]
    struct VersionOnly {
        schema_version: Option<serde_json::Value>,
    }
    let head: VersionOnly = serde_json::from_slice(bytes)?;
    match head.schema_version {
        None => Err(NotATrace::NoSchemaVersion),
        Some(serde_json::Value::Number(n)) => n.as_u64().ok_or(NotATrace::VersionNotNonNegative(n)),
        Some(other) => Err(NotATrace::VersionNotInteger(other)),
    }
}

/// Writes a trace file atomically (compact JSON).
pub fn write_trace(path: &Path, trace: &Trace) -> Result<(), TraceError> {
    crate::output::write_atomically_with(path, |w| {
        serde_json::to_writer(w, trace).map_err(std::io::Error::other)
    })?;
    Ok(())
}

impl From<crate::output::WriteError> for TraceError {
    fn from(e: crate::output::WriteError) -> TraceError {
        TraceError::Write {
            path: e.path,
            source: e.source,
        }
    }
}

/// Adds host samples to a trace file written without them (as `gapscope record` does once the
/// program has ended), atomically: the samples go in as the object's last field, the rest of
/// the file is copied as it is (a trace of millions of records is not parsed again). A file
/// that already holds host samples, or that is not a plain JSON object, is refused.
pub fn add_host_samples(path: &Path, samples: &HostSamples) -> Result<(), TraceError> {
    let bytes = std::fs::read(path).map_err(|e| TraceError::reading(path, e))?;
    let malformed = |message: &str| TraceError::Malformed {
        path: path.to_owned(),
        message: message.to_owned(),
    };
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .filter(|&i| bytes[i] == b'}' && bytes.first() == Some(&b'{'))
        .ok_or_else(|| malformed("not a plain JSON object: host samples not added"))?;
    if memchr::memmem::find(&bytes, b"\"host_samples\":").is_some() {
        return Err(malformed("it already holds host samples"));
    }
    let empty = bytes[1..end].iter().all(u8::is_ascii_whitespace);
    crate::output::write_atomically_with(path, |w| {
        w.write_all(&bytes[..end])?;
        w.write_all(if empty {
            b"\"host_samples\":"
        } else {
            b",\"host_samples\":"
        })?;
        serde_json::to_writer(&mut *w, samples).map_err(std::io::Error::other)?;
        w.write_all(b"}\n")
    })?;
    Ok(())
}

impl Trace {
    /// An empty trace of the current schema version.
    pub fn new(metadata: Metadata) -> Trace {
        Trace {
            schema_version: SCHEMA_VERSION,
            metadata,
            strings: Vec::new(),
            kernels: Vec::new(),
            memcpys: Vec::new(),
            memsets: Vec::new(),
            api_calls: Vec::new(),
            syncs: Vec::new(),
            event_records: Vec::new(),
            markers: Vec::new(),
            graph: GraphDag::default(),
            dropped_records: 0,
            host_samples: None,
        }
    }

    /// The device of the first device record (kernel, then copy, then memset): the device an
    /// import names; 0 when there is none.
    pub fn first_device(&self) -> u32 {
        self.kernels
            .first()
            .map(|k| k.device)
            .or_else(|| self.memcpys.first().map(|m| m.device))
            .or_else(|| self.memsets.first().map(|m| m.device))
            .unwrap_or(0)
    }

    /// Sorts every record list as a recording writes it: by start (device timestamp for event
    /// records), markers outer first when two start together.
    pub fn sort_records(&mut self) {
        self.kernels
            .sort_unstable_by_key(|k| (k.start, k.end, k.corr));
        self.memcpys
            .sort_unstable_by_key(|m| (m.start, m.end, m.corr));
        self.memsets
            .sort_unstable_by_key(|m| (m.start, m.end, m.corr));
        self.api_calls
            .sort_unstable_by_key(|a| (a.start, a.end, a.corr));
        self.syncs
            .sort_unstable_by_key(|s| (s.start, s.end, s.corr));
        self.event_records
            .sort_unstable_by_key(|e| (e.device_ts, e.corr));
        self.markers
            .sort_by_key(|m| (m.start, std::cmp::Reverse(m.end)));
    }

    /// Makes the plain ranges `name` names (an NVTX range, a torch `record_function`) step
    /// markers of cell 0, adding that cell if the trace has none. `name` names ranges of that
    /// whole name or, when none is called that, ranges whose last `|`-separated parts it is
    /// ([`range_name_match`]); a range inside another one named on its thread is part of that
    /// step, not one of its own. Returns how many it marked.
    pub fn mark_steps(&mut self, name: &str) -> usize {
        let mut matches: Vec<(usize, RangeNameMatch)> = Vec::new();
        let mut seen: std::collections::HashMap<StrId, Option<RangeNameMatch>> =
            std::collections::HashMap::new();
        for (i, m) in self.markers.iter().enumerate() {
            if m.kind != MarkerKind::Range {
                continue;
            }
            let found = *seen
                .entry(m.name)
                .or_insert_with(|| range_name_match(name, self.str(m.name)));
            if let Some(how) = found {
                matches.push((i, how));
            }
        }
        if matches.iter().any(|&(_, how)| how == RangeNameMatch::Whole) {
            matches.retain(|&(_, how)| how == RangeNameMatch::Whole);
        }
        let mut ranges: Vec<(u32, u64, u64, usize)> = matches
            .iter()
            .map(|&(i, _)| {
                let m = &self.markers[i];
                (m.thread, m.start, m.end, i)
            })
            .collect();
        ranges.sort_unstable_by_key(|&(thread, start, end, i)| {
            (thread, start, std::cmp::Reverse(end), i)
        });
        let spans: Vec<(u32, u64, u64)> = ranges.iter().map(|r| (r.0, r.1, r.2)).collect();
        let kept = outermost(&spans);
        for &k in &kept {
            let m = &mut self.markers[ranges[k].3];
            m.kind = MarkerKind::Step;
            m.cell = Some(0);
        }
        if !kept.is_empty() && self.metadata.cells.is_empty() {
            self.metadata.cells.push(Cell {
                label: format!("steps '{name}'"),
                ..Cell::default()
            });
        }
        kept.len()
    }

    /// Keeps only the cells whose `requested` has `key` = `value` (compared as JSON text, so
    /// `graph_usage_mode=2` and `launch=replay` both work): the step markers of the other cells
    /// go, and with them the device work launched inside them and every launch of a graph they
    /// launched (warm-ups included). Returns how many cells are kept.
    pub fn select_cells(&mut self, key: &str, value: &str) -> usize {
        let matches = |c: &Cell| {
            c.requested.get(key).is_some_and(|v| match v {
                serde_json::Value::String(s) => s == value,
                other => format!("{other}") == value,
            })
        };
        let keep: Vec<bool> = self.metadata.cells.iter().map(matches).collect();
        let dropped_marker = |m: &Marker| {
            m.kind == MarkerKind::Step
                && m.cell
                    .is_some_and(|c| !keep.get(c as usize).copied().unwrap_or(false))
        };
        let mut dropped: Vec<(u64, u64)> = self
            .markers
            .iter()
            .filter(|m| dropped_marker(m))
            .map(|m| (m.start, m.end))
            .collect();
        dropped.sort_unstable();
        let launched_in_dropped = |t: u64| last_containing(&dropped, |&r| r, t).is_some();
        let mut gone_corr = std::collections::HashSet::new();
        for a in &self.api_calls {
            if launched_in_dropped(a.start) {
                gone_corr.insert(a.corr);
            }
        }
        let gone_graphs: std::collections::HashSet<u32> = self
            .kernels
            .iter()
            .map(|k| (k.corr, k.graph))
            .chain(self.memcpys.iter().map(|m| (m.corr, m.graph)))
            .chain(self.memsets.iter().map(|m| (m.corr, m.graph)))
            .filter(|(corr, graph)| *graph != 0 && gone_corr.contains(corr))
            .map(|(_, graph)| graph)
            .collect();
        let kept =
            |corr: u32, graph: u32| !gone_corr.contains(&corr) && !gone_graphs.contains(&graph);
        self.kernels.retain(|k| kept(k.corr, k.graph));
        self.memcpys.retain(|m| kept(m.corr, m.graph));
        self.memsets.retain(|m| kept(m.corr, m.graph));
        self.markers.retain(|m| !dropped_marker(m));
        keep.iter().filter(|&&k| k).count()
    }

    /// Replaces mangled C++ kernel names (`_Z…`) by their demangled form, as torch.profiler
    /// shows them, so traces from both sources align by name. Names that fail to demangle
    /// stay as they are.
    pub fn demangle_kernel_names(&mut self) {
        let mut ids: Vec<StrId> = self.kernels.iter().map(|k| k.name).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let Some(name) = self.strings.get_mut(id as usize) else {
                continue;
            };
            if !name.starts_with("_Z") {
                continue;
            }
            if let Ok(demangled) = cpp_demangle::Symbol::new(name.as_bytes())
                .map_err(|_| ())
                .and_then(|sym| sym.demangle().map_err(|_| ()))
            {
                *name = demangled;
            }
        }
    }

    /// Cuts every name longer than [`NAME_CAP_BYTES`] to [`NAME_CAP_BYTES`]: its start (to a
    /// character boundary), then its length and a hash of the whole, so that names that
    /// differ still differ (alignment by name is unchanged) while reports and Perfetto traces,
    /// which repeat a name for every op, stay bounded. Adds one note saying so when any was cut.
    /// Returns how many were cut.
    pub fn cap_long_names(&mut self) -> usize {
        let mut cut = 0;
        let mut longest = 0;
        for name in &mut self.strings {
            if name.len() <= NAME_CAP_BYTES {
                continue;
            }
            longest = longest.max(name.len());
            // Room for the suffix (at most 52 bytes), so a cut name is not cut again.
            let mut end = NAME_CAP_BYTES - 64;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            let hash = {
                use std::hash::Hasher;
                let mut h = rustc_hash::FxHasher::default();
                h.write(name.as_bytes());
                h.finish()
            };
            let whole = name.len();
            name.truncate(end);
            name.push_str(&format!("…[{whole} bytes, #{hash:016x}]"));
            name.shrink_to_fit();
            cut += 1;
        }
        if cut > 0 {
            self.metadata.notes.push(format!(
                "{cut} name(s) longer than {} KiB (the longest {longest} bytes) are cut to {} KiB: their start, their length and a hash",
                NAME_CAP_BYTES >> 10,
                NAME_CAP_BYTES >> 10
            ));
        }
        cut
    }

    /// The string behind an id ("?" for an id out of range; `validate` rejects those).
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id as usize).map_or("?", String::as_str)
    }

    /// Checks every string reference and every interval; the first problem found, as one line.
    pub fn validate(&self) -> Result<(), InvalidTrace> {
        let n = self.strings.len() as u64;
        let check_str = |what: &'static str, index: usize, id: StrId| {
            if u64::from(id) < n {
                Ok(())
            } else {
                Err(InvalidTrace::StringOutOfRange {
                    what,
                    index,
                    id,
                    count: n,
                })
            }
        };
        let check_span = |what: &'static str, index: usize, start: u64, end: u64| {
            if start <= end {
                Ok(())
            } else {
                Err(InvalidTrace::EndsBeforeStart {
                    what,
                    index,
                    start,
                    end,
                })
            }
        };
        for (i, k) in self.kernels.iter().enumerate() {
            check_str("kernel", i, k.name)?;
            check_span("kernel", i, k.start, k.end)?;
        }
        for (what, ops) in [("memcpy", &self.memcpys), ("memset", &self.memsets)] {
            for (i, m) in ops.iter().enumerate() {
                check_str(what, i, m.kind)?;
                check_span(what, i, m.start, m.end)?;
            }
        }
        for (i, a) in self.api_calls.iter().enumerate() {
            check_str("api call", i, a.name)?;
            check_span("api call", i, a.start, a.end)?;
        }
        for (i, s) in self.syncs.iter().enumerate() {
            check_str("sync", i, s.kind)?;
            check_span("sync", i, s.start, s.end)?;
        }
        for (i, m) in self.markers.iter().enumerate() {
            check_str("marker", i, m.name)?;
            check_span("marker", i, m.start, m.end)?;
            if let Some(c) = m.cell
                && c as usize >= self.metadata.cells.len()
            {
                return Err(InvalidTrace::CellOutOfRange {
                    index: i,
                    cell: c,
                    count: self.metadata.cells.len(),
                });
            }
        }
        for (i, node) in self.graph.nodes.iter().enumerate() {
            for id in [
                node.created_by,
                node.library_call,
                node.library_frame,
                node.python_stack,
            ]
            .into_iter()
            .flatten()
            {
                check_str("graph node", i, id)?;
            }
        }
        if let Some(samples) = &self.host_samples {
            samples.validate()?;
        }
        Ok(())
    }
}

/// Builds a trace while interning strings.
#[derive(Debug)]
pub struct TraceBuilder {
    pub trace: Trace,
    index: rustc_hash::FxHashMap<String, StrId>,
}

impl TraceBuilder {
    pub fn new(metadata: Metadata) -> TraceBuilder {
        TraceBuilder {
            trace: Trace::new(metadata),
            index: rustc_hash::FxHashMap::default(),
        }
    }

    /// Returns the id of `s`, adding it on first use.
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = self.trace.strings.len() as StrId;
        self.trace.strings.push(s.to_owned());
        self.index.insert(s.to_owned(), id);
        id
    }

    pub fn finish(self) -> Trace {
        self.trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace of plain ranges (name, thread, start, end).
    fn ranges(of: &[(&str, u32, u64, u64)]) -> Trace {
        let mut b = TraceBuilder::new(Metadata::default());
        for &(name, thread, start, end) in of {
            let name = b.intern(name);
            b.trace.markers.push(Marker {
                start,
                end,
                name,
                thread,
                ..Default::default()
            });
        }
        b.finish()
    }

    fn steps(t: &Trace) -> Vec<(u64, u64)> {
        t.markers
            .iter()
            .filter(|m| m.kind == MarkerKind::Step)
            .map(|m| (m.start, m.end))
            .collect()
    }

    #[test]
    fn a_chosen_step_range_is_read_from_the_workload() {
        // (An older recording's note is read into the workload when the trace is read:
        // trace::upgrade.)
        let mut t = Trace::new(Default::default());
        assert_eq!(t.metadata.chosen_step_range(), None, "no step range");
        t.metadata
            .workload
            .insert("step_range".into(), "decode_step".into());
        assert_eq!(t.metadata.chosen_step_range(), None, "a given step range");
        let note = "recorder: step range `decode_step` chosen by the recorder: …".to_string();
        t.metadata.notes.push(note);
        assert_eq!(
            t.metadata.chosen_step_range(),
            None,
            "notes are not read here"
        );
        let chosen = STEP_RANGE_CHOSEN;
        t.metadata.workload.insert(chosen.into(), false.into());
        assert_eq!(
            t.metadata.chosen_step_range(),
            None,
            "the workload's word is final"
        );
        t.metadata.notes.clear();
        t.metadata.workload.insert(chosen.into(), true.into());
        assert_eq!(t.metadata.chosen_step_range(), Some("decode_step"));
    }

    #[test]
    fn a_step_range_marks_the_outermost_of_nested_ranges_and_a_whole_name_first() {
        let mut t = ranges(&[
            ("[b|warmup|fwd]", 1, 0, 100),
            ("[b|warmup|fwd]", 1, 10, 90),
            ("[b|measure|fwd]", 1, 200, 300),
            ("[b|measure|fwd]", 1, 210, 290),
            ("[b|measure|fwd]", 2, 250, 260),
        ]);
        assert_eq!(t.mark_steps("fwd"), 3);
        assert_eq!(steps(&t), [(0, 100), (200, 300), (250, 260)]);
        assert_eq!(t.metadata.cells[0].label, "steps 'fwd'");
        // Ranges of the whole name are the steps; the ones it ends are not.
        let mut t = ranges(&[("fwd", 1, 0, 100), ("a|fwd", 1, 200, 300)]);
        assert_eq!(t.mark_steps("fwd"), 1);
        assert_eq!(steps(&t), [(0, 100)]);
        assert_eq!(ranges(&[("a|fwd", 1, 0, 1)]).mark_steps("a|f"), 0);
    }

    #[test]
    fn schema_version_fast_and_slow_paths_agree() {
        for doc in [
            &br#"{"schema_version":1,"x":2}"#[..],
            br#"{ "schema_version" : 12 }"#,
            br#"{"metadata":{},"schema_version":3}"#,
            br#"{"schema_version":1.5}"#,
            br#"{"schema_version":"1"}"#,
            br#"{"schema_version":01}"#,
            br#"[1]"#,
            br#"{"other":1}"#,
        ] {
            assert_eq!(
                leading_schema_version(doc).map(Some),
                leading_schema_version(doc).map(|_| walk_for_schema_version(doc).ok()),
                "{}",
                String::from_utf8_lossy(doc)
            );
        }
        assert_eq!(leading_schema_version(br#"{"schema_version":7,"#), Some(7));
        assert_eq!(
            leading_schema_version(br#"{"metadata":1,"schema_version":7}"#),
            None
        );
        assert_eq!(
            peek_schema_version(br#"{"metadata":1,"schema_version":7}"#).ok(),
            Some(7)
        );
        assert!(peek_schema_version(br#"{"schema_version":-1}"#).is_err());
    }

    #[test]
    fn long_names_are_cut_at_a_character_and_stay_distinct() {
        let mut b = TraceBuilder::new(Metadata::default());
        let long = "é".repeat(NAME_CAP_BYTES);
        let a = b.intern(&format!("{long}a"));
        let z = b.intern(&format!("{long}z"));
        let short = b.intern("short");
        let mut t = b.finish();
        assert_eq!(t.cap_long_names(), 2);
        let (a, z) = (t.str(a), t.str(z));
        assert_ne!(a, z);
        assert!(a.starts_with(&"é".repeat((NAME_CAP_BYTES - 64) / 2)), "{a}");
        assert!(a.len() <= NAME_CAP_BYTES, "{}", a.len());
        assert!(a.contains(&format!("…[{} bytes, #", 2 * NAME_CAP_BYTES + 1)));
        assert_eq!(t.str(short), "short");
        assert_eq!(t.metadata.notes.len(), 1);
        assert_eq!(t.cap_long_names(), 0, "once cut, a name is short");
    }

    #[test]
    fn kernel_names_are_demangled_once_and_others_kept() {
        let mut b = TraceBuilder::new(Metadata::default());
        let mangled = b.intern("_ZN2at6native13reduce_kernelILi128ELi4EEEvv");
        let plain = b.intern("coll_gather");
        let api = b.intern("_Znotakernel");
        for name in [mangled, plain, mangled] {
            b.trace.kernels.push(Kernel {
                name,
                ..Kernel::default()
            });
        }
        b.trace.api_calls.push(ApiCall {
            name: api,
            ..ApiCall::default()
        });
        let mut t = b.finish();
        t.demangle_kernel_names();
        assert!(
            t.str(mangled)
                .starts_with("void at::native::reduce_kernel<128, 4>"),
            "{}",
            t.str(mangled)
        );
        assert_eq!(t.str(plain), "coll_gather");
        assert_eq!(t.str(api), "_Znotakernel", "only kernel names change");
    }
}

#[cfg(test)]
mod old_spelling_tests {
    use super::*;

    #[test]
    fn old_launch_values_read_as_replay_and_fresh() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/emu-h200.json");
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let old: Vec<&str> = raw["metadata"]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["requested"]["launch"].as_str())
            .collect();
        assert!(old.contains(&"single-exec") && old.contains(&"exec-per-step"));

        let trace = read_trace(&path).unwrap();
        let mut launches: Vec<(&str, &str)> = trace
            .metadata
            .cells
            .iter()
            .filter_map(|c| Some((c.requested.get("launch")?.as_str()?, c.label.as_str())))
            .collect();
        launches.sort();
        assert_eq!(
            launches,
            [
                ("fresh", "graphed mode=1 emu fresh"),
                ("fresh", "graphed mode=2 emu fresh"),
                ("replay", "graphed mode=1 emu replay"),
                ("replay", "graphed mode=2 emu replay"),
            ]
        );
    }
}
