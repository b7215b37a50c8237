#![forbid(unsafe_code)]
//! The Perfetto trace of an analysis, showing every cell one above the other with its gaps
//! named by cause. Two encodings of one layout:
//! - TrackEvent protobuf (`trace.perfetto-trace`, [`write_perfetto_trace`]), the default: what
//!   Perfetto recommends writing; `track_event` encodes it;
//! - Chrome trace JSON (`trace.perfetto.json`, [`write_chrome_trace`]), which ui.perfetto.dev
//!   and chrome://tracing load best-effort; `events` encodes it.
//!
//! Layout:
//! - one process per cell, named "`<cell label>` [observed regime, mode] — trace `i`:
//!   `<path>` rank `r`"; processes are sorted so cells of one workload sit together, eager
//!   above graphed;
//! - per process, tracks in this order: "steps" (one slice per step, from its window start to
//!   its end), "host thread N" (the launch API calls of the step's ops), "stream N" (kernels,
//!   memcpys, memsets), "gaps" (one slice per gap, named by [`crate::analysis::Cause::label`]);
//!   the protobuf adds a counter track "idle per step" (ns, at each step's window start);
//! - flow arrows from each launch API call to what it launched: in the JSON one arrow per call,
//!   to its first op (a graph launch's to the first op of the replay); in the protobuf one
//!   arrow per op (a graph launch fans out to every op of its replay);
//! - slice arguments: the step's figures, each op's correlation id, graph and node; the
//!   protobuf also carries the op's stream, its graph node's type and provenance (the API call
//!   that created the node, the library call around it, the template it was cloned from; eager:
//!   the library call around the launch) and the cause of the gap it ended;
//! - times from integer nanoseconds (JSON: µs with exactly three decimals, 1234567 ns →
//!   `1234.567`; protobuf: ns).
//!
//! Only ops that belong to a step of the analysis are written (with their launch calls and
//! the step's gaps): warm-up, set-up and anything between cells stay out.
//!
//! No two slices on one track overlap: Perfetto would silently move one of them elsewhere (JSON)
//! or mis-nest them (protobuf). When records overlap on one stream (clock jitter between
//! records) or one host thread (nested runtime/driver calls), the later slice goes to an
//! overflow track named "stream N (overflow k)". Slices that merely touch (one ends where the
//! next starts) share a track.
//!
//! Both encoders stream: they hold one cell's events at a time, never the output.

use crate::analysis::{Analysis, CellAnalysis, Op, OpKind};
use crate::trace::{ApiCall, Source, Trace};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

mod comparison;
mod events;
mod track_event;
pub mod wire;

pub use comparison::{COMPARISON_FILE, LARGEST_CHANGE_PREFIX, write_comparison_trace};
use events::EventWriter;
pub use events::fmt_us;

/// Options of the Perfetto export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfettoOptions {
    /// `--origin-step`: when `Some(k)`, each process is shifted so that the window of its step `k` (the cell's
    /// last step when it has fewer) starts at the same instant in every process, so regimes line
    /// up. That instant is the smallest one that keeps every timestamp non-negative (it is 0
    /// when nothing precedes step `k`'s window, e.g. `k = 0` without launch calls before it).
    /// When `None`: recorded times, minus one origin common to all traces (the earliest
    /// timestamp written), so numbers stay small.
    pub origin_step: Option<usize>,
}

/// The encoding of a Perfetto trace file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PerfettoFormat {
    /// TrackEvent protobuf (`trace.perfetto-trace`).
    #[default]
    Protobuf,
    /// Chrome trace JSON (`trace.perfetto.json`).
    Json,
}

impl PerfettoFormat {
    /// The file name of this encoding in an output set.
    pub fn file_name(self) -> &'static str {
        match self {
            PerfettoFormat::Protobuf => PROTOBUF_FILE,
            PerfettoFormat::Json => JSON_FILE,
        }
    }

    /// The encoding of an output-set file name, if it is a Perfetto trace.
    pub fn of_file(name: &str) -> Option<PerfettoFormat> {
        match name {
            PROTOBUF_FILE => Some(PerfettoFormat::Protobuf),
            JSON_FILE => Some(PerfettoFormat::Json),
            _ => None,
        }
    }
}

/// The protobuf trace's name in an output set.
pub const PROTOBUF_FILE: &str = "trace.perfetto-trace";
/// The Chrome JSON trace's name in an output set.
pub const JSON_FILE: &str = "trace.perfetto.json";

/// Streams the trace in `format` to `w`.
pub fn write_trace(
    w: &mut dyn Write,
    format: PerfettoFormat,
    traces: &[Trace],
    analysis: &Analysis,
    opts: &PerfettoOptions,
) -> io::Result<()> {
    match format {
        PerfettoFormat::Protobuf => write_perfetto_trace(w, traces, analysis, opts),
        PerfettoFormat::Json => write_chrome_trace(w, traces, analysis, opts),
    }
}

