//! CUPTI recorder (FFI and `unsafe` of recording live here).
//!
//! Floors, each using only the one below:
//! * `sys`: raw bindgen output over the CUPTI headers (see `build.rs`);
//! * `loader`: finds libcupti at run time, resolves libcuda's functions from the library
//!   [`crate::cuda`] opens, checks symbols, turns status codes into
//!   [`CuptiError`];
//! * `loaded`: the CUDA libraries the process loaded, and their versions;
//! * `decode`, `graph`, `budget`, `step_choice`, `markers`, `buffers`, `callbacks`, `frames`:
//!   what CUPTI calls into (activity buffers, API, NVTX and graph callbacks), decoding records
//!   into [`crate::trace`] types, naming the library call a graph node was made in, deciding
//!   which launches the trace budget leaves untraced, which NVTX range marks a step when none
//!   is given, and which NVTX ranges of untraced work are only summarised;
//! * `config` ([`RecorderConfig`]: what is enabled) and [`Recorder`]: the public face.
//!
//! Nothing here links against CUDA: analysis and export run where no CUDA is installed.

mod activity;
mod budget;
mod buffers;
mod callbacks;
mod config;
mod decode;
mod dl;
mod error;
mod frames;
#[cfg(test)]
mod gpu_tests;
mod graph;
// Without the `launch-wrapper` feature nothing stands in for cudaGraphLaunch: only the tests
// reach the lookup and the callbacks' wrapper entry.
#[cfg_attr(not(feature = "launch-wrapper"), allow(dead_code))]
mod launch_wrapper;
mod loaded;
mod loader;
mod local_symbols;
mod params;
mod python_stack;
mod recorder;
mod result;
mod state;
pub(crate) mod sys;

pub use budget::{NotALimit, TraceBudget};
pub use config::{ApiCallbacks, RecorderConfig, api_record_wanted};

/// The values of the recorder's diagnostic switches (`GAPSCOPE_CUPTI_SKIP`…) from `get` that
/// it refuses: said and left at their defaults when recording starts.
pub(crate) fn refused_diagnostics(
    get: &dyn Fn(crate::settings::Setting) -> Option<String>,
) -> Vec<crate::settings::BadSetting> {
    config::Diagnostics::read(get).1
}
pub use error::CuptiError;
pub use loader::{MIN_CUPTI_API_VERSION, cupti_cuda_major, device_info, ensure_cuda_driver};
pub use recorder::{MarkerGuard, Recorder};

/// Where the CUPTI bindings of this build came from (committed or generated, and from which
/// headers).
pub const BINDINGS_ORIGIN: &str = sys::BINDINGS_ORIGIN;

/// The libcupti this process loaded.
#[derive(Debug, Clone)]
pub struct CuptiLibrary {
    pub path: String,
    /// `cuptiGetVersion`.
    pub version: u32,
    /// Where [`crate::library_search`] found it.
    pub origin: crate::library_search::Origin,
}

impl CuptiLibrary {
    /// `gapscope: note: using CUPTI from … (API version …; found through …)`.
    pub fn note(&self) -> String {
        crate::library_search::using_note(
            &crate::library_search::CUPTI,
            &self.path,
            &format!("API version {}", self.version),
            &self.origin,
        )
    }
}

/// The libcupti this process loaded, if any (never loads).
pub fn loaded_cupti_library() -> Option<CuptiLibrary> {
    let c = loader::loaded()?;
    Some(CuptiLibrary {
        path: c.path().to_string(),
        version: c.version(),
        origin: c.origin().clone(),
    })
}

/// Loads libcupti (if not loaded yet), searching as for a run of `env`'s command, and says
/// which one it is.
pub fn cupti_library(env: &crate::library_search::Environment) -> Result<CuptiLibrary, CuptiError> {
    let c = loader::cupti_for(env)?;
    Ok(CuptiLibrary {
        path: c.path().to_string(),
        version: c.version(),
        origin: c.origin().clone(),
    })
}
