//! The host samples of a trace: the Python stacks of the program's threads, read from outside
//! the process while it ran (by `gapscope record`, see [`crate::record::host_sampler`]).
//!
//! Optional in the file ([`crate::trace::Trace::host_samples`]): absent in traces recorded
//! without them and in every trace written before they existed, which read unchanged.
#![forbid(unsafe_code)]

use super::InvalidTrace;
use serde::{Deserialize, Serialize};

/// Stacks sampled on the host, interned: each sample names a stack, each stack its frames.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSamples {
    /// What sampled, e.g. "py-spy 0.4.3, non-blocking (the program is never stopped)".
    pub sampler: String,
    /// Samples asked for per second, per process.
    pub rate_hz: u32,
    /// How sample times relate to the trace's clock, in words (measured or by construction).
    pub clock: String,
    /// Added to a sample's [`HostSample::time`] to put it on the trace's clock (ns).
    #[serde(default)]
    pub offset_ns: i64,
    /// Every frame named by a stack.
    #[serde(default)]
    pub frames: Vec<HostFrame>,
    /// Stacks as indices into `frames`, innermost frame first.
    #[serde(default)]
    pub stacks: Vec<Vec<u32>>,
    /// The samples, by time.
    #[serde(default)]
    pub samples: Vec<HostSample>,
    /// Reads of the process's stacks that failed (a thread changing under the non-blocking
    /// read, the process exiting): no sample for them.
    #[serde(default, skip_serializing_if = "super::schema::is_zero_u64")]
    pub failed_reads: u64,
    /// Samples not kept past the sampler's limit on samples per process.
    #[serde(default, skip_serializing_if = "super::schema::is_zero_u64")]
    pub left_out: u64,
    /// Samples not kept as too far from every API record of the trace to fall in a gap
    /// (before CUDA started, after the last record, stretches the trace budget left untraced).
    #[serde(default, skip_serializing_if = "super::schema::is_zero_u64")]
    pub away_from_records: u64,
    /// Each sample's stack held *throughout* `[time, time + read_ns]`: spans of traced calls
    /// (torch.profiler's `python_function` events), not samples of a moment; the attribution
    /// weighs them by time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
}

/// One Python frame. In the file: `[file, function, line]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "HostFrameRow", from = "HostFrameRow")]
pub struct HostFrame {
    /// The file as the interpreter names it (a full path, or `<string>`).
    pub file: String,
    pub function: String,
    /// 0 when unknown.
    pub line: u32,
}

impl HostFrame {
    /// The frame as one line of a graph node's Python stack
    /// ([`crate::trace::GraphNode::python_stack`]): `file<TAB>line<TAB>function`.
    pub fn stack_line(file: &str, line: u32, function: &str) -> String {
        format!("{file}\t{line}\t{function}")
    }

    /// A graph node's Python stack, innermost first, as [`Self::stack_line`] wrote it; a line
    /// of another shape is a frame with no file.
    pub fn parse_stack(stack: &str) -> Vec<HostFrame> {
        stack
            .lines()
            .map(|l| {
                let mut parts = l.splitn(3, '\t');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(file), Some(line), Some(function)) => HostFrame {
                        file: file.to_owned(),
                        function: function.to_owned(),
                        line: line.parse().unwrap_or(0),
                    },
                    _ => HostFrame {
                        function: l.to_owned(),
                        ..HostFrame::default()
                    },
                }
            })
            .collect()
    }
}

type HostFrameRow = (String, String, u32);

impl From<HostFrame> for HostFrameRow {
    fn from(f: HostFrame) -> Self {
        (f.file, f.function, f.line)
    }
}

impl From<HostFrameRow> for HostFrame {
    fn from((file, function, line): HostFrameRow) -> Self {
        HostFrame {
            file,
            function,
            line,
        }
    }
}

/// One thread's stack at one time. In the file: `[time, read_ns, thread, stack]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "HostSampleRow", from = "HostSampleRow")]
pub struct HostSample {
    /// When the read of the stacks began (ns, the sampler's clock: add
    /// [`HostSamples::offset_ns`] for the trace's).
    pub time: u64,
    /// How long the read took: the stack is the thread's at some moment in
    /// `[time, time + read_ns]`.
    pub read_ns: u32,
    /// The OS thread id, as the trace's API records name threads.
    pub thread: u32,
    /// Index into [`HostSamples::stacks`].
    pub stack: u32,
}

type HostSampleRow = (u64, u32, u32, u32);