/// The Chrome trace as one string. Prefer [`write_chrome_trace`] for large traces.
pub fn chrome_trace(traces: &[Trace], analysis: &Analysis, opts: &PerfettoOptions) -> String {
    let mut out = Vec::new();
    write_chrome_trace(&mut out, traces, analysis, opts).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("the writer emits UTF-8 only")
}

/// Streams the Chrome trace JSON to `w`. Memory use is one cell's events at a time.
pub fn write_chrome_trace(
    w: &mut dyn Write,
    traces: &[Trace],
    analysis: &Analysis,
    opts: &PerfettoOptions,
) -> io::Result<()> {
    let plan = Plan::new(traces, analysis, opts);
    let mut out = EventWriter::new(w)?;
    let mut next_flow = 1u64;
    for ci in 0..analysis.cells.len() {
        let pid = ci as u64 + 1;
        out.meta_process(pid, &plan.process_name(ci), plan.sort_index[ci])?;
        let Some(layout) = plan.layout(ci) else {
            continue; // a cell without steps: its name only
        };
        for (tid, name) in &layout.tracks {
            out.meta_thread(pid, *tid, name)?;
        }
        out.cell(&layout, pid, &mut next_flow)?;
    }
    out.finish()
}

/// Streams the TrackEvent protobuf trace to `w`, packet by packet. Memory use is one cell's
/// events at a time, plus the interned names.
pub fn write_perfetto_trace(
    w: &mut dyn Write,
    traces: &[Trace],
    analysis: &Analysis,
    opts: &PerfettoOptions,
) -> io::Result<()> {
    let plan = Plan::new(traces, analysis, opts);
    let mut out = track_event::PacketWriter::new(w);
    let mut provenance: HashMap<usize, track_event::Provenance<'_>> = HashMap::new();
    // Processes numbered in display order: the UI lists processes by pid.
    for (position, &ci) in plan.order.iter().enumerate() {
        let pid = position as u64 + 1;
        let process = out.process(pid, &plan.process_name(ci))?;
        let Some(layout) = plan.layout(ci) else {
            continue;
        };
        let trace_index = layout.cell.trace;
        let prov = provenance
            .entry(trace_index)
            .or_insert_with(|| track_event::Provenance::new(traces.get(trace_index)));
        out.cell(process, &layout, prov)?;
    }
    out.finish()
}

/// Maps a recorded ns timestamp to output ns: `ts + add - sub` (never negative).
#[derive(Debug, Clone, Copy)]
struct Shift {
    sub: u64,
    add: u64,
}

impl Shift {
    fn apply(self, ts: u64) -> u64 {
        (i128::from(ts) - i128::from(self.sub) + i128::from(self.add))
            .clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// What both encodings share: the launch-call index per trace, each cell's time shift and the
/// display order of the cells.
struct Plan<'a> {
    traces: &'a [Trace],
    analysis: &'a Analysis,
    api_index: HashMap<usize, FxHashMap<u32, &'a ApiCall>>,
    no_apis: FxHashMap<u32, &'a ApiCall>,
    shifts: Vec<Option<Shift>>,
    /// Cells in display order: by workload, eager above graphed, then label.
    order: Vec<usize>,
    /// The position of each cell in `order`.
    sort_index: Vec<usize>,
}

impl<'a> Plan<'a> {
    fn new(traces: &'a [Trace], analysis: &'a Analysis, opts: &PerfettoOptions) -> Plan<'a> {
        // One launch-call index per trace.
        let mut api_index: HashMap<usize, FxHashMap<u32, &ApiCall>> = HashMap::new();
        for cell in &analysis.cells {
            if let Some(t) = traces.get(cell.trace) {
                api_index.entry(cell.trace).or_insert_with(|| {
                    let mut m =
                        FxHashMap::with_capacity_and_hasher(t.api_calls.len(), Default::default());
                    for a in &t.api_calls {
                        // Several records may share a correlation id (runtime and driver); keep
                        // the outermost (earliest, longest).
                        m.entry(a.corr)
                            .and_modify(|b: &mut &ApiCall| {
                                if (a.start, std::cmp::Reverse(a.end))
                                    < (b.start, std::cmp::Reverse(b.end))
                                {
                                    *b = a;
                                }
                            })
                            .or_insert(a);
                    }
                    m
                });
            }
        }
        let mut plan = Plan {
            traces,
            analysis,
            api_index,
            no_apis: FxHashMap::default(),
            shifts: Vec::new(),
            order: (0..analysis.cells.len()).collect(),
            sort_index: vec![0; analysis.cells.len()],
        };
        // The earliest timestamp each cell writes, for the origin/alignment.
        let earliest: Vec<Option<u64>> = analysis
            .cells
            .iter()
            .map(|c| cell_earliest(c, analysis, plan.apis(c.trace)))
            .collect();
        plan.shifts = shifts(analysis, &earliest, opts);
        plan.order.sort_by(|&a, &b| {
            let (x, y) = (&analysis.cells[a], &analysis.cells[b]);
            (x.workload_key(), x.observed.regime, &x.label, a).cmp(&(
                y.workload_key(),
                y.observed.regime,
                &y.label,
                b,
            ))
        });
        for (rank, &c) in plan.order.iter().enumerate() {
            plan.sort_index[c] = rank;
        }
        plan
    }

