//! torch.profiler (Kineto) Chrome-trace JSON → [`Trace`], streamed.
//!
//! The document is never built in memory. A scan over the buffered stream (strings, escapes,
//! nesting depth only) cuts each element of the top-level `traceEvents` array out and hands its
//! bytes to serde visitors, which turn it into a compact record at once (names interned, looked
//! up by `&str` before anything is allocated); the rest of the document (metadata, a few KiB) is
//! parsed after with `traceEvents` left empty. Memory is bounded by the imported records plus
//! one event, not by the size of the JSON; parsing each event from a slice is about twice as
//! fast as serde_json's reader-based parser.
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
//!
//! Everything else (`cpu_op`, `python_function`, `gpu_user_annotation`, `ac2g` flow events —
//! redundant with correlation ids —, metadata events) is skipped. Timestamps are microseconds
//! with fractional nanoseconds; they become nanoseconds (`round(x * 1000)`) as they are, without
//! `baseTimeNanoseconds` (torch 2.x on CUDA 13 writes absolute `ts` and a base as well; only
//! differences matter to the analysis). Kernels launched by `cudaGraphLaunch` without a
//! `graph id` argument (torch 2.x on CUDA 13 writes none) get [`UNNAMED_GRAPH`].
//!
//! Step markers go to one cell; when a trace holds both eager steps and graph replays, eager
//! and graphed steps go to two cells so the analysis pairs them.

use crate::trace::{
    ApiCall, ApiDomain, Cell, DeviceInfo, Kernel, Marker, MarkerKind, MemOp, Metadata, Source,
    Trace, TraceBuilder, Versions,
};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

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
}

/// Whether the start of a file (its first few KiB) looks like a Kineto trace rather than a
/// gapscope trace: a `traceEvents`, `schemaVersion` or `deviceProperties` key before any
/// `schema_version` key (gapscope writes `schema_version` first). Gzip data counts as Kineto
/// (torch writes `.json.gz`), so the importer can say what to do with it.
pub fn looks_like_kineto(head: &[u8]) -> bool {
    if head.starts_with(&[0x1f, 0x8b]) {
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

/// [`looks_like_kineto`] on the first 64 KiB of a file; `false` when it cannot be read (the
/// gapscope reader then reports why).
pub fn is_kineto_file(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(1 << 16);
    if file.take(1 << 16).read_to_end(&mut head).is_err() {
        return false;
    }
    looks_like_kineto(&head)
}

/// Opens and imports a Kineto trace file.
pub fn read_kineto(path: &Path) -> Result<Trace, ImportError> {
    let file = std::fs::File::open(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    import_kineto(file, path)
}

/// Imports a torch.profiler (Kineto) Chrome trace, streaming. `path` is only used in error
/// messages and cell labels.
pub fn import_kineto(reader: impl Read, path: &Path) -> Result<Trace, ImportError> {
    let mut reader = BufReader::with_capacity(1 << 17, reader);
    let head = reader.fill_buf().map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    if head.starts_with(&[0x1f, 0x8b]) {
        return Err(ImportError::Malformed {
            path: path.to_owned(),
            message: "gzip-compressed; decompress it first (gunzip -k FILE)".into(),
        });
    }
    let mut imp = Importer::new();
    // Events are cut out of the stream and parsed one by one; the rest of the document (small)
    // is parsed after, with `traceEvents` left as `[]`.
    let skeleton = frame(&mut reader, &mut imp).map_err(|e| match e {
        FrameError::Io(source) => ImportError::Io {
            path: path.to_owned(),
            source,
        },
        FrameError::Event(message) => ImportError::Malformed {
            path: path.to_owned(),
            message,
        },
    })?;
    let mut de = serde_json::Deserializer::from_slice(&skeleton);
    let parsed = TopSeed(&mut imp)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Err(e) = parsed {
        return Err(imp.error(path, e));
    }
    imp.finish().map_err(|message| ImportError::Malformed {
        path: path.to_owned(),
        message,
    })
}

enum FrameError {
    Io(std::io::Error),
    Event(String),
}

/// Splits the document as it streams by: the elements of the top-level `traceEvents` array go
/// one by one to [`EventSeed`] (each parsed from its own bytes, so memory holds one event at a
/// time); everything else is returned, with the array left empty, for [`TopSeed`].
///
/// The scan only tracks strings, escapes and nesting depth; anything it does not split (a
/// malformed document, an escaped key) stays in the returned bytes, where serde reports it.
fn frame(r: &mut impl BufRead, imp: &mut Importer) -> Result<Vec<u8>, FrameError> {
    let mut f = Framer {
        skeleton: Vec::new(),
        elem: Vec::new(),
        depth: 0,
        in_str: false,
        esc: false,
        expect_key: false,
        key_start: None,
        events_key: false,
        in_events: false,
        extracted: false,
        separated: false,
        line: 1,
    };
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FrameError::Io(e)),
        };
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        f.scan(chunk, imp)?;
        r.consume(n);
    }
    // Cut short inside the array: the skeleton is incomplete too, and its parse says so.
    imp.in_events = f.in_events;
    imp.framed = f.extracted;
    Ok(f.skeleton)
}

