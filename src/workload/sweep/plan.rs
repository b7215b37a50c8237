//! What `gapscope run` is asked ([`SweepOptions`], validated), and the cells it plans from that
//! ([`CellPlan`]: T × mode × eager / each launch), with the labels and requested values each
//! cell writes into the trace.
#![forbid(unsafe_code)]

use crate::record::cupti::{ApiCallbacks, CuptiError};
use crate::trace::TraceError;
use crate::workload::capture::Launch;
use crate::workload::collective::{Backend, GraphUsageMode, WorkloadError};
use crate::workload::htdecode::HtDecodeError;
use crate::workload::nccl::RankInfo;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// nccl_ep-style HT decode: routing map, routing all-gather, preprocessing, dispatch, combine.
    HtDecode,
    /// examples/probe/emu.cu's step: spin 5 µs → collective stand-in → spin 10 µs → spin 5 µs.
    Emu,
}

/// What `gapscope run` sweeps (the command line's `SweepOptions` in `cli/`, converted; the
/// help text there says what each field does).
#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub workload: Workload,
    /// Tokens per step (T).
    pub tokens: Vec<usize>,
    /// Graph usage modes (0, 1, 2).
    pub modes: Vec<u8>,
    pub launch: Vec<Launch>,
    /// Timed steps per cell.
    pub steps: usize,
    /// Untimed eager steps before timing.
    pub warmup: usize,
    pub backend: Backend,
    /// Simulated ranks of the emulated all-gather.
    pub ranks: usize,
    /// CUDA device ordinal.
    pub device: usize,
    pub cupti_buffer_kib: usize,
    /// Most CUPTI activity buffers at once (0: no limit).
    pub cupti_max_buffers: usize,
    pub cupti_api_callbacks: ApiCallbacks,
    /// Record CUPTI KIND_CUDA_EVENT.
    pub cupti_event_records: bool,
    /// Run every cell again untraced and report the traced/untraced period ratio.
    pub overhead: bool,
    /// NCCL ranks started by gapscope (None: every GPU when there are two or more).
    pub gpus: Option<usize>,
    /// Seconds a set of rank processes may run before it is stopped.
    pub rank_timeout: u64,
    /// This process is one rank started by `gapscope run`.
    pub rank_process: bool,
}

/// Largest T (tokens per step) the sweep accepts: decode steps are small; beyond this the
/// buffers grow past what the experiment is about.
pub const MAX_TOKENS: usize = 8192;
/// Most simulated ranks of the emulated all-gather.
pub const MAX_SIMULATED_RANKS: usize = 1024;
/// CUDA device ordinals are small.
pub const MAX_DEVICE: usize = 63;

impl SweepOptions {
    /// Refuses bad values before any work starts (GPU or not), one line each.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(&t) = self.tokens.iter().find(|&&t| t == 0 || t > MAX_TOKENS) {
            return Err(format!("--tokens {t}: T must be 1…{MAX_TOKENS}"));
        }
        if let Some(&m) = self.modes.iter().find(|&&m| m > 2) {
            return Err(format!("--modes {m}: graph usage modes are 0, 1 and 2"));
        }
        if self.tokens.is_empty() || self.modes.is_empty() || self.launch.is_empty() {
            return Err("--tokens, --modes and --launch need at least one value each".into());
        }
        if self.steps < 2 {
            return Err(format!(
                "--steps {}: at least 2 steps are needed for a period",
                self.steps
            ));
        }
        if self.ranks == 0 || self.ranks > MAX_SIMULATED_RANKS {
            return Err(format!(
                "--ranks {}: the emulated all-gather takes 1…{MAX_SIMULATED_RANKS} simulated ranks",
                self.ranks
            ));
        }
        if self.device > MAX_DEVICE {
            return Err(format!(
                "--device {}: CUDA device ordinals are 0…{MAX_DEVICE}",
                self.device
            ));
        }
        if self.gpus == Some(0) {
            return Err("--gpus 0: at least one rank is needed".into());
        }
        if self.cupti_buffer_kib == 0 {
            return Err("--cupti-buffer-kib 0: the buffer needs at least 1 KiB".into());
        }
        if self.rank_timeout == 0 {
            return Err("--rank-timeout 0: give the ranks at least a second".into());
        }
        Ok(())
    }

    /// The command line that makes a rank process run this sweep for `modes` into `output`.
    pub fn rank_command_line(&self, modes: &[u8], output: &Path) -> Vec<String> {
        fn value(v: &impl clap::ValueEnum) -> String {
            v.to_possible_value()
                .map(|p| p.get_name().to_owned())
                .unwrap_or_default()
        }
        let list = |v: Vec<String>| v.join(",");
        let mut a = vec![
            "run".to_owned(),
            "--rank-process".to_owned(),
            "-o".to_owned(),
            output.display().to_string(),
            "--workload".to_owned(),
            value(&self.workload),
            "--tokens".to_owned(),
            list(self.tokens.iter().map(usize::to_string).collect()),
            "--modes".to_owned(),
            list(modes.iter().map(u8::to_string).collect()),
            "--launch".to_owned(),
            list(self.launch.iter().map(value).collect()),
            "--steps".to_owned(),
            self.steps.to_string(),
            "--warmup".to_owned(),
            self.warmup.to_string(),
            "--backend".to_owned(),
            "nccl".to_owned(),
            "--cupti-buffer-kib".to_owned(),
            self.cupti_buffer_kib.to_string(),
            "--cupti-max-buffers".to_owned(),
            self.cupti_max_buffers.to_string(),
            "--cupti-api-callbacks".to_owned(),
            value(&self.cupti_api_callbacks),
        ];
        if self.cupti_event_records {
            a.push("--cupti-event-records".to_owned());
        }
        if self.overhead {
            a.push("--overhead".to_owned());
        }
        a
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