    fn apis(&self, trace: usize) -> &FxHashMap<u32, &'a ApiCall> {
        self.api_index.get(&trace).unwrap_or(&self.no_apis)
    }

    fn process_name(&self, ci: usize) -> String {
        let cell = &self.analysis.cells[ci];
        process_name(cell, self.analysis, self.traces.get(cell.trace))
    }

    /// Cell `ci`'s events on their tracks, or `None` for a cell without steps.
    fn layout(&self, ci: usize) -> Option<CellLayout<'_>> {
        self.layout_of(&self.analysis.cells[ci], self.shifts[ci]?)
    }

    /// `cell` (of this plan's analysis, or a copy holding some of its steps) laid out with
    /// `shift`.
    fn layout_of<'s>(&'s self, cell: &'s CellAnalysis, shift: Shift) -> Option<CellLayout<'s>> {
        let ops = &self.analysis.timelines.get(cell.trace)?.ops;
        let apis = self.apis(cell.trace);
        let trace = self.traces.get(cell.trace);
        let mut evs = collect_cell(cell, ops, apis);
        evs.extend(host_sample_events(cell, &evs, trace));
        let (lanes, counts) = assign_lanes(&mut evs);
        let one_device = evs
            .iter()
            .filter_map(|e| match e.track {
                Track::Stream(d, _) => Some(d),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            <= 1;
        // tids: sequential in track order, lanes after their main track.
        let mut tracks = Vec::new();
        let mut first_tid: BTreeMap<Track, u64> = BTreeMap::new();
        for (&track, &n) in &counts {
            first_tid.insert(track, tracks.len() as u64 + 1);
            for l in 0..n {
                let base = match track {
                    Track::Steps => "steps".to_owned(),
                    Track::Host(t) => format!("host thread {t}"),
                    Track::HostSamples(t) => format!("host samples, thread {t}"),
                    Track::Stream(_, s) if one_device => format!("stream {s}"),
                    Track::Stream(d, s) => format!("device {d} stream {s}"),
                    Track::Gaps => "gaps".to_owned(),
                };
                let name = if l == 0 {
                    base
                } else {
                    format!("{base} (overflow {l})")
                };
                tracks.push((tracks.len() as u64 + 1, name));
            }
        }
        // The tid of each event (events are in track order here, so one lookup per track).
        let mut tids = Vec::with_capacity(evs.len());
        let mut last: Option<(Track, u64)> = None;
        for (e, &l) in evs.iter().zip(&lanes) {
            let base = match last {
                Some((t, b)) if t == e.track => b,
                _ => first_tid[&e.track],
            };
            last = Some((e.track, base));
            tids.push(base + l as u64);
        }
        // Written in time order (the lanes needed track order).
        let mut order: Vec<u32> = (0..evs.len() as u32).collect();
        order.sort_unstable_by_key(|&i| {
            let e = &evs[i as usize];
            (e.start, std::cmp::Reverse(e.end), i)
        });
        Some(CellLayout {
            gap_host: trace.map_or_else(FxHashMap::default, |t| gap_host_time(cell, ops, t)),
            shift,
            cell,
            ops,
            trace,
            apis,
            tracks,
            evs,
            tids,
            order,
            compared: None,
            rank_offset: 0,
        })
    }
}

/// One cell's events on their tracks, ready for an encoder.
struct CellLayout<'a> {
    shift: Shift,
    cell: &'a CellAnalysis,
    ops: &'a [Op],
    trace: Option<&'a Trace>,
    apis: &'a FxHashMap<u32, &'a ApiCall>,
    /// (tid, name) of each track, in display order; tids count from 1.
    tracks: Vec<(u64, String)>,
    evs: Vec<Ev>,
    /// The tid of each event.
    tids: Vec<u64>,
    /// Event indices in time order (start, longer first).
    order: Vec<u32>,
    /// The host code sampled in the gaps of each (step, gap) that has some (host samples).
    gap_host: FxHashMap<(usize, usize), &'a crate::analysis::host_samples::HostTime>,
    /// In a comparison trace: what the comparison adds to this side's step.
    compared: Option<comparison::Compared>,
    /// Added to each track's rank among its siblings: several cells share a process in a
    /// comparison trace.
    rank_offset: u64,
}

/// A slice's name: made for it, or a string of the cell's trace.
enum SliceName {
    Text(String),
    TraceStr(u32),
}

