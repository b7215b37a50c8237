//! Host time in the gaps: what the launching thread ran while the device waited on it.
//!
//! For a host-bound gap ([`is_host_bound`]: graph launch host-bound, host launch-bound, host
//! synchronisation), the host samples ([`crate::trace::HostSamples`]) of the thread that made
//! the op's launch call, taken inside the gap, aggregated over the cell's steps (one position
//! of its op sequence), name the code: each sample's innermost frame of the program's code —
//! its own files and the model libraries it is written in (transformers' `generate()`), told
//! from the runtime they call by [`is_runtime_file`] — and the runtime frame that frame
//! called (torch, Triton, the standard library). Samples are uniform in time, so a code's share of the
//! samples is its share of the gaps' time. Fewer than [`MIN_SAMPLES`] samples name nothing.
#![forbid(unsafe_code)]

use super::model::CauseKind;
use crate::trace::{HostFrame, HostSamples};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Fewer samples than this in a position's gaps name no code: at 10, one code's share is
/// known to about ±15 points (a binomial's spread at 50 %), enough to rank the first.
pub const MIN_SAMPLES: usize = 10;

/// Codes listed per gap, largest share first.
pub const TOP_CODES: usize = 3;

/// Codes listed for a cell's host-bound gaps together ([`CellAnalysis::host_time`]), what
/// `compare` compares.
///
/// [`CellAnalysis::host_time`]: super::CellAnalysis::host_time
pub const CELL_TOP_CODES: usize = 20;

/// Whether the host's own work held a gap of this kind: the causes whose gaps host samples
/// explain.
pub fn is_host_bound(kind: CauseKind) -> bool {
    matches!(
        kind,
        CauseKind::GraphLaunchHostBound | CauseKind::HostLaunchBound | CauseKind::Synchronization
    )
}

/// The host code sampled in the gaps before one op of a cell's sequence, over its steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostTime {
    /// Host-bound gaps looked at (one per step that had one here).
    pub gaps: usize,
    /// Their total length, ns.
    pub gap_ns: u64,
    /// For a cell's host-bound gaps together: their length a step (ns), over the steps with
    /// a period; `None` for one position's gaps (its gap figure is the sequence entry's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_step: Option<super::stats::Stat>,
    /// Samples of the launching thread inside them (exact: the traced calls' spans).
    pub samples: usize,
    /// From exact spans of traced calls (a torch.profiler import), not samples
    /// ([`HostSamples::exact`]): shares are of the time they cover.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
    /// The codes, largest share first (at most [`TOP_CODES`]); empty below [`MIN_SAMPLES`]
    /// samples (exact: when no span falls in the gaps).
    pub top: Vec<HostCode>,
}

/// One code the launching thread ran in the gaps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostCode {
    /// The innermost frame of the program's code, its own or a model library's
    /// ("transformers/generation/utils.py:3310 _sample"), or, when
    /// the stack holds none, its outermost frame.
    pub code: String,
    /// The runtime frame that code called ("torch/_dynamo/eval_frame.py:_fn"), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<String>,
    /// The innermost frame where most of these samples were ("torch/_dynamo/guards.py:check").
    pub innermost: String,
    /// Samples, and their share of the gaps' samples (0…1).
    pub samples: usize,
    pub share: f64,
}

impl HostTime {
    /// "74 % transformers/generation/utils.py:3310 _sample → torch/_dynamo/eval_frame.py:_fn;
    /// 12 % … (n = 120)", or
    /// "3 samples: too few to name the code".
    pub fn describe(&self) -> String {
        if self.top.is_empty() {
            return self.too_few();
        }
        let codes: Vec<String> = self.named().iter().map(HostCode::describe).collect();
        if self.exact {
            return format!("{} ({} traced spans)", codes.join("; "), self.samples);
        }
        format!("{} (n = {})", codes.join("; "), self.samples)
    }