struct Framer {
    /// The document without the events.
    skeleton: Vec<u8>,
    /// Bytes of the event being read.
    elem: Vec<u8>,
    depth: u32,
    in_str: bool,
    esc: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// Start (in `skeleton`) of the depth-1 key being read.
    key_start: Option<usize>,
    /// The last depth-1 key was `traceEvents`.
    events_key: bool,
    /// Inside the `traceEvents` array.
    in_events: bool,
    /// Some array was split off (positions in `skeleton` then differ from the file's).
    extracted: bool,
    /// A `,` came before the event being read.
    separated: bool,
    /// Line of the file where `elem` starts (or of the scan, outside the array).
    line: u64,
}

impl Framer {
    fn scan(&mut self, chunk: &[u8], imp: &mut Importer) -> Result<(), FrameError> {
        let mut i = 0;
        while i < chunk.len() {
            if self.in_events {
                i = self.scan_events(chunk, i, imp)?;
            } else {
                self.skeleton_byte(chunk[i]);
                i += 1;
            }
        }
        Ok(())
    }

    /// Outside the array: byte by byte (the few KiB of metadata around it).
    fn skeleton_byte(&mut self, b: u8) {
        self.skeleton.push(b);
        if self.in_str {
            if self.esc {
                self.esc = false;
            } else if b == b'\\' {
                self.esc = true;
            } else if b == b'"' {
                self.in_str = false;
                if let Some(start) = self.key_start.take() {
                    let end = self.skeleton.len() - 1;
                    self.events_key = &self.skeleton[start..end] == b"traceEvents";
                    self.expect_key = false;
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_str = true;
                if self.depth == 1 && self.expect_key {
                    self.key_start = Some(self.skeleton.len());
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = b == b'{';
                } else if self.depth == 2 && b == b'[' && self.events_key && !self.expect_key {
                    self.in_events = true;
                    self.extracted = true;
                    self.separated = false;
                    self.elem.clear();
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.events_key = false;
            }
            b'\n' => self.line += 1,
            _ => {}
        }
    }

    /// Inside the array: finds the end of each event, skipping through strings in bulk.
    /// Returns where the scan stopped (the end of the chunk, or just after the array).
    fn scan_events(
        &mut self,
        chunk: &[u8],
        mut i: usize,
        imp: &mut Importer,
    ) -> Result<usize, FrameError> {
        let mut start = i;
        while i < chunk.len() {
            if self.in_str {
                if self.esc {
                    self.esc = false;
                    i += 1;
                    continue;
                }
                match find_quote_or_backslash(&chunk[i..]) {
                    None => i = chunk.len(),
                    Some(p) => {
                        i += p;
                        if chunk[i] == b'\\' {
                            self.esc = true;
                        } else {
                            self.in_str = false;
                        }
                        i += 1;
                    }
                }
                continue;
            }
            match chunk[i] {
                b'"' => self.in_str = true,
                b'{' | b'[' => self.depth += 1,
                // A stray `}` at the array's level stays in the event, whose parse fails.
                b'}' if self.depth > 2 => self.depth -= 1,
                b']' if self.depth > 2 => self.depth -= 1,
                b',' if self.depth == 2 => {
                    self.elem.extend_from_slice(&chunk[start..i]);
                    self.event(imp, false)?;
                    start = i + 1;
                }
                b']' if self.depth == 2 => {
                    self.elem.extend_from_slice(&chunk[start..i]);
                    self.event(imp, true)?;
                    self.in_events = false;
                    self.depth = 1;
                    self.skeleton.push(b']');
                    return Ok(i + 1);
                }
                _ => {}
            }
            i += 1;
        }
        self.elem.extend_from_slice(&chunk[start..]);
        Ok(i)
    }

    /// One element of the array (`last`: it ended with the closing `]`).
    fn event(&mut self, imp: &mut Importer, last: bool) -> Result<(), FrameError> {
        let lines = self.elem.iter().filter(|&&b| b == b'\n').count() as u64;
        if self.elem.iter().all(u8::is_ascii_whitespace) {
            // `[]` (or `[ ]`) is fine; `[,` or `,,` or `,]` is not.
            if !last || self.separated {
                return Err(FrameError::Event(format!(
                    "traceEvents[{}]: missing event (stray comma) near line {}",
                    imp.index, self.line
                )));
            }
        } else {
            let mut de = serde_json::Deserializer::from_slice(&self.elem);
            let parsed = EventSeed(&mut *imp)
                .deserialize(&mut de)
                .and_then(|()| de.end());
            if let Err(e) = parsed {
                let line = self.line + (e.line() as u64).saturating_sub(1);
                return Err(FrameError::Event(format!(
                    "traceEvents[{}]: {} at line {line}",
                    imp.index,
                    without_position(&e)
                )));
            }
            imp.index += 1;
        }
        self.line += lines;
        self.elem.clear();
        self.separated = !last;
        Ok(())
    }
}

/// Index of the first `"` or `\\` in `s`, eight bytes at a time (names and keys are most of a
/// Kineto file, and this is the scan's inner loop).
fn find_quote_or_backslash(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // High bit set in each byte of `x` that is zero; the lowest flagged byte is always right.
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut chunks = s.chunks_exact(8);
    let mut at = 0;
    for c in &mut chunks {
        let x = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        let hits =
            zero_bytes(x ^ (ONES * u64::from(b'"'))) | zero_bytes(x ^ (ONES * u64::from(b'\\')));
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|p| at + p)
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

/// What the top level and the events have filled in so far.
struct Importer {
    b: TraceBuilder,
    /// Name of the event being read (reused: no allocation per event).
    name: String,
    /// Index of the event being read in `traceEvents`.
    index: u64,
    in_events: bool,
    /// Events were split off by [`frame`]: error positions of the rest are not the file's.
    framed: bool,
    saw_events: bool,
    devices: Vec<DeviceInfo>,
    versions: Versions,
    rank: Option<u32>,
    world: Option<u32>,
}

impl Importer {
    fn new() -> Importer {
        let metadata = Metadata {
            tool: format!("gapscope {} (Kineto import)", env!("CARGO_PKG_VERSION")),
            source: Source::Kineto,
            notes: vec![KINETO_NOTE.to_owned()],
            ..Metadata::default()
        };
        Importer {
            b: TraceBuilder::new(metadata),
            name: String::new(),
            index: 0,
            in_events: false,
            framed: false,
            saw_events: false,
            devices: Vec::new(),
            versions: Versions::default(),
            rank: None,
            world: None,
        }
    }

    /// A parse error as one line, with the event it happened in.
    fn error(&self, path: &Path, e: serde_json::Error) -> ImportError {
        if e.is_io() {
            return ImportError::Io {
                path: path.to_owned(),
                source: e.into(),
            };
        }
        let is_eof = e.is_eof();
        let at = if self.in_events {
            format!("traceEvents[{}]: ", self.index)
        } else {
            String::new()
        };
        let e = if self.framed {
            without_position(&e)
        } else {
            e.to_string()
        };
        let message = if is_eof {
            format!("{at}the file ends early (cut short?): {e}")
        } else {
            format!("{at}{e}")
        };
        ImportError::Malformed {
            path: path.to_owned(),
            message,
        }
    }

    /// Turns one event into a record (or skips it).
    fn add_event(&mut self, ev: &Event) -> Result<(), String> {
        if ev.ph != Phase::Complete {
            return Ok(());
        }
        let start = to_ns(ev.ts.ok_or("complete (\"X\") event without \"ts\"")?, "ts")?;
        let dur = to_ns(
            ev.dur.ok_or("complete (\"X\") event without \"dur\"")?,
            "dur",
        )?;
        let end = start
            .checked_add(dur)
            .ok_or("\"ts\" + \"dur\" overflows 64-bit nanoseconds")?;
        let what = ev.cat.label();
        let a = &ev.args;
        match ev.cat {
            Cat::Kernel => {
                let kernel = Kernel {
                    start,
                    end,
                    device: arg_u32(a.device, what, "device")?.unwrap_or(0),
                    stream: required(arg_u32(a.stream, what, "stream")?, what, "stream")?,
                    corr: required(
                        arg_u32(a.correlation, what, "correlation")?,
                        what,
                        "correlation",
                    )?,
                    name: self.intern_name(ev, what)?,
                    graph: arg_u32(a.graph, what, "graph id")?.unwrap_or(0),
                    node: arg_u64(a.node, what, "graph node id")?.unwrap_or(0),
                };
                self.b.trace.kernels.push(kernel);
            }
            Cat::Memcpy | Cat::Memset => {
                if !ev.has_name {
                    return Err(format!("{what} event without \"name\""));
                }
                let kind = if ev.cat == Cat::Memcpy {
                    self.b.intern(memcpy_kind(&self.name))
                } else {
                    self.b.intern("memset")
                };
                let op = MemOp {
                    start,
                    end,
                    device: arg_u32(a.device, what, "device")?.unwrap_or(0),
                    stream: required(arg_u32(a.stream, what, "stream")?, what, "stream")?,
                    corr: required(
                        arg_u32(a.correlation, what, "correlation")?,
                        what,
                        "correlation",
                    )?,
                    bytes: arg_u64(a.bytes, what, "bytes")?.unwrap_or(0),
                    kind,
                    graph: arg_u32(a.graph, what, "graph id")?.unwrap_or(0),
                    node: arg_u64(a.node, what, "graph node id")?.unwrap_or(0),
                };
                if ev.cat == Cat::Memcpy {
                    self.b.trace.memcpys.push(op);
                } else {
                    self.b.trace.memsets.push(op);
                }
            }
            Cat::Runtime | Cat::Driver => {
                let call = ApiCall {
                    start,
                    end,
                    corr: arg_u32(a.correlation, what, "correlation")?.unwrap_or(0),
                    thread: ev.tid.unwrap_or(0),
                    name: self.intern_name(ev, what)?,
                    domain: if ev.cat == Cat::Runtime {
                        ApiDomain::Runtime
                    } else {
                        ApiDomain::Driver
                    },
                };
                self.b.trace.api_calls.push(call);
            }
            Cat::UserAnnotation | Cat::CpuOp => {
                if !ev.has_name {
                    return Err(format!("{what} event without \"name\""));
                }
                let step = self.name.starts_with("ProfilerStep#");
                if ev.cat == Cat::CpuOp && !step {
                    return Ok(());
                }
                let marker = Marker {
                    start,
                    end,
                    name: self.b.intern(&self.name),
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
            Cat::Other => {}
        }
        Ok(())
    }

    fn intern_name(&mut self, ev: &Event, what: &str) -> Result<u32, String> {
        if !ev.has_name {
            return Err(format!("{what} event without \"name\""));
        }
        Ok(self.b.intern(&self.name))
    }

    /// After the document: time base, device, cells, checks.
    fn finish(self) -> Result<Trace, String> {
        if !self.saw_events {
            return Err("no \"traceEvents\" array".into());
        }
        let mut trace = self.b.finish();
        if trace.kernels.is_empty() && trace.memcpys.is_empty() && trace.memsets.is_empty() {
            return Err(
                "no GPU activity (no \"kernel\", \"gpu_memcpy\" or \"gpu_memset\" \
                        events): profile with ProfilerActivity.CUDA"
                    .into(),
            );
        }
        mark_graph_launches(&mut trace);
        let md = &mut trace.metadata;
        md.versions = self.versions;
        md.rank = self.rank.unwrap_or(0);
        md.world = self.world.unwrap_or(1).max(1);
        let device = trace
            .kernels
            .first()
            .map(|k| k.device)
            .or_else(|| trace.memcpys.first().map(|m| m.device))
            .or_else(|| trace.memsets.first().map(|m| m.device))
            .unwrap_or(0);
        md.device = self
            .devices
            .iter()
            .find(|d| d.index == device)
            .or(self.devices.first())
            .cloned();
        assign_step_cells(&mut trace);
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
        .filter(|(_, s)| s.starts_with("cudaGraphLaunch") || s.starts_with("cuGraphLaunch"))
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
    let mut graph_launches: Vec<u64> = t
        .api_calls
        .iter()
        .filter(|a| graph_corrs.binary_search(&a.corr).is_ok())
        .map(|a| a.start)
        .collect();
    graph_launches.sort_unstable();
    let mut steps: Vec<usize> = (0..t.markers.len())
        .filter(|&i| t.markers[i].kind == MarkerKind::Step)
        .collect();
    steps.sort_unstable_by_key(|&i| (t.markers[i].start, t.markers[i].end));
    // A launch belongs to the last step marker starting at or before it (as in the analysis).
    let graphed: Vec<bool> = steps
        .iter()
        .enumerate()
        .map(|(pos, &i)| {
            let m = &t.markers[i];
            let until = steps
                .get(pos + 1)
                .map_or(m.end, |&n| m.end.min(t.markers[n].start.saturating_sub(1)));
            let first = graph_launches.partition_point(|&s| s < m.start);
            graph_launches.get(first).is_some_and(|&s| s <= until)
        })
        .collect();
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

fn to_ns(n: Num, what: &str) -> Result<u64, String> {
    match n {
        Num::Int(us) => us
            .checked_mul(1000)
            .ok_or_else(|| format!("\"{what}\" {us} µs overflows 64-bit nanoseconds")),
        Num::Float(us) => {
            let ns = (us * 1000.0).round();
            // 2^64 as f64; anything at or above it does not fit.
            if !(0.0..18_446_744_073_709_551_616.0).contains(&ns) {
                return Err(format!(
                    "\"{what}\" {us} µs is not a non-negative time that fits in 64-bit nanoseconds"
                ));
            }
            Ok(ns as u64)
        }
    }
}

fn arg_u64(v: ArgVal, what: &str, key: &str) -> Result<Option<u64>, String> {
    match v {
        None => Ok(None),
        Some(None) => Err(format!(
            "{what} event: args \"{key}\" is not a non-negative integer"
        )),
        Some(Some(x)) => Ok(Some(x)),
    }
}

fn arg_u32(v: ArgVal, what: &str, key: &str) -> Result<Option<u32>, String> {
    arg_u64(v, what, key)?
        .map(|x| {
            u32::try_from(x)
                .map_err(|_| format!("{what} event: args \"{key}\" {x} does not fit 32 bits"))
        })
        .transpose()
}

fn required(v: Option<u32>, what: &str, key: &str) -> Result<u32, String> {
    v.ok_or_else(|| format!("{what} event without a non-negative integer args \"{key}\""))
}

/// FNV-1a: a stable 32-bit thread id for a string `tid`.
fn hash_tid(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

// ---- the event as read ----------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Missing,
    Complete,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Cat {
    Kernel,
    Memcpy,
    Memset,
    Runtime,
    Driver,
    UserAnnotation,
    CpuOp,
    #[default]
    Other,
}

impl Cat {
    fn from_str(s: &str) -> Cat {
        match s {
            "kernel" | "Kernel" => Cat::Kernel,
            "gpu_memcpy" | "Memcpy" => Cat::Memcpy,
            "gpu_memset" | "Memset" => Cat::Memset,
            "cuda_runtime" | "Runtime" => Cat::Runtime,
            "cuda_driver" | "Driver" => Cat::Driver,
            "user_annotation" => Cat::UserAnnotation,
            "cpu_op" | "Operator" => Cat::CpuOp,
            _ => Cat::Other,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Cat::Kernel => "kernel",
            Cat::Memcpy => "gpu_memcpy",
            Cat::Memset => "gpu_memset",
            Cat::Runtime => "cuda_runtime",
            Cat::Driver => "cuda_driver",
            Cat::UserAnnotation => "user_annotation",
            Cat::CpuOp => "cpu_op",
            Cat::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Num {
    Int(u64),
    Float(f64),
}

/// An `args` value: absent (`None`), not a non-negative integer (`Some(None)`), or one.
type ArgVal = Option<Option<u64>>;

#[derive(Debug, Default)]
struct Args {
    device: ArgVal,
    stream: ArgVal,
    correlation: ArgVal,
    graph: ArgVal,
    node: ArgVal,
    bytes: ArgVal,
}

#[derive(Debug, Default)]
struct Event {
    ph: Phase,
    cat: Cat,
    has_name: bool,
    ts: Option<Num>,
    dur: Option<Num>,
    tid: Option<u32>,
    args: Args,
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

#[derive(Clone, Copy)]
enum EventKey {
    Ph,
    Cat,
    Name,
    Ts,
    Dur,
    Tid,
    Args,
    Other,
}

#[derive(Clone, Copy)]
enum ArgKey {
    Device,
    Stream,
    Correlation,
    Graph,
    Node,
    Bytes,
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

fn event_key(s: &str) -> EventKey {
    match s {
        "ph" => EventKey::Ph,
        "cat" => EventKey::Cat,
        "name" => EventKey::Name,
        "ts" => EventKey::Ts,
        "dur" => EventKey::Dur,
        "tid" => EventKey::Tid,
        "args" => EventKey::Args,
        _ => EventKey::Other,
    }
}

fn arg_key(s: &str) -> ArgKey {
    match s {
        "device" => ArgKey::Device,
        "stream" => ArgKey::Stream,
        "correlation" => ArgKey::Correlation,
        "graph id" | "graph_id" => ArgKey::Graph,
        "graph node id" | "graph_node_id" => ArgKey::Node,
        "bytes" => ArgKey::Bytes,
        _ => ArgKey::Other,
    }
}

fn phase(s: &str) -> Phase {
    if s == "X" {
        Phase::Complete
    } else {
        Phase::Other
    }
}

/// "12.4" from Kineto's 12040.
fn cuda_version(v: &serde_json::Value) -> Option<String> {
    let v = v.as_u64()?;
    Some(format!("{}.{}", v / 1000, (v % 1000) / 10))
}

// ---- serde seeds and visitors ---------------------------------------------------------------

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

/// The event name, copied into the importer's reused buffer.
struct NameSeed<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for NameSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for NameSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string for the event \"name\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(v);
        Ok(())
    }
}

/// A non-negative number of microseconds (`ts`, `dur`).
struct NumSeed(&'static str);

impl<'de> DeserializeSeed<'de> for NumSeed {
    type Value = Num;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Num, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for NumSeed {
    type Value = Num;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a non-negative number of microseconds for \"{}\"",
            self.0
        )
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
        Ok(Num::Int(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
        u64::try_from(v)
            .map(Num::Int)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
        if v.is_finite() && v >= 0.0 {
            Ok(Num::Float(v))
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
}

/// `tid`: an integer, or a string (hashed).
struct TidSeed;

impl<'de> DeserializeSeed<'de> for TidSeed {
    type Value = u32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for TidSeed {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer or a string for \"tid\"")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        Ok(u32::try_from(v).unwrap_or((v ^ (v >> 32)) as u32))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        Ok(v as u32)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        Ok(v.parse::<u32>().unwrap_or_else(|_| hash_tid(v)))
    }
}

/// An integer argument; anything else (string, object, negative) reads as `None` and fails the
/// import only for an event that is imported (arguments of skipped events never do).
struct ArgIntSeed;

impl<'de> DeserializeSeed<'de> for ArgIntSeed {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ArgIntSeed {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u64>, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u64>, E> {
        Ok(u64::try_from(v).ok())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<u64>, E> {
        Ok((v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19).then_some(v as u64))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<u64>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// `args` of one event: the few keys the import uses.
struct ArgsSeed<'a>(&'a mut Args);

impl<'de> DeserializeSeed<'de> for ArgsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ArgsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object for \"args\"")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key_seed(StrSeed {
            what: "an \"args\" key",
            f: arg_key,
        })? {
            let slot = match k {
                ArgKey::Device => &mut self.0.device,
                ArgKey::Stream => &mut self.0.stream,
                ArgKey::Correlation => &mut self.0.correlation,
                ArgKey::Graph => &mut self.0.graph,
                ArgKey::Node => &mut self.0.node,
                ArgKey::Bytes => &mut self.0.bytes,
                ArgKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value_seed(ArgIntSeed)?);
        }
        Ok(())
    }
}

/// One element of `traceEvents`.
struct EventSeed<'a>(&'a mut Importer);

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let imp = self.0;
        let mut ev = Event::default();
        while let Some(k) = map.next_key_seed(StrSeed {
            what: "an event key",
            f: event_key,
        })? {
            match k {
                EventKey::Ph => {
                    ev.ph = map.next_value_seed(StrSeed {
                        what: "\"ph\"",
                        f: phase,
                    })?
                }
                EventKey::Cat => {
                    ev.cat = map.next_value_seed(StrSeed {
                        what: "\"cat\"",
                        f: Cat::from_str,
                    })?
                }
                EventKey::Name => {
                    map.next_value_seed(NameSeed(&mut imp.name))?;
                    ev.has_name = true;
                }
                EventKey::Ts => ev.ts = Some(map.next_value_seed(NumSeed("ts"))?),
                EventKey::Dur => ev.dur = Some(map.next_value_seed(NumSeed("dur"))?),
                EventKey::Tid => ev.tid = Some(map.next_value_seed(TidSeed)?),
                EventKey::Args => map.next_value_seed(ArgsSeed(&mut ev.args))?,
                EventKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        imp.add_event(&ev).map_err(de::Error::custom)
    }
}

/// `traceEvents`.
struct EventsSeed<'a>(&'a mut Importer);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array for \"traceEvents\"")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(EventSeed(&mut *self.0))?.is_some() {
            self.0.index += 1;
        }
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
                    imp.in_events = true;
                    map.next_value_seed(EventsSeed(&mut *imp))?;
                    imp.in_events = false;
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
    fn timestamps_round_to_nanoseconds() {
        assert_eq!(to_ns(Num::Float(1234567.891), "ts"), Ok(1_234_567_891));
        assert_eq!(to_ns(Num::Float(0.0005), "ts"), Ok(1));
        assert_eq!(to_ns(Num::Int(7), "ts"), Ok(7000));
        assert!(to_ns(Num::Float(1e30), "ts").is_err());
        assert!(to_ns(Num::Int(u64::MAX), "ts").is_err());
    }

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

    #[test]
    fn finds_quotes_and_backslashes_like_a_byte_loop() {
        let text = "abcdefgh\"ijklmnop\\qrstuvwxyz0123456789\"é€".as_bytes();
        for start in 0..text.len() {
            for end in start..=text.len() {
                let s = &text[start..end];
                let want = s.iter().position(|&b| b == b'"' || b == b'\\');
                assert_eq!(find_quote_or_backslash(s), want, "{start}..{end}");
            }
        }
        for b in 0..=255u8 {
            let mut s = [b'a'; 19];
            s[11] = b;
            let want = s.iter().position(|&b| b == b'"' || b == b'\\');
            assert_eq!(find_quote_or_backslash(&s), want, "byte {b}");
        }
    }

    #[test]
    fn string_tids_hash_stably() {
        assert_eq!(hash_tid("stream 7"), hash_tid("stream 7"));
        assert_ne!(hash_tid("stream 7"), hash_tid("stream 8"));
    }
}