impl From<HostSample> for HostSampleRow {
    fn from(s: HostSample) -> Self {
        (s.time, s.read_ns, s.thread, s.stack)
    }
}

impl From<HostSampleRow> for HostSample {
    fn from((time, read_ns, thread, stack): HostSampleRow) -> Self {
        HostSample {
            time,
            read_ns,
            thread,
            stack,
        }
    }
}

impl HostSamples {
    /// The sample's time on the trace's clock: the middle of its read, offset applied.
    pub fn trace_time(&self, s: &HostSample) -> u64 {
        let mid = s.time.saturating_add(u64::from(s.read_ns / 2));
        mid.saturating_add_signed(self.offset_ns)
    }

    /// The frames of a stack, innermost first (none for an index out of range).
    pub fn stack(&self, index: u32) -> impl Iterator<Item = &HostFrame> {
        self.stacks
            .get(index as usize)
            .into_iter()
            .flatten()
            .filter_map(|&f| self.frames.get(f as usize))
    }

    /// Checks every index; the first problem, as one line.
    pub fn validate(&self) -> Result<(), InvalidTrace> {
        let frames = self.frames.len();
        for (i, stack) in self.stacks.iter().enumerate() {
            if let Some(&f) = stack.iter().find(|&&f| f as usize >= frames) {
                return Err(InvalidTrace::FrameOutOfRange {
                    stack: i,
                    frame: f,
                    count: frames,
                });
            }
        }
        let stacks = self.stacks.len();
        match self.samples.iter().position(|s| s.stack as usize >= stacks) {
            Some(i) => Err(InvalidTrace::StackOutOfRange {
                sample: i,
                stack: self.samples[i].stack,
                count: stacks,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_rows_in_the_file_and_checked_on_reading() {
        let samples = HostSamples {
            sampler: "test".into(),
            rate_hz: 1000,
            clock: "same clock".into(),
            offset_ns: -5,
            frames: vec![HostFrame {
                file: "/app/model.py".into(),
                function: "forward".into(),
                line: 12,
            }],
            stacks: vec![vec![0]],
            samples: vec![HostSample {
                time: 1_000,
                read_ns: 40,
                thread: 7,
                stack: 0,
            }],
            failed_reads: 0,
            left_out: 0,
            away_from_records: 0,
            exact: false,
        };
        let json = serde_json::to_value(&samples).unwrap();
        assert_eq!(
            json["frames"][0],
            serde_json::json!(["/app/model.py", "forward", 12])
        );
        assert_eq!(json["samples"][0], serde_json::json!([1000, 40, 7, 0]));
        assert!(json.get("failed_reads").is_none(), "{json}");
        let back: HostSamples = serde_json::from_value(json).unwrap();
        assert_eq!(back, samples);
        assert_eq!(
            back.trace_time(&back.samples[0]),
            1_015,
            "read's middle, offset"
        );
        assert!(back.validate().is_ok());
        let bad = HostSamples {
            stacks: vec![vec![3]],
            ..samples
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "host stack #0 names frame 3, but there are only 1"
        );
    }

    /// `record` adds the samples to the trace file the program wrote, without parsing it
    /// again: the file then reads with them, and the rest unchanged.
    #[test]
    fn samples_added_to_a_written_trace_read_back_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace-0.json");
        let trace = crate::trace::synthetic::emu_experiment(3);
        crate::trace::write_trace(&path, &trace).unwrap();
        let samples = HostSamples {
            sampler: "test".into(),
            rate_hz: 1000,
            frames: vec![HostFrame::default()],
            stacks: vec![vec![0]],
            samples: vec![HostSample::default()],
            ..HostSamples::default()
        };
        crate::trace::add_host_samples(&path, &samples).unwrap();
        let back = crate::trace::read_trace(&path).unwrap();
        assert_eq!(back.host_samples.as_ref(), Some(&samples));
        let before = crate::trace::read_trace(&path).map(|mut t| {
            t.host_samples = None;
            t
        });
        let mut written = crate::trace::parse_trace(
            &serde_json::to_vec(&trace).unwrap(),
            std::path::Path::new("x"),
        )
        .unwrap();
        written.host_samples = None;
        assert_eq!(before.unwrap(), written, "the rest as written");
        let again = crate::trace::add_host_samples(&path, &samples).unwrap_err();
        assert!(
            again.to_string().contains("already holds host samples"),
            "{again}"
        );
        std::fs::write(&path, b"[1, 2]").unwrap();
        assert!(crate::trace::add_host_samples(&path, &samples).is_err());
    }
}
