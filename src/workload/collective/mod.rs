//! The routing all-gather of the HT decode step, behind one trait ([`RoutingAllGather`]) with
//! two backends: [`emulated`] (one GPU, NCCL's capture topology rebuilt exactly around a local
//! copy kernel) and [`nccl`] (a real `ncclAllGather`).
//!
//! Also: the workload's error type, the graph usage mode, the backend kind, and the
//! library-call hook through which a recorder tags the graph nodes a collective creates.
// Only `nccl::ffi` may hold `unsafe`: it allows it itself; every other file forbids it.
#![deny(unsafe_code)]

pub mod emulated;
pub mod nccl;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaSlice, CudaStream};
use std::any::Any;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Errors of the workload layer. Display is one line.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// No usable CUDA driver, NVRTC or GPU: the one line to print before exiting.
    #[error("no GPU available: {0}")]
    Unavailable(String),
    /// A CUDA driver call failed.
    #[error("CUDA call {call} failed: {detail}")]
    Cuda { call: &'static str, detail: String },
    /// NVRTC could not compile a kernel source.
    #[error("NVRTC compile of {source_name} failed: {detail}")]
    Nvrtc {
        source_name: &'static str,
        detail: String,
    },
    /// The NCCL library could not be found or lacks a symbol.
    #[error("NCCL not available: {0}")]
    NcclUnavailable(NcclLoadError),
    /// An NCCL call returned an error.
    #[error("NCCL call {call} failed: {code} ({detail})")]
    Nccl {
        call: &'static str,
        code: i32,
        detail: String,
    },
    /// Bad sizes, arguments or environment.
    #[error("invalid workload configuration: {0}")]
    Config(String),
    /// File I/O (e.g. the NCCL unique-id file).
    #[error("I/O error on {path}: {detail}")]
    Io { path: String, detail: String },
}

/// Why NCCL could not be loaded (kept for every later caller, hence `Clone`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum NcclLoadError {
    /// No candidate opened: where it was looked for, and each loader error.
    #[error(
        "searched {searched} ({}); install it into the Python environment (pip install nvidia-nccl-cu13) or set NCCL_LIB to the full path of libnccl.so.2",
        .failures.join("; ")
    )]
    NotFound {
        searched: String,
        failures: Vec<String>,
    },
    #[error("{name}: {reason}")]
    MissingSymbol { name: &'static str, reason: String },
    #[error("ncclGetVersion returned {0}")]
    Version(i32),
}

impl WorkloadError {
    pub(crate) fn cuda(call: &'static str, err: impl fmt::Debug) -> WorkloadError {
        // cudarc's DriverError Debug reads "DriverError(CUDA_ERROR_X, \"description\")".
        WorkloadError::Cuda {
            call,
            detail: format!("{err:?}").replace('\n', " "),
        }
    }
}

/// Checks a raw driver result.
pub(crate) fn ck(res: CUresult, call: &'static str) -> Result<(), WorkloadError> {
    res.result().map_err(|e| WorkloadError::cuda(call, e))
}

/// NCCL's graph usage mode (`ncclConfig_t::graphUsageMode`, NCCL ≥ 2.29).
///
/// 0: graphs never mixed with uncaptured work; 1: one graph at a time, never concurrent with
/// uncaptured work; 2 (NCCL's default): "mixing" — every captured collective is wrapped in an
/// external event wait and an explicit event-record node on the communicator's serial event.
/// In NCCL 2.30.7 modes 0 and 1 build the same topology (no external nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GraphUsageMode {
    Zero,
    One,
    #[default]
    Two,
}

impl GraphUsageMode {
    pub fn from_u8(v: u8) -> Option<GraphUsageMode> {
        match v {
            0 => Some(GraphUsageMode::Zero),
            1 => Some(GraphUsageMode::One),
            2 => Some(GraphUsageMode::Two),
            _ => None,
        }
    }

    pub fn as_u8(self) -> u8 {
        match self {
            GraphUsageMode::Zero => 0,
            GraphUsageMode::One => 1,
            GraphUsageMode::Two => 2,
        }
    }

    /// Mode 2 ("mixing") is the only mode that adds the external wait / record nodes.
    pub fn is_mixing(self) -> bool {
        self == GraphUsageMode::Two
    }

    /// Value of `NCCL_GRAPH_MIXING_SUPPORT` that selects this mode on NCCL < 2.29.
    pub fn mixing_env_value(self) -> &'static str {
        if self.is_mixing() { "1" } else { "0" }
    }
}

impl TryFrom<u8> for GraphUsageMode {
    type Error = WorkloadError;
    fn try_from(v: u8) -> Result<Self, WorkloadError> {
        GraphUsageMode::from_u8(v).ok_or_else(|| {
            WorkloadError::Config(format!("graph usage mode must be 0, 1 or 2, not {v}"))
        })
    }
}