    /// The codes reports name: the first [`TOP_CODES`] (a cell's all-gaps host time keeps up
    /// to [`CELL_TOP_CODES`] for `compare`).
    pub fn named(&self) -> &[HostCode] {
        &self.top[..self.top.len().min(TOP_CODES)]
    }

    /// "N samples: too few to name the code"; exact: "no Python call traced in the gaps".
    pub fn too_few(&self) -> String {
        if self.exact {
            return "no Python call traced in the gaps".to_owned();
        }
        let s = if self.samples == 1 { "" } else { "s" };
        format!("{} sample{s}: too few to name the code", self.samples)
    }
}

impl HostCode {
    /// "74 % transformers/generation/utils.py:3310 _sample → torch/_dynamo/eval_frame.py:_fn".
    pub fn describe(&self) -> String {
        let share = format!("{:.0} %", self.share * 100.0);
        match &self.calls {
            Some(lib) => format!("{share} {} → {lib}", self.code),
            None => format!("{share} {}", self.code),
        }
    }
}

/// A trace's host samples per thread, in time order: `(time on the trace's clock, stack)`.
pub struct SampleIndex<'a> {
    samples: &'a HostSamples,
    /// `(start, end, stack)` on the trace's clock: a sample's `start == end` (its read's
    /// middle); an exact span's, its span ([`HostSamples::exact`]).
    by_thread: FxHashMap<u32, Vec<(u64, u64, u32)>>,
}

