//! What a trace's reports say about its steps: how they were found ([`StepSource`]), the loops
//! found, and the host range that could mark them ([`StepFinding`]).
#![forbid(unsafe_code)]

use super::cells::FoundSteps;
use super::range_hint::RangeHint;
use serde::Serialize;

/// How a trace's eager steps were found, for every report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Step markers (`--step-range`, `ProfilerStep`, `gapscope run`'s own).
    #[default]
    Markers,
    /// Loops found in the kernel sequence.
    KernelSequence,
    /// Neither markers nor a repeating sequence.
    NoRepetition,
}

/// What a trace's reports say about its steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepFinding {
    pub source: StepSource,
    /// The loops found, one per eager cell they made.
    pub loops: Vec<FoundSteps>,
    /// Eager ops searched, those in no step, and those of loops beside graph replays.
    pub eager_ops: usize,
    pub left_over: usize,
    pub beside_graphs: usize,
    /// The trace has graph replays (their cells need no markers).
    pub graphs: bool,
    /// Without step markers: a repeated host range that could mark the steps.
    pub step_range_hint: Option<RangeHint>,
    /// The step range `gapscope record` chose when none was given (its steps are the markers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen_step_range: Option<String>,
    /// That range was chosen when the trace was imported
    /// ([`choose_step_range`](super::range_hint::choose_step_range)), not by `gapscope record`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chosen_on_import: bool,
}

impl StepFinding {
    /// Lines for the screen and the report: how the steps were found, and the flag to pass.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let beside = if self.beside_graphs > 0 {
            format!(
                "; {} ops repeat beside each graph replay and belong to the replays",
                self.beside_graphs
            )
        } else {
            String::new()
        };
        match self.source {
            StepSource::Markers => {
                match (&self.chosen_step_range, self.chosen_on_import) {
                    (Some(name), false) => lines.push(format!(
                        "Steps: the NVTX range `{name}`, which `gapscope record` chose (the outermost range around device work); `gapscope record --step-range NAME` chooses another"
                    )),
                    (Some(name), true) => lines.push(format!(
                        "Steps: the NVTX range `{name}`, chosen on import as `gapscope record` chooses (the outermost range around device work); `--step-range NAME` chooses another"
                    )),
                    (None, _) => {}
                }
            }
            StepSource::KernelSequence => {
                let where_ = match self.loops.first().and_then(|l| l.inside_marker.as_deref()) {
                    Some(m) => format!("inside the one step marker `{m}`"),
                    None => "no step markers".to_owned(),
                };
                let loops: Vec<String> = self
                    .loops
                    .iter()
                    .map(|l| format!("E{} {}", l.ordinal, l.describe()))
                    .collect();
                lines.push(format!(
                    "Steps found from the kernel sequence ({where_}): {}; {} of {} eager ops left over{beside}",
                    loops.join("; "),
                    self.left_over,
                    self.eager_ops
                ));
            }
            StepSource::NoRepetition if self.eager_ops > 0 => lines.push(format!(
                "Steps: no step markers, and no repeating sequence among the {} eager ops: {}{beside}",
                self.eager_ops,
                if self.graphs {
                    "they are in no cell"
                } else {
                    "they are one step, with no period"
                }
            )),
            StepSource::NoRepetition => {}
        }
        if let Some(h) = &self.step_range_hint {
            let which = if h.names > 1 {
                format!(
                    "the host ranges ending in `|{}` ({} names) repeat",
                    h.name, h.names
                )
            } else {
                format!("the host range `{}` repeats", h.name)
            };
            lines.push(format!(
                "Step range: {which} around device work ({} ranges): pass `{}` to make each one a step",
                h.ranges,
                h.flag()
            ));
        }
        lines
    }
}
