//! The trace budget: which graph launches and steps pay for kernel tracing.
//!
//! CUPTI's kernel tracing costs host time on every launch, and the analysis needs a sample of
//! each cell's steps from across the run, not every one of a serving loop's thousands, nor only
//! the first ones (a long eager warm-up would use them all up). So each executable graph's
//! launches, and each kind of step, are sampled on their own schedule ([`sampled`]): the first
//! `limit` occurrences, then one window of `limit / 4` consecutive occurrences each time the
//! count doubles, so a run of any length keeps a logarithmic number of steps, spread over all
//! of it. A kind of step is the step range's
//! name with what the previous step of that name did (ran eagerly, replayed graph X, or built a
//! graph): an eager phase followed by a graphed one gets a sample of each.
//!
//! Untraced launches and steps run with the API activity kinds, the API calls the record filter
//! keeps, and the eager-hot graph-building callbacks disabled ([`Level`]); the first window of
//! them after each pause is *measured* (the device kinds stay on, so the analysis has their
//! periods on the device's clock), the rest run with the device kinds off too. Tracing resumes
//! as soon as something sampled starts or a graph is captured, created or instantiated, and it
//! never pauses while a stream capture is under way, so every captured node is seen with its
//! creating call and external flags. The callbacks of calls that only build graphs
//! (`cudaGraphAdd*Node`, instantiation) never pause. The decisions are made here, in safe code;
//! `callbacks` calls CUPTI when they change.
#![forbid(unsafe_code)]

mod decisions;
pub(crate) mod markers;
mod running;
mod schedule;
pub(crate) mod step_choice;
mod switch;

pub(crate) use decisions::{BudgetState, StepContent};
pub(crate) use running::Budget;
pub(crate) use schedule::{
    PACE_TICK, PACED_FIRST_NS, PACED_IDLE_NS, PACED_WINDOW_NS, measured_of, paced_level, sampled,
    window_of,
};
pub(crate) use switch::{Level, SwitchOp, kind_on_at, switch_plan};

/// How much of a program `gapscope record` traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceBudget {
    /// Launches traced first per executable graph, and steps per kind of step, before the
    /// sample thins out (`sampled`); 0: no limit.
    pub limit: u32,
}

/// A budget's value that [`TraceBudget::parse_limit`] refuses (the text as given): typed for
/// its callers, the command line's value parser and the recorder's setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not {expected}", expected = TraceBudget::EXPECTED)]
pub struct NotALimit {
    pub text: String,
}

impl TraceBudget {
    /// The trace budget when none is given: enough steps per cell for a median and its spread,
    /// and few enough that at the length of a short benchmark (a few hundred steps) most steps
    /// run untraced, so that tracing's host cost does not become the program's typical step.
    pub const DEFAULT_LIMIT: u32 = 16;

    /// What a budget's value is, as [`NotALimit`] and a refused `GAPSCOPE_TRACE_BUDGET` say.
    pub const EXPECTED: &str = "a whole number of launches and steps (0: trace everything)";

    /// The one reader of a budget's value (`--trace-budget N`, `GAPSCOPE_TRACE_BUDGET`): a
    /// whole number, 0 for no limit.
    pub fn parse_limit(text: &str) -> Result<u32, NotALimit> {
        text.trim().parse::<u32>().map_err(|_| NotALimit {
            text: text.to_owned(),
        })
    }

    /// No limit: everything is traced (the recorder's default; `gapscope run` wants every step).
    pub const UNLIMITED: TraceBudget = TraceBudget { limit: 0 };

    /// Whether any launch or step can go untraced.
    pub fn is_limited(&self) -> bool {
        self.limit > 0
    }
}

impl Default for TraceBudget {
    fn default() -> Self {
        TraceBudget::UNLIMITED
    }
}