impl<'a> SampleIndex<'a> {
    /// `None` for a trace without host samples (or whose samples were all left out).
    pub fn new(samples: Option<&'a HostSamples>) -> Option<SampleIndex<'a>> {
        let samples = samples.filter(|s| !s.samples.is_empty())?;
        let mut by_thread: FxHashMap<u32, Vec<(u64, u64, u32)>> = FxHashMap::default();
        for s in &samples.samples {
            let span = if samples.exact {
                let start = s.time.saturating_add_signed(samples.offset_ns);
                (start, start.saturating_add(u64::from(s.read_ns)), s.stack)
            } else {
                let at = samples.trace_time(s);
                (at, at, s.stack)
            };
            by_thread.entry(s.thread).or_default().push(span);
        }
        for v in by_thread.values_mut() {
            v.sort_unstable();
        }
        Some(SampleIndex { samples, by_thread })
    }

    /// The stacks of `thread` in `[start, end]` (the trace's clock), each with its weight: 1
    /// per sample, the ns of overlap per exact span (spans of one thread do not overlap).
    fn stacks_in(&self, thread: u32, start: u64, end: u64) -> Vec<(u32, u64)> {
        let Some(v) = self.by_thread.get(&thread) else {
            return Vec::new();
        };
        if !self.samples.exact {
            let from = v.partition_point(|&(t, _, _)| t < start);
            let to = v.partition_point(|&(t, _, _)| t <= end).max(from);
            return v[from..to]
                .iter()
                .map(|&(_, _, stack)| (stack, 1))
                .collect();
        }
        let from = v.partition_point(|&(_, e, _)| e <= start);
        v[from..]
            .iter()
            .take_while(|&&(s, _, _)| s < end)
            .map(|&(s, e, stack)| (stack, e.min(end) - s.max(start)))
            .filter(|&(_, w)| w > 0)
            .collect()
    }

    /// The code sampled in `gaps` (`(start, end, launching thread)`), aggregated: the
    /// [`TOP_CODES`] largest.
    pub fn attribute(&self, gaps: &[(u64, u64, u32)]) -> HostTime {
        self.attribute_top(gaps, TOP_CODES)
    }

    /// [`SampleIndex::attribute`], listing `most` codes.
    pub fn attribute_top(&self, gaps: &[(u64, u64, u32)], most: usize) -> HostTime {
        let stacks: Vec<(u32, u64)> = gaps
            .iter()
            .flat_map(|&(s, e, thread)| self.stacks_in(thread, s, e))
            .collect();
        // Exact spans have no sampling error: any time covered names its code.
        let enough = if self.samples.exact {
            !stacks.is_empty()
        } else {
            stacks.len() >= MIN_SAMPLES
        };
        HostTime {
            gaps: gaps.len(),
            gap_ns: gaps.iter().map(|&(s, e, _)| e.saturating_sub(s)).sum(),
            per_step: None,
            samples: stacks.len(),
            exact: self.samples.exact,
            top: if enough {
                self.top_codes(&stacks, most)
            } else {
                Vec::new()
            },
        }
    }

    fn top_codes(&self, stacks: &[(u32, u64)], most: usize) -> Vec<HostCode> {
        // Per (function, calls): samples, weight, weight per line (the code is named by its
        // heaviest line, so one function's lines add up) and per innermost frame.
        type Group = (usize, u64, FxHashMap<String, u64>, FxHashMap<String, u64>);
        let mut groups: FxHashMap<(String, Option<String>), Group> = FxHashMap::default();
        for &(stack, weight) in stacks {
            let frames: Vec<&HostFrame> = self.samples.stack(stack).collect();
            let (code, calls) = own_code(&frames);
            let function = code_function(&frames);
            let innermost = frames.first().map_or_else(String::new, |f| short_frame(f));
            let group = groups.entry((function, calls)).or_default();
            group.0 += 1;
            group.1 += weight;
            *group.2.entry(code).or_default() += weight;
            *group.3.entry(innermost).or_default() += weight;
        }
        let total = stacks.iter().map(|s| s.1).sum::<u64>().max(1) as f64;
        let mut codes: Vec<(u64, HostCode)> = groups
            .into_iter()
            .map(|((_, calls), (samples, weight, lines, inner))| {
                let heaviest = |m: FxHashMap<String, u64>| {
                    m.into_iter()
                        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                        .map(|(f, _)| f)
                        .unwrap_or_default()
                };
                let code = heaviest(lines);
                let innermost = heaviest(inner);
                let share = weight as f64 / total;
                let code = HostCode {
                    code,
                    calls,
                    innermost,
                    samples,
                    share,
                };
                (weight, code)
            })
            .collect();
        codes.sort_by(|(wa, a), (wb, b)| {
            wb.cmp(wa)
                .then_with(|| a.code.cmp(&b.code))
                .then_with(|| a.calls.cmp(&b.calls))
        });
        codes.into_iter().take(most).map(|(_, c)| c).collect()
    }
}

/// The host code whose share of a cell's host-bound gaps changed most between two cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostCodeChange {
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<String>,
    /// Its share (0…1) of the base's and the head's host-bound gaps' samples: 0 where it is
    /// not among that side's [`CELL_TOP_CODES`] largest.
    pub base_share: f64,
    pub head_share: f64,
    /// The samples of each side's host-bound gaps.
    pub base_samples: usize,
    pub head_samples: usize,
}

impl HostCodeChange {
    /// The code whose share changed most from `base` to `head` (largest |Δ share|, ties by
    /// name); `None` unless both sides name code ([`MIN_SAMPLES`] samples or more).
    pub fn between(base: &HostTime, head: &HostTime) -> Option<HostCodeChange> {
        if base.top.is_empty() || head.top.is_empty() {
            return None;
        }
        let share = |t: &HostTime, c: &HostCode| {
            t.top
                .iter()
                .find(|o| o.code == c.code && o.calls == c.calls)
                .map_or(0.0, |o| o.share)
        };
        base.top
            .iter()
            .chain(&head.top)
            .map(|c| HostCodeChange {
                code: c.code.clone(),
                calls: c.calls.clone(),
                base_share: share(base, c),
                head_share: share(head, c),
                base_samples: base.samples,
                head_samples: head.samples,
            })
            .max_by(|a, b| {
                let d = |x: &HostCodeChange| (x.head_share - x.base_share).abs();
                d(a).total_cmp(&d(b))
                    .then_with(|| (&b.code, &b.calls).cmp(&(&a.code, &a.calls)))
            })
    }

