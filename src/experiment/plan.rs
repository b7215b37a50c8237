//! What `gapscope run` is asked ([`SweepOptions`], validated), and the cells it plans from that
//! ([`CellPlan`]: T × mode × eager / each launch), with the labels and requested values each
//! cell writes into the trace.
#![forbid(unsafe_code)]

use crate::record::cupti::{ApiCallbacks, CuptiError};
use crate::trace::TraceError;
use crate::workload::capture::Launch;
use crate::workload::collective::nccl::RankInfo;
use crate::workload::collective::{Backend, GraphUsageMode, WorkloadError};
use crate::workload::htdecode::HtDecodeError;
use std::collections::BTreeMap;
use std::path::Path;

/// Errors of a sweep; each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Runner(#[from] WorkloadError),
    #[error("CUPTI: {0}")]
    Recorder(#[from] CuptiError),
    #[error("HT decode: {0}")]
    HtDecode(#[from] HtDecodeError),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// Which step the sweep runs (`run --workload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Workload {
    /// nccl_ep-style HT decode.
    HtDecode,
    /// examples/probe/emu.cu's step.
    Emu,
}

/// What `gapscope run` sweeps: what its command-line flags ask (the binary's `run` arguments
/// convert into this, where each flag, its default and its help are defined) and what a rank
/// process it starts is handed ([`SweepOptions::rank_command_line`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SweepOptions {
    pub workload: Workload,
    /// Tokens per step (T).
    pub tokens: Vec<usize>,
    /// Graph usage modes (0, 1, 2).
    pub modes: Vec<u8>,
    /// Graph launch patterns.
    pub launch: Vec<Launch>,
    /// Timed steps per cell.
    pub steps: usize,
    /// Untimed eager steps before timing.
    pub warmup: usize,
    /// Which all-gather runs.
    pub backend: Backend,
    /// Simulated ranks of the emulated all-gather.
    pub ranks: usize,
    /// CUDA device ordinal.
    pub device: usize,
    /// CUPTI activity buffer size in KiB.
    pub cupti_buffer_kib: usize,
    /// Most CUPTI activity buffers at once (0: no limit).
    pub cupti_max_buffers: usize,
    /// API calls that get a CUPTI callback.
    pub cupti_api_callbacks: ApiCallbacks,
    /// Record every executed event record with its device timestamp.
    pub cupti_event_records: bool,
    /// After recording, run every cell again untraced and report the period ratio.
    pub overhead: bool,
    /// NCCL ranks started by gapscope, one process and one GPU each (`None`: every GPU when
    /// there are two or more).
    pub gpus: Option<usize>,
    /// Seconds a set of rank processes may run before it is stopped.
    pub rank_timeout: u64,
    /// This process is one rank started by `gapscope run`: record and write the trace only
    /// (set from `run --rank-sweep`, never a flag of its own).
    #[serde(default)]
    pub rank_process: bool,
}

/// The hidden `run` flag that hands a rank process its sweep, serialised.
pub const RANK_SWEEP_FLAG: &str = "--rank-sweep";

/// Largest T (tokens per step) the sweep accepts: decode steps are small; beyond this the
/// buffers grow past what the experiment is about.
pub const MAX_TOKENS: usize = 8192;
/// Most simulated ranks of the emulated all-gather.
pub const MAX_SIMULATED_RANKS: usize = 1024;
/// CUDA device ordinals are small.
pub const MAX_DEVICE: usize = 63;

/// A value of [`SweepOptions`] refused by [`SweepOptions::validate`]: typed for its callers;
/// each displays as the one line the user sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSweep {
    #[error("--tokens {0}: T must be 1…{MAX_TOKENS}")]
    Tokens(usize),
    #[error("--modes {0}: graph usage modes are 0, 1 and 2")]
    Mode(u8),
    #[error("--tokens, --modes and --launch need at least one value each")]
    NoValues,
    #[error("--steps {0}: at least 2 steps are needed for a period")]
    Steps(usize),
    #[error("--ranks {0}: the emulated all-gather takes 1…{MAX_SIMULATED_RANKS} simulated ranks")]
    Ranks(usize),
    #[error("--device {0}: CUDA device ordinals are 0…{MAX_DEVICE}")]
    Device(usize),
    #[error("--gpus 0: at least one rank is needed")]
    NoGpus,
    #[error("--cupti-buffer-kib 0: the buffer needs at least 1 KiB")]
    NoBuffer,
    #[error("--rank-timeout 0: give the ranks at least a second")]
    NoRankTimeout,
}