impl FromStr for GraphUsageMode {
    type Err = WorkloadError;
    /// Accepts "0", "1", "2", optionally prefixed by "mode" / "mode-" / "mode=".
    fn from_str(s: &str) -> Result<Self, WorkloadError> {
        let t = s.trim().to_ascii_lowercase();
        let t = t
            .strip_prefix("mode")
            .map(|r| r.trim_start_matches(['-', '=', '_', ' ']))
            .unwrap_or(&t);
        t.parse::<u8>()
            .ok()
            .and_then(GraphUsageMode::from_u8)
            .ok_or_else(|| {
                WorkloadError::Config(format!("graph usage mode must be 0, 1 or 2, not {s:?}"))
            })
    }
}

/// Displays the bare number ("2"), so `format!("mode-{m}")` reads "mode-2".
impl fmt::Display for GraphUsageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_u8())
    }
}

/// Which all-gather implementation runs (`--backend`). `Auto` is only ever a request: the
/// sweep resolves it to one of the others, and a running collective reports that one.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Backend {
    /// nccl with ≥ 2 GPUs (or under a launcher), emulated with one.
    #[default]
    Auto,
    Emulated,
    Nccl,
}

/// clap's parser for `--backend`: the enum's own, except that `emu` gets one line pointing to
/// `--backend emulated` (clap would list the possible values over several lines).
#[derive(Debug, Clone, Copy, Default)]
pub struct BackendArg;

impl clap::builder::TypedValueParser for BackendArg {
    type Value = Backend;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Backend, clap::Error> {
        if value
            .to_str()
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
            == Some("emu")
        {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("--backend emu: {EMU_IS_A_WORKLOAD}\n"),
            ));
        }
        clap::builder::EnumValueParser::<Backend>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            <Backend as clap::ValueEnum>::value_variants()
                .iter()
                .filter_map(clap::ValueEnum::to_possible_value),
        ))
    }
}

/// Why "emu" is refused: it names a workload (`--workload emu`), not a backend.
pub const EMU_IS_A_WORKLOAD: &str =
    "\"emu\" is a workload, not a backend: the emulated backend is spelled --backend emulated";

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Emulated => "emulated",
            Backend::Nccl => "nccl",
        })
    }
}

/// What a [`LibraryCallHook`] returns: any value, dropped when the library call ends.
pub type LibraryCallGuard = Box<dyn Any>;

/// Opens a library call named by its argument (e.g. `"ncclAllGather"`) and returns a guard
/// that closes it on drop. A backend holding a hook calls it around exactly the work a
/// real library call does, so a recorder can tag every graph node created inside it.
///
/// To plug in the CUPTI recorder (with a `'static` guard type, e.g. one holding an
/// `Arc<Recorder>` or only ids and a start time):
/// ```ignore
/// let rec = recorder.clone(); // Arc<Recorder>
/// backend.set_library_call_hook(Some(Box::new(move |name: &str| -> LibraryCallGuard {
///     Box::new(rec.library_call(name))
/// })));
/// ```
/// If the recorder's guard borrows the recorder (not `'static`), leave the hook unset and open
/// the library call around the call yourself, with [`RoutingAllGather::library_call_name`]:
/// `let _g = rec.library_call(ag.library_call_name()); ag.all_gather(...)?;`
pub type LibraryCallHook = Box<dyn Fn(&str) -> LibraryCallGuard + Send>;

/// The routing all-gather of one HT decode step.
pub trait RoutingAllGather {
    /// Enqueue the all-gather of `send` (bytes per rank) into `recv` (ranks*bytes) on `stream`.
    /// Works both eagerly and while `stream` is being captured; when capturing it must build
    /// exactly the topology the backend builds (emulated: as NCCL 2.30.7 builds it for the
    /// chosen mode).
    fn all_gather(
        &mut self,
        stream: &Arc<CudaStream>,
        send: &CudaSlice<u8>,
        recv: &mut CudaSlice<u8>,
        capturing: bool,
    ) -> Result<(), WorkloadError>;

    /// Call once per captured step, after the step's last kernel and before
    /// `cuStreamEndCapture` on `origin`: joins any side stream the backend forked into the
    /// capture back into `origin` (the capture cannot end with unjoined work). No-op for
    /// backends that join inside the call, and when no captured all-gather is pending.
    fn end_of_capture_join(&mut self, _origin: &Arc<CudaStream>) -> Result<(), WorkloadError> {
        Ok(())
    }

    /// Device address of two u64 where the backend's own copy kernel writes its %globaltimer
    /// start and end at later calls (`None`: nowhere visible). Default: ignored (a library's
    /// kernel cannot stamp).
    fn set_kernel_stamp(&mut self, _addr: Option<u64>) {}

    /// One line, e.g. "emulated (8 simulated ranks, mode-2 topology)".
    fn describe(&self) -> String;

    /// Name of the library call this backend opens (e.g. "ncclAllGather").
    fn library_call_name(&self) -> &'static str;