    /// "work/step.py:30 step → torch/…:forward: 20 % (n = 400) → 65 % (n = 900) of the
    /// host-bound gaps' time".
    pub fn describe(&self) -> String {
        let code = match &self.calls {
            Some(lib) => format!("{} → {lib}", self.code),
            None => self.code.clone(),
        };
        format!(
            "{code}: {:.0} % (n = {}) → {:.0} % (n = {}) of the host-bound gaps' time",
            self.base_share * 100.0,
            self.base_samples,
            self.head_share * 100.0,
            self.head_samples
        )
    }
}

/// A stack's (innermost first) innermost frame of the program's code, and the runtime frame
/// it called; a stack with no frame of the program's: its outermost frame, and the frame it
/// called.
pub fn own_code(frames: &[&HostFrame]) -> (String, Option<String>) {
    let at = own_index(frames);
    let Some(frame) = frames.get(at) else {
        return ("(no Python frame)".to_owned(), None);
    };
    let calls = at.checked_sub(1).map(|i| short_frame(frames[i]));
    (own_frame(frame), calls)
}

/// The function [`own_code`] names, without its line: what one code's samples share.
fn code_function(frames: &[&HostFrame]) -> String {
    frames
        .get(own_index(frames))
        .map_or_else(String::new, |f| short_frame(f))
}

/// The position of the code [`own_code`] names: the innermost frame of the program's, else
/// the outermost.
fn own_index(frames: &[&HostFrame]) -> usize {
    let runtime = runtime_frames(frames);
    let own = runtime.iter().position(|&r| !r);
    own.unwrap_or(frames.len().saturating_sub(1))
}

/// Whether each frame of a stack (innermost first) is the runtime's ([`is_runtime_file`]).
/// Code run from a string (`<string>`: Triton's kernel launcher, a dataclass's `__init__`, or
/// a `python -c` program) belongs to whoever ran it: the runtime's when a runtime frame called
/// it, the program's when the program did or nothing did.
fn runtime_frames(frames: &[&HostFrame]) -> Vec<bool> {
    let mut runtime = vec![false; frames.len()];
    let mut caller_is_runtime = false;
    for (i, f) in frames.iter().enumerate().rev() {
        runtime[i] = if f.file == EXEC_STRING_FILE {
            caller_is_runtime
        } else {
            is_runtime_file(&f.file)
        };
        caller_is_runtime = runtime[i];
    }
    runtime
}

/// The file name CPython gives code compiled from a string (`exec`, `python -c`).
const EXEC_STRING_FILE: &str = "<string>";

/// Packages that programs call into rather than write their code in: torch and what it
/// compiles and runs with. A model library (transformers, accelerate, …) is the program's code:
/// its `generate()` and `forward` are where a user looks for what the host did.
const RUNTIME_PACKAGES: [&str; 8] = [
    "torch",
    "triton",
    "functorch",
    "torchgen",
    "numpy",
    "nvidia",
    "sympy",
    "typing_extensions",
];

/// Whether a file is the runtime's rather than the program's: a runtime package (torch,
/// Triton, numpy, …), the standard library (`lib/pythonX.Y/`), frozen modules, code torch.compile
/// generated (inductor's `/tmp/torchinductor_USER/…`), or no file at all (a built-in function
/// traced by torch.profiler).
pub fn is_runtime_file(file: &str) -> bool {
    if let Some(path) = package_path(file) {
        let package = path.split(['/', '.']).next().unwrap_or("");
        return RUNTIME_PACKAGES.contains(&package);
    }
    file.is_empty()
        || file.starts_with("<frozen")
        || file.contains("/torchinductor_")
        || stdlib_tail(file).is_some()
}

/// The path inside `site-packages` or `dist-packages` of an installed package's file.
fn package_path(file: &str) -> Option<&str> {
    ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|m| file.rfind(m).map(|i| &file[i + m.len()..]))
}

