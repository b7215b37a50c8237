//! Records handed to `gapscope record` as they are decoded, so that a program killed with
//! SIGKILL (the OOM killer) still leaves a trace.
//!
//! Under `gapscope record` ([`SPILL_VAR`](crate::record::env::SPILL_VAR) set), the injected
//! recorder appends to a spill file in the output folder, `.gapscope-spill-<pid>.jsonl`: one JSON
//! line of [`SpillHeader`] (the trace's metadata, file name and step range), then one [`Delivery`]
//! line each time CUPTI hands back a completed activity buffer: the records decoded since the last
//! delivery, the strings interned since, the graph DAG when it changed, the budget's sampling
//! record and the dropped count so far. Each line is written with one `write` on a file opened for
//! appending, so a kill leaves at most the last line cut short.
//!
//! A process that writes its trace removes its spill file. When one is left behind by a
//! process that is gone, [`recover`] writes the trace from it ([`crate::trace::write_trace`],
//! atomically), with a note saying what may be missing: the records of the buffers not
//! completed when the program died, ranges still open, and what changed after the last
//! delivery.
#![forbid(unsafe_code)]

use crate::record::step_range::StepRange;
use crate::trace::{ApiCall, GraphDag, HostRanges, Kernel, Marker, Metadata, Sampling, Trace};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

const PREFIX: &str = ".gapscope-spill-";
const SUFFIX: &str = ".jsonl";

/// The spill file of process `pid` in `dir`.
pub fn spill_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{PREFIX}{pid}{SUFFIX}"))
}

/// The writer's process id in a spill file's name.
fn spill_pid(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

/// The first line of a spill file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpillHeader {
    /// The trace's file name in the output folder (`trace-<rank>.json`).
    pub file_name: String,
    pub pid: u32,
    /// NVTX ranges of this name become step markers (as the recorder would mark them).
    #[serde(default)]
    pub step_range: Option<String>,
    pub metadata: Metadata,
}

/// One delivery (a line after the header): the records decoded since the last one, as a
/// trace of their own (`part`: its strings are the ones interned since, its graph the whole
/// DAG when `graph_changed`, its sampling record and dropped count those so far).
#[derive(Debug, Serialize, Deserialize)]
pub struct Delivery<T> {
    /// Index of the first string in `part.strings`: the strings of earlier deliveries come first.
    pub strings_from: usize,
    #[serde(default)]
    pub graph_changed: bool,
    /// The step range the recorder chose, once it has (none was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_step_range: Option<String>,
    pub part: T,
}

/// How far a trace under construction has been delivered: the lengths of its lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    pub strings: usize,
    pub kernels: usize,
    pub memcpys: usize,
    pub memsets: usize,
    pub api_calls: usize,
    pub syncs: usize,
    pub event_records: usize,
    pub markers: usize,
}

impl Delivered {
    /// Where `trace` stands now.
    pub fn of(trace: &Trace) -> Delivered {
        Delivered {
            strings: trace.strings.len(),
            kernels: trace.kernels.len(),
            memcpys: trace.memcpys.len(),
            memsets: trace.memsets.len(),
            api_calls: trace.api_calls.len(),
            syncs: trace.syncs.len(),
            event_records: trace.event_records.len(),
            markers: trace.markers.len(),
        }
    }

    /// What `trace` (whose lists only grow) holds past `self`, as owned lists in a trace of
    /// their own (strings included), to be encoded outside the recorder's lock.
    pub fn new_part(&self, trace: &Trace) -> Trace {
        let mut part = Trace::new(Metadata::default());
        part.strings = tail(&trace.strings, self.strings);
        part.kernels = tail(&trace.kernels, self.kernels);
        part.memcpys = tail(&trace.memcpys, self.memcpys);
        part.memsets = tail(&trace.memsets, self.memsets);
        part.api_calls = tail(&trace.api_calls, self.api_calls);
        part.syncs = tail(&trace.syncs, self.syncs);
        part.event_records = tail(&trace.event_records, self.event_records);
        part.markers = tail(&trace.markers, self.markers);
        part
    }
}

/// The items of `v` from `from` on.
fn tail<T: Clone>(v: &[T], from: usize) -> Vec<T> {
    v.get(from..).unwrap_or_default().to_vec()
}

/// Appends deliveries to a spill file.
#[derive(Debug)]
pub struct SpillWriter {
    file: File,
    path: PathBuf,
    /// Strings delivered so far.
    strings: usize,
    line: Vec<u8>,
}

