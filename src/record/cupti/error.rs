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
        "libcupti not found: looked for {looked_for} in {searched}, then by soname ({last_error}); set CUPTI_LIB to the full path of libcupti.so (or CUDA_HOME to the CUDA toolkit)"
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
        "{path} reports CUPTI API version {found}; gapscope needs {needed} or newer (CUDA 12.0+); set CUPTI_LIB to a newer libcupti.so"
    )]
    UnsupportedVersion {
        path: String,
        found: u32,
        needed: u32,
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