/// The path inside the standard library of a file under `…/lib/pythonX.Y/`.
fn stdlib_tail(file: &str) -> Option<&str> {
    let at = file.find("/lib/python")?;
    let rest = &file[at + "/lib/python".len()..];
    let slash = rest.find('/')?;
    rest[..slash]
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == 't')
        .then(|| &rest[slash + 1..])
}

/// A frame as "package/path.py:function" (the runtime's) or "path.py:LINE function" (the
/// program's: an installed package's path inside `site-packages`, else the file's last two
/// parts).
pub fn frame_label(f: &HostFrame) -> String {
    own_frame(f)
}

/// The file's short path: inside `site-packages` or the standard library, else its last two
/// parts ("models/decode.py").
fn short_path(file: &str) -> &str {
    package_path(file)
        .or_else(|| stdlib_tail(file))
        .unwrap_or_else(|| last_parts(file))
}

/// A runtime frame as "package/path.py:function".
fn short_frame(f: &HostFrame) -> String {
    if f.file.is_empty() {
        return f.function.clone();
    }
    format!("{}:{}", short_path(&f.file), f.function)
}

/// The program's frame as "path.py:LINE function".
fn own_frame(f: &HostFrame) -> String {
    if is_runtime_file(&f.file) {
        return short_frame(f);
    }
    format!("{}:{} {}", short_path(&f.file), f.line, f.function)
}

