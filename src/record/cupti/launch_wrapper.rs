//! This library's stand-ins for the CUDA runtime's `cudaGraphLaunch` and `cudaGraphLaunch_ptsz`
//! (under `gapscope record`, which preloads it; built with the `launch-wrapper` feature): the trace budget decides on each graph launch
//! here, before the runtime runs (`callbacks::graph_launch_wrapper_entered`), so that between
//! sampled windows a replay pays no CUPTI callback. Each then calls the function it stands in
//! for ([`definition_beside`]).

use super::callbacks::{graph_launch_wrapper_entered, graph_launch_wrapper_left};
use super::dl::definition_beside;
use std::ffi::{CStr, c_int, c_void};
use std::panic::catch_unwind;
use std::sync::OnceLock;

/// `cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t)` (and its `_ptsz` form).
type GraphLaunch = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;

/// `cudaErrorUnknown`: returned only where no definition of the runtime's function is loaded,
/// which a program that calls it cannot be.
const CUDA_ERROR_UNKNOWN: c_int = 999;

static GRAPH_LAUNCH: OnceLock<Option<GraphLaunch>> = OnceLock::new();
static GRAPH_LAUNCH_PTSZ: OnceLock<Option<GraphLaunch>> = OnceLock::new();

/// Stands in for the runtime's `cudaGraphLaunch` when this library is preloaded.
#[cfg(feature = "launch-wrapper")]
#[unsafe(no_mangle)]
pub extern "C" fn cudaGraphLaunch(exec: *mut c_void, stream: *mut c_void) -> c_int {
    launch(&GRAPH_LAUNCH, c"cudaGraphLaunch", exec, stream)
}

/// Stands in for the runtime's `cudaGraphLaunch_ptsz` (per-thread default stream builds).
#[cfg(feature = "launch-wrapper")]
#[unsafe(no_mangle)]
pub extern "C" fn cudaGraphLaunch_ptsz(exec: *mut c_void, stream: *mut c_void) -> c_int {
    launch(&GRAPH_LAUNCH_PTSZ, c"cudaGraphLaunch_ptsz", exec, stream)
}

fn launch(
    real: &OnceLock<Option<GraphLaunch>>,
    name: &CStr,
    exec: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    let Some(real) = *real.get_or_init(|| definition_after_this_library(name)) else {
        return CUDA_ERROR_UNKNOWN;
    };
    // A panic in the budget's decision must not end the program's launch.
    let decided = catch_unwind(|| graph_launch_wrapper_entered(exec as usize)).unwrap_or(false);
    // SAFETY: `real` is the runtime's function of this signature (looked up by its name),
    // called with the caller's own arguments.
    let returned = unsafe { real(exec, stream) };
    if decided {
        graph_launch_wrapper_left();
    }
    returned
}

/// The function `name` that this library stands in for.
fn definition_after_this_library(name: &CStr) -> Option<GraphLaunch> {
    #[cfg(feature = "launch-wrapper")]
    let ours = match name.to_bytes() {
        b"cudaGraphLaunch" => cudaGraphLaunch as GraphLaunch as usize,
        _ => cudaGraphLaunch_ptsz as GraphLaunch as usize,
    };
    #[cfg(not(feature = "launch-wrapper"))]
    let ours = 0;
    let found = definition_beside(name, ours)?;
    // SAFETY: the runtime's exported function of this name has this signature.
    Some(unsafe { std::mem::transmute::<usize, GraphLaunch>(found) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_no_loaded_object_defines_finds_nothing_and_the_launch_says_so() {
        let missing: OnceLock<Option<GraphLaunch>> = OnceLock::new();
        let name = c"gapscopeNoSuchGraphLaunch";
        assert!(definition_after_this_library(name).is_none());
        let returned = launch(&missing, name, std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(returned, CUDA_ERROR_UNKNOWN);
    }
}
