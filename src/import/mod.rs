//! Importers of other profilers' traces into gapscope's [`crate::trace::Trace`].
//!
//! * [`kineto`]: torch.profiler (Kineto) Chrome-trace JSON, read in blocks and parsed on several
//!   threads, in memory bounded by the imported records, not by the size of the JSON; the trace
//!   is the same whatever the block size and thread count.

pub mod kineto;

pub use kineto::{
    ImportError, assign_step_cells, import_kineto, is_kineto_file, looks_like_kineto, read_kineto,
};
