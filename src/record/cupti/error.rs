//! The CUPTI layer's error type. Every variant displays as one line that says what failed and
//! what the user can do about it.
#![forbid(unsafe_code)]

/// Errors from loading CUPTI / the CUDA driver and from CUPTI calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CuptiError {
    /// `$CUPTI_LIB` is set but the file cannot be loaded.
    #[error(
        "CUPTI_LIB={path} cannot be loaded ({reason}); set CUPTI_LIB to the full path of a CUPTI 12.x or 13.x libcupti.so, or unset it to search the default places"
    )]
    CuptiLibInvalid { path: String, reason: String },

    /// No libcupti anywhere we looked.
    #[error(
        "libcupti not found: looked for {looked_for} in {searched} ({last_error}); install it into the program's Python environment (pip install nvidia-cuda-cupti) or set CUPTI_LIB to the full path of libcupti.so"
    )]
    CuptiNotFound {
        looked_for: String,
        searched: String,
        last_error: String,
    },

    /// The loaded libcupti lacks a function we need.
    #[error(
        "{path} has no symbol {symbol} (CUPTI too old?); set CUPTI_LIB to a CUPTI 12.x or 13.x libcupti.so"
    )]
    MissingSymbol { path: String, symbol: String },

    /// The loaded libcupti is older than any version this recorder reads records of.
    #[error(
        "{path} (found through {origin}) reports CUPTI API version {found}; gapscope needs {needed} or newer (CUDA 12.0+); set CUPTI_LIB to a newer libcupti.so (searched: {searched})"
    )]
    UnsupportedVersion {
        path: String,
        origin: String,
        found: u32,
        needed: u32,
        searched: String,
    },

    /// The loaded libcupti belongs to a newer CUDA than the driver supports.
    #[error(
        "{path} (found through {origin}) is CUPTI for CUDA {cupti_cuda}, but the driver supports CUDA {driver_cuda}: install a CUPTI for CUDA {driver_major} or update the driver, or set CUPTI_LIB to another libcupti.so (searched: {searched})"
    )]
    DriverTooOld {
        path: String,
        origin: String,
        cupti_cuda: u32,
        driver_cuda: String,
        driver_major: u32,
        searched: String,
    },

    /// libcuda.so.1 cannot be loaded (no NVIDIA driver) or lacks a function we need.
    #[error(
        "cannot load the CUDA driver library libcuda.so.1 ({reason}); is an NVIDIA driver installed? LD_LIBRARY_PATH can name the folder holding libcuda.so.1"
    )]
    CudaDriverNotFound { reason: String },

    /// Another CUPTI subscriber (a profiler) is active in this process.
    #[error(
        "another profiler already holds CUPTI in this process{}: CUPTI allows one subscriber per process, so gapscope cannot record under Nsight Systems, Nsight Compute, cuda-gdb, compute-sanitizer, torch.profiler/Kineto or a second gapscope recorder; run without the other tool",
        holder.as_deref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    MultipleSubscribers { holder: Option<String> },

    /// A gapscope [`crate::record::cupti::Recorder`] is already recording in this process.
    #[error(
        "a gapscope recorder is already active in this process (CUPTI allows one subscriber); finish it before starting another"
    )]
    AlreadyRecording,

    /// A CUPTI call returned an error.
    #[error("{call} failed: {name} (CUPTI error {code})")]
    Call {
        call: &'static str,
        code: u32,
        name: String,
    },
}

impl CuptiError {
    /// CUPTI's name of a failed call's result; the whole message for other errors.
    pub(crate) fn result_name(&self) -> String {
        match self {
            CuptiError::Call { name, .. } => name.clone(),
            other => other.to_string(),
        }
    }

    /// "`call` failed: `result`", as trace notes say a failed call; the whole message for
    /// other errors.
    pub(crate) fn brief(&self) -> String {
        match self {
            CuptiError::Call { call, name, .. } => format!("{call} failed: {name}"),
            other => other.to_string(),
        }
    }

    /// The error of a failed call under the name the caller gives it (e.g. which kind an
    /// `cuptiActivityEnable` was for).
    pub(crate) fn labelled(self, label: &'static str) -> CuptiError {
        match self {
            CuptiError::Call { code, name, .. } => CuptiError::Call {
                call: label,
                code,
                name,
            },
            other => other,
        }
    }
}
