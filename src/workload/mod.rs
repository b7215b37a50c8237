//! The instrumented HT-decode runner.
pub mod collective;
pub mod emulated;
pub mod htdecode;
pub mod nccl;
pub mod ranks;
pub mod reference;
pub mod spin;
mod sweep;
pub use sweep::{SweepArgs, SweepError, gpu_available, run_sweep};
