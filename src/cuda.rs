//! The CUDA driver library, `libcuda.so.1`: the one place that opens it (once per process,
//! never unloaded) and answers "is the CUDA driver here, and how many devices does it see".
//!
//! The recorder (`record::cupti`) resolves its driver functions from [`library`]; the workload
//! asks [`library`] / [`device_count`] before touching cudarc, whose dynamic loader panics when
//! the library or a symbol is missing.

use std::sync::{Arc, OnceLock};

/// The file opened.
pub const LIBCUDA: &str = "libcuda.so.1";

/// Why `libcuda.so.1` did not open: the loader's error, shared (it is kept for every later
/// caller, and is not `Clone` itself). Displays as the loader's message.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct LibraryError(Arc<libloading::Error>);

/// `libcuda.so.1`, opened on first use; `Err` holds the loader's error (kept for every later
/// caller: a library that failed to open once is not retried).
pub fn library() -> Result<&'static libloading::Library, LibraryError> {
    static LIB: OnceLock<Result<libloading::Library, LibraryError>> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: loading the NVIDIA driver library runs only its initialisers, as linking
        // against it would; the handle lives in a static, so it is never unloaded while a
        // function pointer taken from it may still be called.
        unsafe { libloading::Library::new(LIBCUDA) }.map_err(|e| LibraryError(Arc::new(e)))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The first of `names` the driver library lacks (`None`: all present, or no library).
pub fn missing_symbol<'a>(names: &[&'a str]) -> Option<&'a str> {
    let lib = library().ok()?;
    names.iter().copied().find(|name| {
        // SAFETY: only the symbol's presence is checked; nothing is called through it.
        unsafe { lib.get::<*const std::ffi::c_void>(name.as_bytes()) }.is_err()
    })
}

/// Why [`device_count`] has no answer.
#[derive(Debug)]
pub enum NoDevices {
    /// `libcuda.so.1` cannot be loaded.
    Library(LibraryError),
    /// `cuInit` or `cuDeviceGetCount` failed.
    Driver(cudarc::driver::DriverError),
}

/// Devices the CUDA driver reports (`cuInit` + `cuDeviceGetCount`, through cudarc once the
/// library is known to load, so cudarc cannot panic). Never panics.
pub fn device_count() -> Result<usize, NoDevices> {
    library().map_err(NoDevices::Library)?;
    cudarc::driver::CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .map_err(NoDevices::Driver)
}