impl SpillWriter {
    /// Creates `path` (replacing any old file) and writes the header line.
    pub fn create(path: &Path, header: &SpillHeader) -> std::io::Result<SpillWriter> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)?;
        drop(file);
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        let mut w = SpillWriter {
            file,
            path: path.to_owned(),
            strings: 0,
            line: Vec::new(),
        };
        w.line.clear();
        serde_json::to_writer(&mut w.line, header).map_err(std::io::Error::other)?;
        w.write_line()?;
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Delivers `part` (records new since the last delivery, strings included, as
    /// [`Delivered::new_part`] made them) with the graph when it changed, the sampling record
    /// and the dropped count so far, and the step range the recorder chose, if it has; returns
    /// the bytes written.
    pub fn deliver(
        &mut self,
        mut part: Trace,
        graph: Option<GraphDag>,
        sampling: Option<Sampling>,
        dropped_records: u64,
        chosen_step_range: Option<String>,
    ) -> std::io::Result<usize> {
        let strings = part.strings.len();
        let graph_changed = graph.is_some();
        part.graph = graph.unwrap_or_default();
        part.metadata.sampling = sampling;
        part.dropped_records = dropped_records;
        let out = Delivery {
            strings_from: self.strings,
            graph_changed,
            chosen_step_range,
            part: &part,
        };
        self.line.clear();
        serde_json::to_writer(&mut self.line, &out).map_err(std::io::Error::other)?;
        let n = self.write_line()?;
        self.strings += strings;
        Ok(n)
    }

    /// Writes `self.line` and a newline with one `write` (appending).
    fn write_line(&mut self) -> std::io::Result<usize> {
        self.line.push(b'\n');
        self.file.write_all(&self.line)?;
        Ok(self.line.len())
    }
}

/// A trace rebuilt from a spill file, and how many deliveries it held.
#[derive(Debug)]
pub struct Recovered {
    pub header: SpillHeader,
    pub trace: Trace,
    pub deliveries: usize,
    /// Bytes of a last line cut short (left out), 0 when none.
    pub cut_short: usize,
}

/// Why a spill file cannot be rebuilt ([`rebuild`]): typed for its callers; each displays as
/// one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a gapscope spill file: empty")]
    Empty { path: PathBuf },
    #[error("{path}: not a gapscope spill file: header: {source}")]
    Header {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "{path}: not a gapscope spill file: delivery {delivery} starts at string {strings_from}, {delivered} delivered before"
    )]
    StringsOutOfStep {
        path: PathBuf,
        delivery: usize,
        strings_from: usize,
        delivered: usize,
    },
    #[error("{path}: not a gapscope spill file: inconsistent records: {problem}")]
    Inconsistent {
        path: PathBuf,
        problem: crate::trace::InvalidTrace,
    },
}

/// Rebuilds the trace of a spill file (`why`: how its process ended, for the note).
pub fn rebuild(path: &Path, why: &str) -> Result<Recovered, SpillError> {
    let read = |source| SpillError::Read {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(read)?;
    let mut lines = std::io::BufReader::new(file).split(b'\n');
    let header = lines
        .next()
        .ok_or_else(|| SpillError::Empty {
            path: path.to_owned(),
        })?
        .map_err(read)?;
    let header: SpillHeader =
        serde_json::from_slice(&header).map_err(|source| SpillError::Header {
            path: path.to_owned(),
            source,
        })?;
    let mut trace = Trace::new(header.metadata.clone());
    let (mut deliveries, mut cut_short) = (0, 0);
    let mut graph = None;
    let mut chosen_step_range = None;
    for line in lines {
        let line = line.map_err(read)?;
        // Only the last line can be cut short (a kill during its write): it does not parse.
        let Ok(d) = serde_json::from_slice::<Delivery<Trace>>(&line) else {
            cut_short = line.len();
            break;
        };
        if d.strings_from != trace.strings.len() {
            return Err(SpillError::StringsOutOfStep {
                path: path.to_owned(),
                delivery: deliveries + 1,
                strings_from: d.strings_from,
                delivered: trace.strings.len(),
            });
        }
        if d.chosen_step_range.is_some() {
            chosen_step_range = d.chosen_step_range;
        }
        let p = d.part;
        trace.strings.extend(p.strings);
        trace.kernels.extend(p.kernels);
        trace.memcpys.extend(p.memcpys);
        trace.memsets.extend(p.memsets);
        trace.api_calls.extend(p.api_calls);
        trace.syncs.extend(p.syncs);
        trace.event_records.extend(p.event_records);
        trace.markers.extend(p.markers);
        if d.graph_changed {
            graph = Some(p.graph);
        }
        if p.metadata.sampling.is_some() {
            trace.metadata.sampling = p.metadata.sampling;
        }
        trace.dropped_records = p.dropped_records;
        deliveries += 1;
    }
    if let Some(mut g) = graph {
        g.tag_library_calls(&HostRanges::library_calls(&trace, false));
        trace.graph = g;
    }
    trace.sort_records();
    let step_range = StepRange::new(header.step_range.clone());
    if let Some(chosen) = chosen_step_range {
        step_range.choose(chosen);
    }
    step_range.mark(&mut trace);
    trace.metadata.notes.push(format!(
        "gapscope record: process {} {why} without writing its trace; this trace was written from the {deliveries} deliveries its recorder made as CUPTI completed activity buffers: missing are the records of the buffers not completed when it died (about the last second of its work), NVTX ranges still open, and graphs built after its last delivery{}",
        header.pid,
        if cut_short > 0 {
            format!("; the last delivery was cut short ({cut_short} bytes, left out)")
        } else {
            String::new()
        }
    ));
    trace
        .validate()
        .map_err(|problem| SpillError::Inconsistent {
            path: path.to_owned(),
            problem,
        })?;
    Ok(Recovered {
        header,
        trace,
        deliveries,
        cut_short,
    })
}

/// Spill files left in `dir` by processes that are gone, with their writers' pids.
pub fn left_behind(dir: &Path) -> Vec<(PathBuf, u32)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, u32)> = entries
        .flatten()
        .filter_map(|e| {
            let pid = spill_pid(e.file_name().to_str()?)?;
            Some((e.path(), pid))
        })
        .filter(|&(_, pid)| crate::output::process_alive(pid) != Some(true))
        .collect();
    found.sort();
    found
}