/// Where a slice's arguments go (the JSON `args` object, the protobuf debug annotations).
trait Annotate {
    fn num(&mut self, key: &'static str, v: u64);
    fn bool(&mut self, key: &'static str, v: bool);
    fn str(&mut self, key: &'static str, v: &str);
    /// `v` as hex text (`"0x1f"`): node ids exceed the 2^53 a JavaScript number holds exactly.
    fn hex(&mut self, key: &'static str, v: u64);
    /// String `id` of the cell's trace.
    fn trace_str(&mut self, key: &'static str, id: u32);
    /// No value (JSON `null`; the protobuf leaves the annotation out).
    fn null(&mut self, key: &'static str);
}

impl CellLayout<'_> {
    /// The name and category of event `e`.
    fn name(&self, e: &Ev) -> (SliceName, &'static str) {
        match e.payload {
            Payload::Step(si) => {
                let s = &self.cell.steps[si];
                let mut name = format!("step {}", s.index);
                if s.first_launch {
                    name += " (first launch)";
                }
                (SliceName::Text(name), "step")
            }
            Payload::Op(oi, _) => {
                let op = &self.ops[oi];
                let cat = match op.kind {
                    OpKind::Kernel => "kernel",
                    OpKind::Memcpy => "memcpy",
                    OpKind::Memset => "memset",
                };
                (SliceName::TraceStr(op.name), cat)
            }
            Payload::Api(_, name) => (SliceName::TraceStr(name), "api"),
            Payload::Gap(si, gi) => {
                let label = self.cell.steps[si].gaps[gi].cause.label();
                let largest = self
                    .compared
                    .as_ref()
                    .and_then(|c| c.gaps.get(&(si, gi)))
                    .is_some_and(|g| g.largest);
                let name = if largest {
                    format!("{}{label}", comparison::LARGEST_CHANGE_PREFIX)
                } else {
                    label
                };
                (SliceName::Text(name), "gap")
            }
            Payload::Sample(i) => {
                let innermost = self.sample_stack(i).next();
                let name = innermost.map_or_else(
                    || "(no Python frame)".to_owned(),
                    crate::analysis::host_samples::frame_label,
                );
                (SliceName::Text(name), "host_sample")
            }
        }
    }

    /// The frames of host sample `i`, innermost first.
    fn sample_stack(&self, i: usize) -> impl Iterator<Item = &crate::trace::HostFrame> {
        let samples = self.trace.and_then(|t| t.host_samples.as_ref());
        samples
            .and_then(|h| Some((h, h.samples.get(i)?)))
            .into_iter()
            .flat_map(|(h, s)| h.stack(s.stack))
    }

    /// The arguments both encodings write for event `e`.
    fn annotate(&self, e: &Ev, a: &mut dyn Annotate) {
        match e.payload {
            Payload::Step(si) => {
                let s = &self.cell.steps[si];
                a.str("regime", s.regime.label());
                if let Some(g) = s.graph_exec {
                    a.num("graph_exec", u64::from(g));
                }
                a.bool("first_launch", s.first_launch);
                if let Some(p) = s.period {
                    a.num("period_ns", p);
                }
                a.num("busy_ns", s.busy);
                a.num("idle_ns", s.idle);
                a.num("ops", s.ops.len() as u64);
                a.num("gaps", s.gaps.len() as u64);
            }
            Payload::Op(oi, si) => {
                let op = &self.ops[oi];
                a.num("corr", u64::from(op.corr));
                a.num("graph", u64::from(op.graph));
                a.hex("node", op.node);
                a.num("duration_ns", op.end.saturating_sub(op.start));
                a.num("step", self.cell.steps[si].index as u64);
            }
            Payload::Api(corr, _) => a.num("corr", u64::from(corr)),
            Payload::Gap(si, gi) => {
                let g = &self.cell.steps[si].gaps[gi];
                a.str("cause", &super::cause_kind_id(g.cause.kind()));
                a.num("length_ns", g.len());
                a.num("stream", u64::from(g.stream));
                match g.before.and_then(|b| self.ops.get(b)) {
                    Some(op) => a.trace_str("before", op.name),
                    None => a.null("before"),
                }
                match self.ops.get(g.after) {
                    Some(op) => a.trace_str("after", op.name),
                    None => a.str("after", "?"),
                }
                a.num("step", self.cell.steps[si].index as u64);
                if let Some(h) = self.gap_host.get(&(si, gi)) {
                    a.str("host_code", &h.describe());
                    a.num("host_samples", h.samples as u64);
                }
                if let Some(change) = self.compared.as_ref().and_then(|c| c.gaps.get(&(si, gi))) {
                    change.annotate(a);
                }
            }
            Payload::Sample(i) => {
                let stack: Vec<String> = self
                    .sample_stack(i)
                    .map(crate::analysis::host_samples::frame_label)
                    .collect();
                a.str("stack", &stack.join(" ← "));
            }
        }
    }
}

fn shifts(
    analysis: &Analysis,
    earliest: &[Option<u64>],
    opts: &PerfettoOptions,
) -> Vec<Option<Shift>> {
    match opts.origin_step {
        None => {
            let origin = earliest.iter().flatten().copied().min().unwrap_or(0);
            earliest
                .iter()
                .map(|e| {
                    e.map(|_| Shift {
                        sub: origin,
                        add: 0,
                    })
                })
                .collect()
        }
        Some(k) => {
            let anchors: Vec<Option<u64>> = analysis
                .cells
                .iter()
                .map(|c| {
                    c.steps
                        .get(k)
                        .or_else(|| c.steps.last())
                        .map(|s| s.window_start)
                })
                .collect();
            // The common instant: large enough that each cell's earliest event stays ≥ 0.
            let add = anchors
                .iter()
                .zip(earliest)
                .filter_map(|(a, e)| Some(a.as_ref()?.saturating_sub((*e)?)))
                .max()
                .unwrap_or(0);
            anchors
                .iter()
                .zip(earliest)
                .map(|(a, e)| {
                    e.as_ref()?;
                    Some(Shift { sub: (*a)?, add })
                })
                .collect()
        }
    }
}

fn cell_earliest(
    cell: &CellAnalysis,
    analysis: &Analysis,
    apis: &FxHashMap<u32, &ApiCall>,
) -> Option<u64> {
    let ops = &analysis.timelines.get(cell.trace)?.ops;
    let mut min: Option<u64> = None;
    let mut see = |t: u64| min = Some(min.map_or(t, |m: u64| m.min(t)));
    for s in &cell.steps {
        see(s.window_start.min(s.start));
        for &i in &s.ops {
            if let Some(op) = ops.get(i) {
                see(op.start);
                if let Some(a) = apis.get(&op.corr) {
                    see(a.start);
                }
            }
        }
        for g in &s.gaps {
            see(g.start);
        }
    }
    min
}

fn process_name(cell: &CellAnalysis, analysis: &Analysis, trace: Option<&Trace>) -> String {
    let mut observed = super::regime_label(cell.observed.regime).to_owned();
    if let Some(mode) = &cell.observed.graph_usage_mode {
        observed += &format!(", mode {mode}");
    }
    let path = analysis
        .inputs
        .get(cell.trace)
        .map_or("?", |i| i.path.as_str());
    let rank = trace.map_or(0, |t| t.metadata.rank);
    let synthetic = analysis
        .inputs
        .get(cell.trace)
        .is_some_and(|i| i.source == Source::Synthetic);
    format!(
        "{} [{observed}] — trace {}: {path} rank {rank}{}",
        cell.label,
        cell.trace,
        if synthetic {
            " (synthetic, not recorded on a GPU)"
        } else {
            ""
        }
    )
}

/// A track of one process, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Track {
    Steps,
    Host(u32),
    /// The host samples of a launching thread (`--host-samples`).
    HostSamples(u32),
    Stream(u32, u32), // (device, stream)
    Gaps,
}

#[derive(Debug, Clone, Copy)]
enum Payload {
    /// Index into the cell's steps.
    Step(usize),
    /// Index into the timeline's ops, and the step it belongs to.
    Op(usize, usize),
    /// A launch call: correlation id and name.
    Api(u32, u32),
    /// (step, gap) indices.
    Gap(usize, usize),
    /// Index into the trace's host samples.
    Sample(usize),
}

#[derive(Debug, Clone, Copy)]
struct Ev {
    track: Track,
    start: u64,
    end: u64,
    payload: Payload,
}

fn collect_cell(cell: &CellAnalysis, ops: &[Op], apis: &FxHashMap<u32, &ApiCall>) -> Vec<Ev> {
    let mut evs = Vec::new();
    let mut seen_corr = rustc_hash::FxHashSet::default();
    for (si, s) in cell.steps.iter().enumerate() {
        evs.push(Ev {
            track: Track::Steps,
            start: s.window_start.min(s.start),
            end: s.end,
            payload: Payload::Step(si),
        });
        for &i in &s.ops {
            let Some(op) = ops.get(i) else { continue };
            evs.push(Ev {
                track: Track::Stream(op.device, op.stream),
                start: op.start,
                end: op.end.max(op.start),
                payload: Payload::Op(i, si),
            });
            if seen_corr.insert(op.corr)
                && let Some(a) = apis.get(&op.corr)
            {
                evs.push(Ev {
                    track: Track::Host(a.thread),
                    start: a.start,
                    end: a.end.max(a.start),
                    payload: Payload::Api(a.corr, a.name),
                });
            }
        }
        for (gi, g) in s.gaps.iter().enumerate() {
            if g.end > g.start {
                evs.push(Ev {
                    track: Track::Gaps,
                    start: g.start,
                    end: g.end,
                    payload: Payload::Gap(si, gi),
                });
            }
        }
    }
    evs
}

/// The host samples of the threads that launched the cell's ops, inside its steps: one slice
/// per sample, as long as its read, on the thread's "host samples" track.
fn host_sample_events(cell: &CellAnalysis, evs: &[Ev], trace: Option<&Trace>) -> Vec<Ev> {
    let Some(samples) = trace.and_then(|t| t.host_samples.as_ref()) else {
        return Vec::new();
    };
    let threads: rustc_hash::FxHashSet<u32> = evs
        .iter()
        .filter_map(|e| match e.track {
            Track::Host(t) => Some(t),
            _ => None,
        })
        .collect();
    let from = cell.steps.iter().map(|s| s.window_start.min(s.start)).min();
    let to = cell.steps.iter().map(|s| s.end).max();
    let (Some(from), Some(to)) = (from, to) else {
        return Vec::new();
    };
    samples
        .samples
        .iter()
        .enumerate()
        .filter(|(_, s)| threads.contains(&s.thread))
        .filter_map(|(i, s)| {
            let start = s.time.saturating_add_signed(samples.offset_ns);
            (start >= from && start <= to).then(|| Ev {
                track: Track::HostSamples(s.thread),
                start,
                end: start + u64::from(s.read_ns),
                payload: Payload::Sample(i),
            })
        })
        .collect()
}

/// The host time of each gap of the cell whose position in its sequence has one.
fn gap_host_time<'a>(
    cell: &'a CellAnalysis,
    ops: &[Op],
    trace: &Trace,
) -> FxHashMap<(usize, usize), &'a crate::analysis::host_samples::HostTime> {
    let mut out = FxHashMap::default();
    if cell.sequence.iter().all(|e| e.host_time.is_none()) {
        return out;
    }
    use crate::analysis::cause::Positions;
    use crate::analysis::host_samples::is_host_bound;
    let positions = Positions::new(&cell.sequence);
    for (si, step) in cell.steps.iter().enumerate() {
        for (gi, p) in positions.of_gaps(trace, ops, step).into_iter().enumerate() {
            let host_bound = is_host_bound(step.gaps[gi].cause.kind());
            let host = p.and_then(|p| cell.sequence[p].host_time.as_ref());
            if let Some(h) = host.filter(|_| host_bound) {
                out.insert((si, gi), h);
            }
        }
    }
    out
}

/// Assigns each event a lane of its track so no two slices of one lane overlap: first fit, in
/// start order (longer first on ties). Returns the lane per event and the lane count per track.
fn assign_lanes(evs: &mut [Ev]) -> (Vec<usize>, BTreeMap<Track, usize>) {
    evs.sort_unstable_by(|a, b| {
        (a.track, a.start, std::cmp::Reverse(a.end)).cmp(&(
            b.track,
            b.start,
            std::cmp::Reverse(b.end),
        ))
    });
    let mut lanes_of: BTreeMap<Track, Vec<u64>> = BTreeMap::new(); // last end per lane
    let mut lane = Vec::with_capacity(evs.len());
    for e in evs.iter() {
        let ends = lanes_of.entry(e.track).or_default();
        match ends.iter().position(|&end| end <= e.start) {
            Some(l) => {
                ends[l] = e.end;
                lane.push(l);
            }
            None => {
                ends.push(e.end);
                lane.push(ends.len() - 1);
            }
        }
    }
    let counts = lanes_of.into_iter().map(|(t, v)| (t, v.len())).collect();
    (lane, counts)
}

/// The middle of a slice: flow events placed there bind to it unambiguously (at its start
/// the slice may not be open yet in the importer's order).
fn mid(e: &Ev) -> u64 {
    e.start + (e.end - e.start) / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{self, GRAPHED_AT};
    use serde_json::Value;
    use std::collections::{BTreeSet, HashMap};

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).expect("valid JSON")
    }