/// The `--rank-sweep` value is not what [`SweepOptions::rank_command_line`] writes.
#[derive(Debug, thiserror::Error)]
#[error("{RANK_SWEEP_FLAG}: not the sweep of a gapscope run parent: {0}")]
pub struct RankSweepError(#[source] serde_json::Error);

impl SweepOptions {
    /// Refuses bad values before any work starts (GPU or not), one line each.
    pub fn validate(&self) -> Result<(), InvalidSweep> {
        if let Some(&t) = self.tokens.iter().find(|&&t| t == 0 || t > MAX_TOKENS) {
            return Err(InvalidSweep::Tokens(t));
        }
        if let Some(&m) = self.modes.iter().find(|&&m| m > 2) {
            return Err(InvalidSweep::Mode(m));
        }
        if self.tokens.is_empty() || self.modes.is_empty() || self.launch.is_empty() {
            return Err(InvalidSweep::NoValues);
        }
        if self.steps < 2 {
            return Err(InvalidSweep::Steps(self.steps));
        }
        if self.ranks == 0 || self.ranks > MAX_SIMULATED_RANKS {
            return Err(InvalidSweep::Ranks(self.ranks));
        }
        if self.device > MAX_DEVICE {
            return Err(InvalidSweep::Device(self.device));
        }
        if self.gpus == Some(0) {
            return Err(InvalidSweep::NoGpus);
        }
        if self.cupti_buffer_kib == 0 {
            return Err(InvalidSweep::NoBuffer);
        }
        if self.rank_timeout == 0 {
            return Err(InvalidSweep::NoRankTimeout);
        }
        Ok(())
    }

    /// The command line that makes a rank process run this sweep for `modes` into `output`:
    /// the options themselves, serialised (`run --rank-sweep`), so no flag is written twice.
    pub fn rank_command_line(&self, modes: &[u8], output: &Path) -> Vec<String> {
        let rank = SweepOptions {
            modes: modes.to_vec(),
            backend: Backend::Nccl,
            gpus: None,
            rank_process: true,
            ..self.clone()
        };
        vec![
            "run".to_owned(),
            "-o".to_owned(),
            output.display().to_string(),
            RANK_SWEEP_FLAG.to_owned(),
            serde_json::to_string(&rank).expect("sweep options serialise"),
        ]
    }

    /// The options a rank process was handed by [`SweepOptions::rank_command_line`].
    pub fn from_rank_sweep(json: &str) -> Result<SweepOptions, RankSweepError> {
        let mut options: SweepOptions = serde_json::from_str(json).map_err(RankSweepError)?;
        options.rank_process = true;
        Ok(options)
    }
}

/// A cell to run: what is asked, and where its results go.
#[derive(Debug, Clone)]
pub(super) struct CellPlan {
    pub tokens: usize,
    pub mode: GraphUsageMode,
    pub graphed: Option<Launch>,
}

impl CellPlan {
    pub fn requested(&self, backend: &str, ranks: usize) -> BTreeMap<String, serde_json::Value> {
        let mut r = BTreeMap::new();
        let regime = if self.graphed.is_some() {
            "graphed"
        } else {
            "eager"
        };
        r.insert("regime".into(), regime.into());
        r.insert(
            crate::trace::GRAPH_USAGE_MODE_KEY.into(),
            self.mode.as_u8().into(),
        );
        r.insert("tokens".into(), self.tokens.into());
        r.insert("backend".into(), backend.into());
        r.insert("ranks".into(), ranks.into());
        if let Some(l) = self.graphed {
            r.insert("launch".into(), l.label().into());
        }
        r
    }

    pub fn label(&self) -> String {
        match self.graphed {
            None => format!("eager mode={} T={}", self.mode.as_u8(), self.tokens),
            Some(l) => format!(
                "graphed mode={} T={} {}",
                self.mode.as_u8(),
                self.tokens,
                l.label()
            ),
        }
    }
}

pub(super) fn plans(args: &SweepOptions) -> Result<Vec<CellPlan>, SweepError> {
    let mut out = Vec::new();
    for &t in &args.tokens {
        for &m in &args.modes {
            let mode = GraphUsageMode::from_u8(m).ok_or_else(|| {
                WorkloadError::Config(format!("graph usage mode {m}: use 0, 1 or 2"))
            })?;
            out.push(CellPlan {
                tokens: t,
                mode,
                graphed: None,
            });
            for &l in &args.launch {
                out.push(CellPlan {
                    tokens: t,
                    mode,
                    graphed: Some(l),
                });
            }
        }
    }
    Ok(out)
}

/// Whether the sweep uses real NCCL: `--backend`, or with `auto` two or more GPUs or a
/// launcher's world of two or more.
pub(super) fn uses_nccl(args: &SweepOptions, devices: usize, rank: &RankInfo) -> bool {
    match args.backend {
        Backend::Nccl => true,
        Backend::Emulated => false,
        Backend::Auto => devices >= 2 || rank.world >= 2,
    }
}