/// Writes the trace of every spill file a dead process left in `dir` (`why(pid)` says how it
/// ended), unless that process's trace was written after all (`written`: the traces this
/// run wrote); removes the spill files. Returns the traces written, and a one-line problem for
/// each spill file that could not be recovered (its file is kept).
pub fn recover(
    dir: &Path,
    written: &[PathBuf],
    why: impl Fn(u32) -> String,
) -> (Vec<PathBuf>, Vec<String>) {
    let (mut traces, mut problems) = (Vec::new(), Vec::new());
    for (spill, pid) in left_behind(dir) {
        let recovered = match rebuild(&spill, &why(pid)) {
            Ok(r) => r,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let target = dir.join(&recovered.header.file_name);
        if written.contains(&target) || recovered.header.file_name.contains('/') {
            let _ = std::fs::remove_file(&spill);
            continue;
        }
        match crate::trace::write_trace(&target, &recovered.trace) {
            Ok(()) => {
                let _ = std::fs::remove_file(&spill);
                traces.push(target);
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    (traces, problems)
}

/// Test helper (`gapscope spill-test-child`): does what an injected recorder does under
/// `gapscope record` — a header, then `deliveries` deliveries of `records` kernels, API calls
/// and step markers each (the interned names growing with them), through the same writer —
/// then kills this process with SIGKILL, as the OOM killer would. Returns only on failure.
pub fn deliver_then_die(
    deliveries: usize,
    records: usize,
) -> anyhow::Result<std::convert::Infallible> {
    use crate::trace::TraceBuilder;
    use anyhow::Context;
    let out = crate::settings::Setting::Out
        .read_os()
        .map(PathBuf::from)
        .context("spill-test-child runs under gapscope record (GAPSCOPE_OUT unset)")?;
    anyhow::ensure!(
        crate::settings::Setting::Spill.switch_from(&crate::settings::Setting::environment_value)
            == Ok(Some(true)),
        "spill-test-child runs under gapscope record ({} unset)",
        crate::record::env::SPILL_VAR
    );
    let pid = std::process::id();
    let header = SpillHeader {
        file_name: crate::record::env::trace_file_name(&format!("pid{pid}")),
        pid,
        step_range: Some("step".into()),
        metadata: Metadata {
            tool: format!("gapscope {} (spill-test-child)", env!("CARGO_PKG_VERSION")),
            source: crate::trace::Source::Synthetic,
            cells: vec![Default::default()],
            notes: vec!["synthetic: gapscope spill-test-child, not recorded on a GPU".into()],
            ..Default::default()
        },
    };
    let path = spill_path(&out, pid);
    let mut writer = SpillWriter::create(&path, &header)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut b = TraceBuilder::new(Metadata::default());
    let mut delivered = Delivered::default();
    let step = b.intern("step");
    let launch = b.intern("cudaLaunchKernel");
    for d in 0..deliveries {
        let name = b.intern(&format!("kernel_of_buffer_{d}"));
        synthetic_buffer(&mut b.trace, d, records, [step, launch, name]);
        let part = delivered.new_part(&b.trace);
        delivered = Delivered::of(&b.trace);
        writer
            .deliver(part, None, None, 0, None)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    signal_hook::low_level::raise(signal_hook::consts::SIGKILL)?;
    anyhow::bail!("SIGKILL did not end the process")
}

/// `records` steps of buffer `buffer`, 10 µs apart: a step marker, its launch call and kernel
/// (names: step, launch call, kernel).
fn synthetic_buffer(trace: &mut Trace, buffer: usize, records: usize, names: [u32; 3]) {
    for i in 0..records {
        let n = (buffer * records + i) as u64;
        let at = 1_000_000 + n * 10_000;
        let corr = n as u32 + 1;
        trace.markers.push(Marker {
            start: at,
            end: at + 9_000,
            name: names[0],
            thread: 1,
            ..Default::default()
        });
        trace.api_calls.push(ApiCall {
            start: at + 100,
            end: at + 2_000,
            corr,
            thread: 1,
            name: names[1],
            ..Default::default()
        });
        trace.kernels.push(Kernel {
            start: at + 3_000,
            end: at + 8_000,
            corr,
            name: names[2],
            stream: 7,
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{MarkerKind, TraceBuilder};

    /// A recorder's state growing over three buffers, delivered after each, the step range
    /// chosen before the second; the third delivery cut short as a kill would leave it.
    #[test]
    fn deliveries_rebuild_the_trace_and_a_line_cut_short_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = spill_path(dir.path(), 4242);
        assert_eq!(spill_pid(".gapscope-spill-4242.jsonl"), Some(4242));
        let header = SpillHeader {
            file_name: "trace-0.json".into(),
            pid: 4242,
            step_range: None,
            metadata: Metadata {
                tool: "gapscope test".into(),
                cells: vec![Default::default()],
                ..Default::default()
            },
        };
        let mut w = SpillWriter::create(&path, &header).unwrap();
        let mut b = TraceBuilder::new(Metadata::default());
        let mut delivered = Delivered::default();
        let names = [b.intern("step"), b.intern("cudaLaunchKernel")];
        for buffer in 0..3 {
            let kernel = b.intern(&format!("kernel{buffer}"));
            synthetic_buffer(&mut b.trace, buffer, 10, [names[0], names[1], kernel]);
            let part = delivered.new_part(&b.trace);
            delivered = Delivered::of(&b.trace);
            let graph = (buffer == 1).then(GraphDag::default);
            let chosen = (buffer > 0).then(|| "step".to_string());
            let n = w.deliver(part, graph, None, buffer as u64, chosen).unwrap();
            assert!(n > 0);
        }
        // The kill came during the third delivery's write.
        let bytes = std::fs::read(&path).unwrap();
        let last = bytes[..bytes.len() - 1]
            .iter()
            .rposition(|&c| c == b'\n')
            .unwrap();
        std::fs::write(&path, &bytes[..last + 40]).unwrap();
        let r = rebuild(&path, "was killed by signal 9 (SIGKILL)").unwrap();
        assert_eq!((r.deliveries, r.cut_short), (2, 39));
        let t = &r.trace;
        assert_eq!((t.kernels.len(), t.api_calls.len()), (20, 20));
        assert_eq!(t.markers.len(), 20);
        assert!(
            t.markers
                .iter()
                .all(|m| m.kind == MarkerKind::Step && m.cell == Some(0)),
            "the chosen range marks the steps of every delivery"
        );
        assert_eq!(t.metadata.workload["step_range"], "step");
        assert_eq!(
            t.metadata.chosen_step_range(),
            Some("step"),
            "the workload says the recorder chose it"
        );
        assert_eq!(t.str(t.kernels[15].name), "kernel1");
        assert_eq!(t.dropped_records, 1);
        let note = t.metadata.notes.last().unwrap();
        assert!(
            note.contains("process 4242 was killed by signal 9 (SIGKILL) without writing")
                && note.contains("from the 2 deliveries")
                && note.contains("cut short (39 bytes"),
            "{note}"
        );
        // A dead process's file is recovered into its trace, atomically, and removed.
        let (traces, problems) = recover(dir.path(), &[], |_| "ended".into());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(traces, [dir.path().join("trace-0.json")]);
        assert!(!path.exists());
        let back = crate::trace::read_trace(&traces[0]).unwrap();
        assert_eq!(back.kernels.len(), 20);
    }

    #[test]
    fn a_spill_file_that_is_not_one_is_a_one_line_problem_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = spill_path(dir.path(), 999_999_999);
        std::fs::write(&path, b"{\"not\": 1}\n").unwrap();
        let (traces, problems) = recover(dir.path(), &[], |_| "ended".into());
        assert!(traces.is_empty());
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("not a gapscope spill file: header")
                && !problems[0].contains('\n'),
            "{problems:?}"
        );
        assert!(path.exists());
    }
}
