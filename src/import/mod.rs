//! Importers of other profilers' traces into gapscope's [`crate::trace::Trace`].
//!
//! * [`kineto`]: torch.profiler (Kineto) Chrome-trace JSON, streamed event by event in memory
//!   bounded by the imported records, not by the size of the JSON.

pub mod kineto;

pub use kineto::{
    ImportError, assign_step_cells, import_kineto, is_kineto_file, looks_like_kineto, read_kineto,
};
