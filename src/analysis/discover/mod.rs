//! Steps found in the kernel stream itself, for programs that mark none: a model library's
//! `generate()`, a serving engine's loop, a benchmark script. A decode step launches the same
//! sequence of device ops again and again, so the eager ops (graph replays make graph cells of
//! their own) are read as a sequence of identities — name, kind, stream; the trace holds no
//! grid or block — in launch order, and its repeating units are looked for.
//!
//! `loops` finds the loops of a sequence of op identities; `cells` reads a trace's eager ops
//! as that sequence and makes the loops found cells of steps; `range_hint` names a repeated
//! host range that could mark the steps instead (and chooses it on import); `step_finding` is
//! what the reports say about how the steps were found.
#![forbid(unsafe_code)]

mod cells;
mod loops;
mod range_hint;
mod step_finding;

pub use cells::FoundSteps;
pub(crate) use cells::{Discovered, discover};
pub use loops::{LoopSpan, MIN_STEPS, find_loops};
pub use range_hint::{MIN_HINT_RANGES, RangeHint, choose_step_range, step_range_hint};
pub use step_finding::{StepFinding, StepSource};