    fn events(v: &Value) -> &Vec<Value> {
        v["traceEvents"].as_array().unwrap()
    }

    /// Exact ns from a µs number written with three decimals.
    pub(super) fn ns(v: &Value) -> u64 {
        (v.as_f64().unwrap() * 1000.0).round() as u64
    }

    /// The names of the metadata events `what` ("process_name", "thread_name") by (pid, tid).
    pub(super) fn names(v: &Value, what: &str) -> HashMap<(u64, u64), String> {
        events(v)
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == what)
            .map(|e| {
                (
                    (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()),
                    e["args"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn fractional_microseconds_keep_ns() {
        assert_eq!(fmt_us(1_234_567), "1234.567");
        assert_eq!(fmt_us(5), "0.005");
        assert_eq!(fmt_us(0), "0.000");
        assert_eq!(fmt_us(1_000), "1.000");
        assert_eq!(fmt_us(u64::MAX), "18446744073709551.615");
        assert_eq!(fmt_us(1_000_255), "1000.255");
        assert_eq!(fmt_us(999), "0.999");
        for ns in [0u64, 7, 42, 999, 1_000, 123_456_789, 1 << 40] {
            assert_eq!(fmt_us(ns), format!("{}.{:03}", ns / 1000, ns % 1000));
        }
    }

    #[test]
    fn processes_threads_and_tracks() {
        let (traces, a) = fixtures::fixture();
        let v = parse(&chrome_trace(&traces, &a, &PerfettoOptions::default()));
        assert_eq!(v["displayTimeUnit"], "ns");
        let procs = names(&v, "process_name");
        assert_eq!(procs.len(), 2);
        let p1 = &procs[&(1, 0)];
        assert!(p1.starts_with("eager T=8 [eager]"), "{p1}");
        assert!(
            p1.contains("trace 0: runs/ht_decode.trace.json rank 0"),
            "{p1}"
        );
        assert!(p1.contains("synthetic"), "{p1}");
        assert!(procs[&(2, 0)].starts_with(
            "graphed mode=2 T=8 [graphed, mode 2 (2 external event nodes, from NCCL)]"
        ));
        let threads = names(&v, "thread_name");
        for pid in [1, 2] {
            let mine: BTreeSet<&str> = threads
                .iter()
                .filter(|((p, _), _)| *p == pid)
                .map(|(_, n)| n.as_str())
                .collect();
            for want in ["steps", "gaps", "stream 7", "stream 9", "host thread 4242"] {
                assert!(mine.contains(want), "pid {pid} lacks {want}: {mine:?}");
            }
        }
        // Gap slices sit on the gaps track only, named by cause label, with their args.
        let gap_tids: BTreeSet<(u64, u64)> = threads
            .iter()
            .filter(|(_, n)| n.as_str() == "gaps")
            .map(|(k, _)| *k)
            .collect();
        let gaps: Vec<&Value> = events(&v).iter().filter(|e| e["cat"] == "gap").collect();
        let expected: usize = a
            .cells
            .iter()
            .flat_map(|c| &c.steps)
            .map(|s| s.gaps.len())
            .sum();
        assert_eq!(gaps.len(), expected);
        for g in &gaps {
            let key = (g["pid"].as_u64().unwrap(), g["tid"].as_u64().unwrap());
            assert!(gap_tids.contains(&key));
            assert_eq!(ns(&g["dur"]), g["args"]["length_ns"].as_u64().unwrap());
        }
        let ext = gaps
            .iter()
            .find(|g| g["args"]["cause"] == "external_event_wait")
            .expect("an external wait gap");
        assert!(
            ext["name"]
                .as_str()
                .unwrap()
                .contains("NCCL graph usage mode 2")
        );
        assert_eq!(ext["args"]["after"], "ncclDevKernel_AllGather_RING_LL");
        assert_eq!(ext["args"]["before"], "void convert_topk<int>(int*)");
        // Nothing outside gaps lands on the gaps track.
        for e in events(&v)
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] != "gap")
        {
            let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            assert!(!gap_tids.contains(&key), "{e}");
        }
        // Every op of every step is written once, with its args.
        let kernels: Vec<&Value> = events(&v)
            .iter()
            .filter(|e| matches!(e["cat"].as_str(), Some("kernel" | "memset")))
            .collect();
        assert_eq!(kernels.len(), a.timelines[0].ops.len());
        let k = kernels.iter().find(|e| e["name"] == "dispatch").unwrap();
        assert_eq!(k["args"]["duration_ns"], 9_500);
        assert!(k["args"]["corr"].as_u64().is_some());
        // Step markers.
        let steps = events(&v).iter().filter(|e| e["cat"] == "step").count();
        assert_eq!(steps, 2 * fixtures::STEPS);
    }

    #[test]
    fn timestamps_relative_to_global_origin() {
        let (traces, a) = fixtures::fixture();
        let v = parse(&chrome_trace(&traces, &a, &PerfettoOptions::default()));
        let min = events(&v)
            .iter()
            .filter(|e| e["ph"] != "M")
            .map(|e| ns(&e["ts"]))
            .min()
            .unwrap();
        assert_eq!(min, 0);
        // The first eager kernel starts at T0: its launch call (2 µs before) is the origin.
        let first = events(&v)
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1 && e["cat"] == "memset")
            .map(|e| ns(&e["ts"]))
            .min()
            .unwrap();
        assert_eq!(first, 2_000);
        let graphed_first = events(&v)
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 2 && e["cat"] == "memset")
            .map(|e| ns(&e["ts"]))
            .min()
            .unwrap();
        assert_eq!(graphed_first, 2_000 + GRAPHED_AT);
    }

