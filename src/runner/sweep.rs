//! `gapscope run`: the HT-decode experiment swept over regimes, graph usage modes, T and launch
//! patterns, recorded under CUPTI.

use super::collective::RunnerError;
use crate::trace::Trace;
use std::path::{Path, PathBuf};

/// What `gapscope run` sweeps.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// Tokens per step (T), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,256,512"
    )]
    pub tokens: Vec<usize>,
    /// Graph usage modes, comma-separated (0, 1, 2).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub modes: Vec<u8>,
    /// Timed steps per cell (after warm-up).
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
}

/// True when a CUDA driver and at least one device are present (never panics).
pub fn gpu_available() -> bool {
    crate::cupti::ensure_cuda_driver().is_ok()
        && super::htdecode::cuda_available().is_ok_and(|n| n > 0)
}

/// Runs the sweep; returns the trace files written under `output` with their contents.
pub fn run_sweep(_args: &SweepArgs, _output: &Path) -> Result<Vec<(PathBuf, Trace)>, RunnerError> {
    Err(RunnerError::Config(
        "the live sweep is not built yet".into(),
    ))
}