/// The last two parts of a path ("models/decode.py").
fn last_parts(file: &str) -> &str {
    let mut cut = file.rmatch_indices('/').map(|(i, _)| i);
    let _ = cut.next();
    cut.next().map_or(file, |i| &file[i + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::HostSample;

    fn frame(file: &str, function: &str, line: u32) -> HostFrame {
        HostFrame {
            file: file.into(),
            function: function.into(),
            line,
        }
    }

    /// Frames 0..: the program's decode step calling transformers, whose `_sample` called a
    /// torch guard (stack 0); the program's own loop (stack 1); another thread's stack (2).
    fn samples(offset_ns: i64, on: &[(u64, u32, u32)]) -> HostSamples {
        let site = "/venv/lib/python3.11/site-packages";
        HostSamples {
            sampler: "test".into(),
            rate_hz: 1000,
            clock: "test".into(),
            offset_ns,
            frames: vec![
                frame(&format!("{site}/torch/_dynamo/guards.py"), "check", 10),
                frame(
                    &format!("{site}/transformers/generation/utils.py"),
                    "_sample",
                    20,
                ),
                frame("/home/u/app/decode.py", "decode_step", 41),
                frame("/home/u/app/decode.py", "main", 90),
                frame("/usr/lib/python3.11/threading.py", "wait", 300),
            ],
            stacks: vec![vec![0, 1, 2, 3], vec![3], vec![4]],
            samples: on
                .iter()
                .map(|&(time, thread, stack)| HostSample {
                    time,
                    read_ns: 0,
                    thread,
                    stack,
                })
                .collect(),
            ..HostSamples::default()
        }
    }

    #[test]
    fn host_bound_causes_are_the_launch_and_synchronisation_ones() {
        let bound: Vec<CauseKind> = CauseKind::ALL
            .into_iter()
            .filter(|&k| is_host_bound(k))
            .collect();
        assert_eq!(
            bound,
            [
                CauseKind::GraphLaunchHostBound,
                CauseKind::HostLaunchBound,
                CauseKind::Synchronization
            ]
        );
    }

    /// Two gaps of 10 µs on thread 7: 16 samples in them (12 in the guard, 4 in the program's
    /// loop) name the code with shares; samples outside the gaps and on thread 8 count for
    /// nothing.
    #[test]
    fn samples_of_the_launching_thread_inside_the_gaps_name_the_code() {
        let mut on = Vec::new();
        for k in 0..12 {
            on.push((1_000 + k * 500, 7, 0));
        }
        for k in 0..4 {
            on.push((20_000 + k * 500, 7, 1));
        }
        on.push((500, 7, 1)); // before the first gap
        on.push((15_000, 7, 1)); // between the gaps
        for k in 0..20 {
            on.push((1_000 + k * 100, 8, 2)); // another thread, inside the gap
        }
        let samples = samples(0, &on);
        let index = SampleIndex::new(Some(&samples)).unwrap();
        let t = index.attribute(&[(1_000, 11_000, 7), (20_000, 30_000, 7)]);
        assert_eq!((t.gaps, t.gap_ns, t.samples), (2, 20_000, 16));
        assert_eq!(t.top.len(), 2);
        let first = &t.top[0];
        assert_eq!(first.code, "transformers/generation/utils.py:20 _sample");
        assert_eq!(
            first.calls.as_deref(),
            Some("torch/_dynamo/guards.py:check")
        );
        assert_eq!(first.innermost, "torch/_dynamo/guards.py:check");
        assert_eq!((first.samples, first.share), (12, 0.75));
        assert_eq!(t.top[1].code, "app/decode.py:90 main");
        assert_eq!(t.top[1].calls, None);
        assert_eq!(
            t.describe(),
            "75 % transformers/generation/utils.py:20 _sample → torch/_dynamo/guards.py:check; 25 % app/decode.py:90 main (n = 16)"
        );
    }

    /// 6 samples on line 65 and 5 on line 66 of one function are one code of 11, named by
    /// its heaviest line.
    #[test]
    fn the_lines_of_one_function_add_up_to_one_code() {
        let on: Vec<(u64, u32, u32)> = (0..11u64)
            .map(|k| (1_000 + k * 100, 7, if k < 6 { 3 } else { 4 }))
            .collect();
        let mut samples = samples(0, &on);
        samples
            .frames
            .push(frame("/home/u/app/norm.py", "forward", 65));
        samples
            .frames
            .push(frame("/home/u/app/norm.py", "forward", 66));
        samples.stacks.push(vec![5, 3]);
        samples.stacks.push(vec![6, 3]);
        let index = SampleIndex::new(Some(&samples)).unwrap();
        let t = index.attribute(&[(0, 10_000, 7)]);
        assert_eq!(t.describe(), "100 % app/norm.py:65 forward (n = 11)");
    }

    #[test]
    fn a_gap_without_samples_and_too_few_samples_name_nothing() {
        let on: Vec<(u64, u32, u32)> = (0..3).map(|k| (1_000 + k * 1_000, 7, 0)).collect();
        let samples = samples(0, &on);
        let index = SampleIndex::new(Some(&samples)).unwrap();
        let empty = index.attribute(&[(50_000, 60_000, 7)]);
        assert_eq!((empty.gaps, empty.samples), (1, 0));
        assert!(empty.top.is_empty());
        assert_eq!(empty.describe(), "0 samples: too few to name the code");
        let few = index.attribute(&[(0, 10_000, 7)]);
        assert_eq!(few.samples, 3);
        assert!(few.top.is_empty(), "below MIN_SAMPLES: no guess");
        assert_eq!(few.describe(), "3 samples: too few to name the code");
        assert!(SampleIndex::new(None).is_none(), "no samples, no index");
        let none_kept = HostSamples {
            away_from_records: 3,
            ..samples.clone()
        };
        let none_kept = HostSamples {
            samples: Vec::new(),
            ..none_kept
        };
        assert!(SampleIndex::new(Some(&none_kept)).is_none(), "all left out");
    }

    /// Sample times plus the offset are the trace's: samples taken 1 ms "early" on the
    /// sampler's clock land in the gap once the offset is applied.
    #[test]
    fn the_clock_offset_is_applied_before_matching() {
        let on: Vec<(u64, u32, u32)> = (0..10).map(|k| (k * 100, 7, 1)).collect();
        let shifted = samples(1_000_000, &on);
        let index = SampleIndex::new(Some(&shifted)).unwrap();
        assert_eq!(index.attribute(&[(1_000_000, 1_001_000, 7)]).samples, 10);
        let unshifted = samples(0, &on);
        let index = SampleIndex::new(Some(&unshifted)).unwrap();
        assert_eq!(index.attribute(&[(1_000_000, 1_001_000, 7)]).samples, 0);
    }

    #[test]
    fn the_code_whose_share_changed_most_is_named_between_two_cells() {
        let code = |name: &str, samples: usize, share: f64| HostCode {
            code: name.into(),
            calls: None,
            innermost: name.into(),
            samples,
            share,
        };
        let time = |top: Vec<HostCode>| HostTime {
            gaps: 1,
            gap_ns: 1,
            per_step: None,
            exact: false,
            samples: top.iter().map(|c| c.samples).sum(),
            top,
        };
        let base = time(vec![code("a.py:1 f", 60, 0.6), code("a.py:2 g", 40, 0.4)]);
        let head = time(vec![code("a.py:2 g", 90, 0.9), code("a.py:3 h", 10, 0.1)]);
        let c = HostCodeChange::between(&base, &head).unwrap();
        assert_eq!(c.code, "a.py:1 f", "60 % → 0 %, the largest change");
        assert_eq!((c.base_share, c.head_share), (0.6, 0.0));
        assert_eq!(
            c.describe(),
            "a.py:1 f: 60 % (n = 100) → 0 % (n = 100) of the host-bound gaps' time"
        );
        let few = time(Vec::new());
        assert_eq!(
            HostCodeChange::between(&base, &few),
            None,
            "too few: no claim"
        );
    }

    #[test]
    fn the_runtime_is_torch_its_kin_the_standard_library_and_generated_code() {
        for lib in [
            "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
            "/venv/lib/python3.12/site-packages/triton/runtime/jit.py",
            "/venv/lib/python3.12/site-packages/typing_extensions.py",
            "/usr/lib/python3/dist-packages/numpy/core.py",
            "/usr/lib/python3.12/threading.py",
            "/opt/conda/lib/python3.13t/asyncio/events.py",
            "<frozen importlib._bootstrap>",
            "/tmp/torchinductor_root/q3/cq3abc.py",
        ] {
            assert!(is_runtime_file(lib), "{lib}");
        }
        for own in [
            "/home/u/app/decode.py",
            "/venv/lib/python3.12/site-packages/transformers/generation/utils.py",
            "/venv/lib/python3.12/site-packages/torchvision_like/x.py",
            "<string>",
            "train.py",
            "/srv/lib/pythonic/x.py",
        ] {
            assert!(!is_runtime_file(own), "{own}");
        }
        // Code run from a string is its caller's: Triton's launcher is the runtime's, a
        // `python -c` program's own code is the program's.
        let launcher = frame("<string>", "launcher", 5);
        let triton = frame(
            "/venv/lib/python3.12/site-packages/triton/backends/nvidia/driver.py",
            "__call__",
            500,
        );
        let inductor = frame("/tmp/torchinductor_root/q3/cq3abc.py", "call", 80);
        let model = frame(
            "/venv/lib/python3.12/site-packages/transformers/utils/generic.py",
            "wrapper",
            933,
        );
        assert_eq!(
            own_code(&[&launcher, &triton, &inductor, &model]).0,
            "transformers/utils/generic.py:933 wrapper"
        );
        let inline = frame("<string>", "busy", 2);
        let module = frame("<string>", "<module>", 4);
        assert_eq!(
            own_code(&[&launcher, &inline, &module]).0,
            "<string>:5 launcher"
        );
        assert_eq!(own_code(&[&inline, &module]).0, "<string>:2 busy");
        let sample = frame(
            "/venv/lib/python3.12/site-packages/transformers/generation/utils.py",
            "_sample",
            3310,
        );
        assert_eq!(
            frame_label(&sample),
            "transformers/generation/utils.py:3310 _sample"
        );
        assert_eq!(last_parts("/a/b/c.py"), "b/c.py");
        assert_eq!(last_parts("c.py"), "c.py");
    }
}