    #[test]
    fn aligned_steps_start_together() {
        let (traces, a) = fixtures::fixture();
        for k in [0, 2] {
            let v = parse(&chrome_trace(
                &traces,
                &a,
                &PerfettoOptions {
                    origin_step: Some(k),
                },
            ));
            let starts: Vec<u64> = events(&v)
                .iter()
                .filter(|e| e["cat"] == "step")
                .filter(|e| {
                    e["name"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("step {k}"))
                })
                .map(|e| ns(&e["ts"]))
                .collect();
            assert_eq!(starts.len(), 2, "{starts:?}");
            assert_eq!(starts[0], starts[1], "step {k} not aligned");
            assert!(
                events(&v)
                    .iter()
                    .filter(|e| e["ph"] != "M")
                    .all(|e| e["ts"].as_f64().unwrap() >= 0.0)
            );
        }
    }

    #[test]
    fn no_overlapping_slices_per_track() {
        let (traces, a) = fixtures::fixture();
        let v = parse(&chrome_trace(&traces, &a, &PerfettoOptions::default()));
        let mut by_track: HashMap<(u64, u64), Vec<(u64, u64)>> = HashMap::new();
        for e in events(&v).iter().filter(|e| e["ph"] == "X") {
            let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            let s = ns(&e["ts"]);
            by_track
                .entry(key)
                .or_default()
                .push((s, s + ns(&e["dur"])));
        }
        for (track, mut v) in by_track {
            v.sort();
            for w in v.windows(2) {
                assert!(w[0].1 <= w[1].0, "overlap on {track:?}: {w:?}");
            }
        }
        // The fixture's overlapping pair went to an overflow track of stream 7, in pid 2.
        let threads = names(&v, "thread_name");
        let overflow: Vec<_> = threads
            .iter()
            .filter(|(_, n)| n.contains("overflow"))
            .collect();
        assert_eq!(overflow.len(), 1, "{overflow:?}");
        let ((pid, tid), name) = overflow[0];
        assert_eq!((*pid, name.as_str()), (2, "stream 7 (overflow 1)"));
        let moved: Vec<&Value> = events(&v)
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == *pid && e["tid"] == *tid)
            .collect();
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0]["name"], "dispatch");
    }

    #[test]
    fn lanes_first_fit() {
        let ev = |start, end| Ev {
            track: Track::Stream(0, 1),
            start,
            end,
            payload: Payload::Api(0, 0),
        };
        let mut evs = vec![ev(0, 10), ev(5, 8), ev(10, 20), ev(9, 30), ev(20, 25)];
        let (lanes, counts) = assign_lanes(&mut evs);
        let got: Vec<(u64, usize)> = evs.iter().zip(&lanes).map(|(e, &l)| (e.start, l)).collect();
        assert_eq!(got, vec![(0, 0), (5, 1), (9, 1), (10, 0), (20, 0)]);
        assert_eq!(counts[&Track::Stream(0, 1)], 2);
    }

    #[test]
    fn flows_pair_launch_calls_with_ops() {
        let (traces, a) = fixtures::fixture();
        let v = parse(&chrome_trace(&traces, &a, &PerfettoOptions::default()));
        let threads = names(&v, "thread_name");
        let mut starts: HashMap<u64, &Value> = HashMap::new();
        let mut ends: HashMap<u64, &Value> = HashMap::new();
        for e in events(&v) {
            let id = e["id"].as_u64();
            match e["ph"].as_str() {
                Some("s") => assert!(starts.insert(id.unwrap(), e).is_none(), "duplicate s"),
                Some("f") => assert!(ends.insert(id.unwrap(), e).is_none(), "duplicate f"),
                _ => {}
            }
        }
        assert!(!starts.is_empty());
        assert_eq!(
            starts.keys().collect::<BTreeSet<_>>(),
            ends.keys().collect::<BTreeSet<_>>()
        );
        // Eager: one flow per op; graphed: one per replay.
        assert_eq!(starts.len(), fixtures::STEPS * 5 + fixtures::STEPS);
        for (id, s) in &starts {
            let f = ends[id];
            assert_eq!(f["bp"], "e");
            assert_eq!(s["pid"], f["pid"]);
            let (p, st, ft) = (
                s["pid"].as_u64().unwrap(),
                s["tid"].as_u64().unwrap(),
                f["tid"].as_u64().unwrap(),
            );
            assert!(threads[&(p, st)].starts_with("host thread"));
            assert!(threads[&(p, ft)].starts_with("stream"));
            assert!(ns(&s["ts"]) <= ns(&f["ts"]));
            // Each end lies inside one slice of its track: the launch call, the op.
            let inside = |flow: &Value, cat: &str| {
                events(&v)
                    .iter()
                    .filter(|e| {
                        e["ph"] == "X"
                            && e["pid"] == flow["pid"]
                            && e["tid"] == flow["tid"]
                            && ns(&e["ts"]) <= ns(&flow["ts"])
                            && ns(&flow["ts"]) <= ns(&e["ts"]) + ns(&e["dur"])
                    })
                    .map(|e| e["cat"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
                    == vec![cat.to_owned()]
            };
            assert!(inside(s, "api"), "{s}");
            assert!(inside(f, "kernel") || inside(f, "memset"), "{f}");
        }
    }

    #[test]
    fn streams_into_a_writer() {
        let (traces, a) = fixtures::fixture();
        let mut buf = Vec::new();
        write_chrome_trace(&mut buf, &traces, &a, &PerfettoOptions::default()).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            chrome_trace(&traces, &a, &PerfettoOptions::default())
        );
        // An analysis without cells still yields a loadable document.
        let mut empty = a.clone();
        empty.cells.clear();
        let v = parse(&chrome_trace(&traces, &empty, &PerfettoOptions::default()));
        assert!(events(&v).is_empty());
    }
}