    /// Install (or remove) the hook that opens the library call; see [`LibraryCallHook`].
    fn set_library_call_hook(&mut self, hook: Option<LibraryCallHook>);

    /// Number of ranks in the gathered result.
    fn ranks(&self) -> usize;

    /// The graph usage mode this backend was asked for.
    fn mode(&self) -> GraphUsageMode;

    /// `Emulated` or `Nccl`.
    fn backend(&self) -> Backend;
}

/// Opens the library call through an optional hook.
pub(crate) fn open_library_call(
    hook: &Option<LibraryCallHook>,
    name: &str,
) -> Option<LibraryCallGuard> {
    hook.as_ref().map(|h| h(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_parsing() {
        assert_eq!(GraphUsageMode::from_u8(0), Some(GraphUsageMode::Zero));
        assert_eq!(GraphUsageMode::from_u8(1), Some(GraphUsageMode::One));
        assert_eq!(GraphUsageMode::from_u8(2), Some(GraphUsageMode::Two));
        assert_eq!(GraphUsageMode::from_u8(3), None);
        assert!(GraphUsageMode::try_from(7u8).is_err());
        for (s, m) in [
            ("2", GraphUsageMode::Two),
            (" 1 ", GraphUsageMode::One),
            ("mode-0", GraphUsageMode::Zero),
            ("mode=2", GraphUsageMode::Two),
            ("Mode 1", GraphUsageMode::One),
            ("mode2", GraphUsageMode::Two),
        ] {
            assert_eq!(s.parse::<GraphUsageMode>().unwrap(), m, "{s}");
        }
        for s in ["", "3", "two", "-1", "mode-"] {
            assert!(s.parse::<GraphUsageMode>().is_err(), "{s}");
        }
        assert_eq!(GraphUsageMode::default(), GraphUsageMode::Two);
    }

    #[test]
    fn mode_display_roundtrip_and_env() {
        for m in [
            GraphUsageMode::Zero,
            GraphUsageMode::One,
            GraphUsageMode::Two,
        ] {
            assert_eq!(m.to_string().parse::<GraphUsageMode>().unwrap(), m);
            assert_eq!(GraphUsageMode::from_u8(m.as_u8()), Some(m));
        }
        assert_eq!(format!("mode-{}", GraphUsageMode::Two), "mode-2");
        assert_eq!(GraphUsageMode::Two.mixing_env_value(), "1");
        assert_eq!(GraphUsageMode::One.mixing_env_value(), "0");
        assert_eq!(GraphUsageMode::Zero.mixing_env_value(), "0");
        assert!(GraphUsageMode::Two.is_mixing());
        assert!(!GraphUsageMode::One.is_mixing());
    }

    #[test]
    fn backend_parsing() {
        let parse = |value: &str| {
            clap::Command::new("run")
                .arg(
                    clap::Arg::new("backend")
                        .long("backend")
                        .value_parser(BackendArg),
                )
                .try_get_matches_from(["run", "--backend", value])
                .map(|m| *m.get_one::<Backend>("backend").expect("parsed"))
        };
        assert_eq!(parse("nccl").unwrap(), Backend::Nccl);
        assert_eq!(parse("emulated").unwrap(), Backend::Emulated);
        assert_eq!(parse("auto").unwrap(), Backend::Auto);
        assert!(parse("mpi").is_err());
        let emu = parse("emu").unwrap_err().to_string();
        assert!(
            emu.contains("--backend emulated") && emu.trim_end().lines().count() == 1,
            "{emu}"
        );
        assert_eq!(Backend::Nccl.to_string(), "nccl");
        assert_eq!(Backend::Emulated.to_string(), "emulated");
    }

    #[test]
    fn errors_are_one_line() {
        let errs = [
            WorkloadError::Unavailable("x".into()),
            WorkloadError::cuda("cuLaunchKernel", "DriverError(CUDA_ERROR_X,\n \"y\")"),
            WorkloadError::Config("bad".into()),
            WorkloadError::Nccl {
                call: "ncclAllGather",
                code: 5,
                detail: "invalid usage".into(),
            },
        ];
        for e in errs {
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    #[test]
    fn library_call_guard_dropped_at_end() {
        use std::sync::Mutex;
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        struct G(Arc<Mutex<Vec<String>>>, String);
        impl Drop for G {
            fn drop(&mut self) {
                self.0.lock().unwrap().push(format!("close {}", self.1));
            }
        }
        let l2 = log.clone();
        let hook: Option<LibraryCallHook> = Some(Box::new(move |name: &str| -> LibraryCallGuard {
            l2.lock().unwrap().push(format!("open {name}"));
            Box::new(G(l2.clone(), name.to_string()))
        }));
        {
            let _g = open_library_call(&hook, "ncclAllGather");
            log.lock().unwrap().push("work".into());
        }
        assert_eq!(
            *log.lock().unwrap(),
            ["open ncclAllGather", "work", "close ncclAllGather"]
        );
        assert!(open_library_call(&None, "x").is_none());
    }
}
