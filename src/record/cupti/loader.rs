//! Loading libcupti at run time, resolving the few libcuda functions the recorder calls (from
//! the driver library [`crate::cuda`] opens), and turning CUPTI status codes into `Result`.
//!
//! Nothing here is linked: analysis and export never need CUDA installed. Both libraries are
//! loaded once per process and never unloaded (CUPTI may call back into us at any time).

use super::error::CuptiError;
use super::sys;
use crate::library_search::{
    self, CUPTI as CUPTI_LIBRARY, Environment, FileSystem, Origin, Search,
};
use std::ffi::{CStr, OsString, c_int};
use std::path::Path;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The oldest CUPTI API version whose records we read (CUDA 12.0: `CUpti_ActivityKernel9`,
/// a prefix of 13.0's `Kernel10` for every field we use).
pub const MIN_CUPTI_API_VERSION: u32 = 19;

/// A loaded libcupti with every function the recorder needs resolved.
pub struct Cupti {
    lib: sys::CuptiLib,
    path: String,
    /// Where the search found it.
    origin: Origin,
    version: u32,
    /// Functions absent from the committed bindings, resolved through a second handle on the
    /// same library (kept open as long as they may be called).
    _extras: Option<libloading::Library>,
    /// `cuptiActivityEnableRuntimeApi`/`cuptiActivityEnableDriverApi` (CUPTI ≥ 12.5): API
    /// activity records per call id.
    api_filter: Option<ApiFilter>,
    /// `cuptiActivitySetAttribute`.
    set_attribute: Option<SetAttributeFn>,
    /// `cuptiActivityFlushPeriod`.
    flush_period: Option<FlushPeriodFn>,
}

/// `CUptiResult cuptiActivityFlushPeriod(uint32_t time)`.
pub(crate) type FlushPeriodFn = unsafe extern "C" fn(u32) -> sys::CUptiResult;

/// `CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t *valueSize,
/// void *value)`.
pub(crate) type SetAttributeFn = unsafe extern "C" fn(
    attr: u32,
    value_size: *mut usize,
    value: *mut std::ffi::c_void,
) -> sys::CUptiResult;

/// `CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER` (value 9 in cupti_activity.h 12.3–13.x).
pub(crate) const ATTR_PER_THREAD_ACTIVITY_BUFFER: u32 = 9;
/// `CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED` (value 8 in cupti_activity.h 12.3–13.x).
pub(crate) const ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED: u32 = 8;

/// `CUptiResult cuptiActivityEnable{Runtime,Driver}Api(CUpti_CallbackId cbid, uint8_t enable)`.
pub(crate) type EnableApiFn = unsafe extern "C" fn(cbid: u32, enable: u8) -> sys::CUptiResult;

pub(crate) struct ApiFilter {
    pub runtime: EnableApiFn,
    pub driver: EnableApiFn,
}

impl std::fmt::Debug for Cupti {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cupti")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

static CUPTI: OnceLock<Cupti> = OnceLock::new();
static LOAD_LOCK: Mutex<()> = Mutex::new(());

/// The libcupti loaded by [`cupti`], if any (for callbacks: never loads).
pub(crate) fn loaded() -> Option<&'static Cupti> {
    CUPTI.get()
}

/// The driver loaded by [`driver`], if any (for callbacks: never loads).
pub(crate) fn driver_loaded() -> Option<&'static Driver> {
    DRIVER.get()
}

/// The command line `cupti()` searches for when nothing else names one: this process's own
/// executable (in a traced program, its interpreter; see [`library_search`]).
fn this_process() -> Vec<OsString> {
    std::env::current_exe()
        .map(|p| vec![p.into_os_string()])
        .unwrap_or_default()
}

/// Returns the process's libcupti, loading it on first use from the places
/// [`library_search::search`] lists for this process's environment and executable.
pub fn cupti() -> Result<&'static Cupti, CuptiError> {
    cupti_for(&Environment::current(this_process()))
}

/// [`cupti`], searching as for a run of `env`'s command when it is not loaded yet (`gapscope
/// record` resolves the library its child will use).
pub fn cupti_for(env: &Environment) -> Result<&'static Cupti, CuptiError> {
    if let Some(c) = CUPTI.get() {
        return Ok(c);
    }
    // Before the lock: the driver's loader takes it too.
    let driver_cuda = driver_cuda_version();
    let _guard = LOAD_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = CUPTI.get() {
        return Ok(c);
    }
    let search = library_search::search(&CUPTI_LIBRARY, env, &FileSystem::default());
    let loaded = load(&search, driver_cuda)?;
    Ok(CUPTI.get_or_init(|| loaded))
}

fn one_line(s: impl std::fmt::Display) -> String {
    s.to_string().replace(['\n', '\r'], " ")
}

/// Loads the first libcupti of `search` that the dynamic loader opens. A library that loads but is too old for gapscope, or newer than `driver_cuda` (the
/// driver's `cuDriverGetVersion`, when known) is an error, not skipped: it is the one the
/// program's environment says to use. Separate from the global for tests.
pub fn load(search: &Search, driver_cuda: Option<i32>) -> Result<Cupti, CuptiError> {
    let searched = search.searched_line(&CUPTI_LIBRARY);
    if search.explicit {
        let candidate = &search.candidates[0];
        let shown = candidate.path.display().to_string();
        if !candidate.path.is_file() {
            return Err(CuptiError::CuptiLibInvalid {
                path: shown,
                reason: "no such file".into(),
            });
        }
        return open(&candidate.path, candidate.origin.clone())
            .map_err(|e| match e {
                OpenError::Dlopen(reason) => CuptiError::CuptiLibInvalid {
                    path: shown,
                    reason,
                },
                OpenError::Cupti(e) => e,
            })
            .and_then(|c| usable(c, driver_cuda, &searched));
    }
    let mut last_error = String::from("not found");
    for candidate in &search.candidates {
        match open(&candidate.path, candidate.origin.clone()) {
            Ok(c) => return usable(c, driver_cuda, &searched),
            Err(OpenError::Cupti(e)) => return Err(e),
            Err(OpenError::Dlopen(e)) => last_error = e,
        }
    }
    Err(CuptiError::CuptiNotFound {
        looked_for: CUPTI_LIBRARY.sonames.join("/"),
        searched,
        last_error,
    })
}

/// The CUDA major version a CUPTI API version belongs to: 13.0 reports 130001; CUDA 12's
/// CUPTI counts 18, 19, … (`None` below that).
pub fn cupti_cuda_major(api_version: u32) -> Option<u32> {
    match api_version {
        100_000.. => Some(api_version / 10_000),
        MIN_CUPTI_API_VERSION.. => Some(12),
        _ => None,
    }
}

/// Why a CUPTI cannot be used here.
#[derive(Debug, PartialEq, Eq)]
enum Unusable {
    /// Older than any CUPTI whose records gapscope reads.
    TooOld,
    /// Made for a newer CUDA (`cupti_cuda`) than the driver's (`driver`, e.g. 12080).
    DriverTooOld { cupti_cuda: u32, driver: i32 },
}

/// Whether a CUPTI of API version `version` is usable with a driver of CUDA version `driver`
/// (`cuDriverGetVersion`, when known).
fn unusable(version: u32, driver: Option<i32>) -> Option<Unusable> {
    if version < MIN_CUPTI_API_VERSION {
        return Some(Unusable::TooOld);
    }
    let cupti_cuda = cupti_cuda_major(version)?;
    let driver = driver.filter(|&d| d > 0)?;
    (cupti_cuda > (driver / 1000) as u32).then_some(Unusable::DriverTooOld { cupti_cuda, driver })
}

/// `c`, or why it cannot be used (see [`unusable`]).
fn usable(c: Cupti, driver_cuda: Option<i32>, searched: &str) -> Result<Cupti, CuptiError> {
    match unusable(c.version, driver_cuda) {
        None => Ok(c),
        Some(Unusable::TooOld) => Err(CuptiError::UnsupportedVersion {
            path: c.path.clone(),
            origin: c.origin.to_string(),
            found: c.version,
            needed: MIN_CUPTI_API_VERSION,
            searched: searched.to_string(),
        }),
        Some(Unusable::DriverTooOld { cupti_cuda, driver }) => Err(CuptiError::DriverTooOld {
            path: c.path.clone(),
            origin: c.origin.to_string(),
            cupti_cuda,
            driver_cuda: format!("{}.{}", driver / 1000, (driver % 1000) / 10),
            driver_major: (driver / 1000) as u32,
            searched: searched.to_string(),
        }),
    }
}

enum OpenError {
    /// dlopen failed: try the next candidate.
    Dlopen(String),
    /// The library loaded but cannot be used: stop and report.
    Cupti(CuptiError),
}

/// Checks that each listed function was resolved.
macro_rules! require_symbols {
    ($lib:expr, $path:expr, $($f:ident),+ $(,)?) => {
        $(
            if $lib.$f.is_err() {
                return Err(OpenError::Cupti(CuptiError::MissingSymbol {
                    path: $path.clone(),
                    symbol: stringify!($f).to_string(),
                }));
            }
        )+
    };
}

fn open(file: &Path, origin: Origin) -> Result<Cupti, OpenError> {
    // SAFETY: loading libcupti runs its initialisers, which only register the library;
    // they do not depend on anything we hold.
    let library = unsafe { libloading::Library::new(file.as_os_str()) }
        .map_err(|e| OpenError::Dlopen(format!("{}: {}", file.display(), one_line(e))))?;
    // SAFETY: from_library only looks up symbols by name; the function types come from
    // bindgen over the CUPTI headers, so they match the C declarations.
    let lib = unsafe { sys::CuptiLib::from_library(library) }
        .map_err(|e| OpenError::Dlopen(format!("{}: {}", file.display(), one_line(e))))?;
    let path = if origin == Origin::SystemLoader {
        // Loaded by soname: name the file the loader picked.
        std::fs::read_to_string("/proc/self/maps")
            .ok()
            .and_then(|maps| library_search::mapped_path(&maps, "libcupti"))
            .unwrap_or_else(|| file.display().to_string())
    } else {
        file.display().to_string()
    };
    require_symbols!(
        lib,
        path,
        cuptiGetResultString,
        cuptiGetVersion,
        cuptiGetTimestamp,
        cuptiGetCallbackName,
        cuptiSetThreadIdType,
        cuptiSubscribe,
        cuptiUnsubscribe,
        cuptiEnableDomain,
        cuptiEnableCallback,
        cuptiGetGraphNodeId,
        cuptiGetGraphId,
        cuptiGetGraphExecId,
        cuptiActivityEnable,
        cuptiActivityDisable,
        cuptiActivityRegisterCallbacks,
        cuptiActivityFlushAll,
        cuptiActivityGetNextRecord,
        cuptiActivityGetNumDroppedRecords,
        cuptiActivityEnableLatencyTimestamps,
    );
    let mut version = 0u32;
    // SAFETY: cuptiGetVersion was resolved above; it writes one u32 through a valid pointer.
    let rc = unsafe { lib.cuptiGetVersion(&mut version) };
    if rc != sys::CUPTI_SUCCESS {
        return Err(OpenError::Cupti(CuptiError::Call {
            call: "cuptiGetVersion",
            code: rc,
            name: format!("error {rc}"),
        }));
    }
    // SAFETY: a second handle on the library just loaded (dlopen counts references); the
    // function types match cupti_activity.h's declarations, and `extras` keeps the handle
    // alive in the same `Cupti` as the pointers.
    let extras = unsafe { libloading::Library::new(file.as_os_str()) }.ok();
    let (api_filter, set_attribute, flush_period) = match &extras {
        None => (None, None, None),
        // SAFETY: symbol look-ups only, with the declared C signatures (see above).
        Some(l) => unsafe {
            let api_filter = l
                .get::<EnableApiFn>(b"cuptiActivityEnableRuntimeApi\0")
                .and_then(|runtime| {
                    let driver = l.get::<EnableApiFn>(b"cuptiActivityEnableDriverApi\0")?;
                    Ok(ApiFilter {
                        runtime: *runtime,
                        driver: *driver,
                    })
                })
                .ok();
            let set_attribute = l
                .get::<SetAttributeFn>(b"cuptiActivitySetAttribute\0")
                .map(|f| *f)
                .ok();
            let flush_period = l
                .get::<FlushPeriodFn>(b"cuptiActivityFlushPeriod\0")
                .map(|f| *f)
                .ok();
            (api_filter, set_attribute, flush_period)
        },
    };
    Ok(Cupti {
        lib,
        path,
        origin,
        version,
        _extras: extras,
        api_filter,
        set_attribute,
        flush_period,
    })
}

impl Cupti {
    /// Per-call-id API activity switches, when this CUPTI has them.
    pub(crate) fn api_filter(&self) -> Option<&ApiFilter> {
        self.api_filter.as_ref()
    }

    /// Sets an activity attribute whose value is a `T` (`u8` or `usize` = `size_t`, as the
    /// attribute's documentation says) through `cuptiActivitySetAttribute`; `None` when this
    /// CUPTI does not export the call.
    pub(crate) fn set_attribute<T: Copy>(&self, attr: u32, value: T) -> Option<sys::CUptiResult> {
        let f = self.set_attribute?;
        let mut value = value;
        let mut size = std::mem::size_of::<T>();
        // SAFETY: resolved from this CUPTI with the declared signature; both pointers are to
        // live locals of the sizes CUPTI is told.
        Some(unsafe { f(attr, &mut size, (&raw mut value).cast()) })
    }

    /// `cuptiActivityFlushPeriod(ms)`; `None` when this CUPTI does not export it.
    pub(crate) fn set_flush_period(&self, ms: u32) -> Option<sys::CUptiResult> {
        // SAFETY: resolved from this CUPTI with the declared signature; a plain value.
        self.flush_period.map(|f| unsafe { f(ms) })
    }

    /// The raw function table, for the result layer (`result`) and the buffer hand-over
    /// (`buffers`) only; every function checked by `open` is resolved.
    pub(super) fn raw(&self) -> &sys::CuptiLib {
        &self.lib
    }

    /// Path the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Where the search found it.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// `cuptiGetVersion`: CUPTI API version of the loaded library (e.g. 130001).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Turns a CUPTI status into `Result`, naming the call.
    pub(crate) fn check(&self, call: &'static str, rc: sys::CUptiResult) -> Result<(), CuptiError> {
        if rc == sys::CUPTI_SUCCESS {
            Ok(())
        } else {
            Err(CuptiError::Call {
                call,
                code: rc,
                name: self.result_name(rc),
            })
        }
    }

    /// `cuptiGetResultString`, or the number when CUPTI does not know it.
    pub(crate) fn result_name(&self, rc: sys::CUptiResult) -> String {
        let mut s: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: resolved at load; writes a pointer to a static string or leaves null.
        let r = unsafe { self.lib.cuptiGetResultString(rc, &mut s) };
        if r == sys::CUPTI_SUCCESS && !s.is_null() {
            // SAFETY: CUPTI returns a NUL-terminated static string.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("CUPTI result {rc}")
        }
    }

    /// The name of a runtime or driver API call, as the trace's API records name their domain.
    pub(crate) fn api_call_name(
        &self,
        domain: crate::trace::ApiDomain,
        cbid: u32,
    ) -> Option<String> {
        let domain = match domain {
            crate::trace::ApiDomain::Runtime => sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            crate::trace::ApiDomain::Driver => sys::CUPTI_CB_DOMAIN_DRIVER_API,
        };
        self.callback_name(domain, cbid)
    }

    /// `cuptiGetCallbackName` for a runtime or driver API callback id.
    pub(crate) fn callback_name(
        &self,
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
    ) -> Option<String> {
        let mut s: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: resolved at load; writes a pointer to a static string or leaves null.
        let r = unsafe { self.lib.cuptiGetCallbackName(domain, cbid, &mut s) };
        if r == sys::CUPTI_SUCCESS && !s.is_null() {
            // SAFETY: CUPTI returns a NUL-terminated static string.
            Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
        } else {
            None
        }
    }

    /// Whether `cuptiActivityEnableCudaEventDeviceTimestamps` is available (CUPTI 13.0+).
    #[cfg(cupti_event_device_timestamps)]
    pub(crate) fn has_event_device_timestamps(&self) -> bool {
        self.lib
            .cuptiActivityEnableCudaEventDeviceTimestamps
            .is_ok()
    }

    /// Whether `cuptiSubscribe_v2` (which names a competing subscriber) is available.
    #[cfg(cupti_subscribe_v2)]
    pub(crate) fn has_subscribe_v2(&self) -> bool {
        self.lib.cuptiSubscribe_v2.is_ok()
    }
}

/// `cuGraphNodeGetType` from libcuda.
pub(crate) type NodeGetTypeFn =
    unsafe extern "C" fn(node: sys::CUgraphNode, ty: *mut sys::CUgraphNodeType) -> c_int;

/// `cuDeviceGet`, `cuDeviceGetName` and `cuDeviceGetAttribute` (`CUdevice` is an `int` in
/// cuda.h, `CUdevice_attribute` and `CUresult` int-sized C enums).
type DeviceGetFn = unsafe extern "C" fn(device: *mut c_int, ordinal: c_int) -> c_int;
type DeviceGetNameFn =
    unsafe extern "C" fn(name: *mut std::ffi::c_char, len: c_int, device: c_int) -> c_int;
type DeviceGetAttributeFn =
    unsafe extern "C" fn(value: *mut c_int, attribute: c_int, device: c_int) -> c_int;

/// The few driver functions the recorder calls itself.
pub(crate) struct Driver {
    pub node_get_type: NodeGetTypeFn,
    /// For naming the device in traces; optional (a trace without a device name is usable).
    device_get: Option<DeviceGetFn>,
    device_get_name: Option<DeviceGetNameFn>,
    device_get_attribute: Option<DeviceGetAttributeFn>,
    driver_get_version: Option<DriverGetVersionFn>,
}

/// `CUresult cuDriverGetVersion(int *driverVersion)`.
type DriverGetVersionFn = unsafe extern "C" fn(version: *mut c_int) -> c_int;

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// Resolves `cuGraphNodeGetType` (and the optional device queries) once, from the driver
/// library [`crate::cuda::library`] opens.
pub(crate) fn driver() -> Result<&'static Driver, CuptiError> {
    if let Some(d) = DRIVER.get() {
        return Ok(d);
    }
    let _guard = LOAD_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(d) = DRIVER.get() {
        return Ok(d);
    }
    let lib = crate::cuda::library().map_err(|e| CuptiError::CudaDriverNotFound {
        reason: one_line(e),
    })?;
    // SAFETY: the type matches `CUresult cuGraphNodeGetType(CUgraphNode, CUgraphNodeType*)`
    // from cuda.h (CUresult and CUgraphNodeType are C enums, int-sized).
    let node_get_type = unsafe { lib.get::<NodeGetTypeFn>(b"cuGraphNodeGetType\0") }
        .map(|s| *s)
        .map_err(|e| CuptiError::CudaDriverNotFound {
            reason: format!("no cuGraphNodeGetType: {}", one_line(e)),
        })?;
    // SAFETY: the types match cuda.h's declarations (see the type aliases).
    let (device_get, device_get_name, device_get_attribute, driver_get_version) = unsafe {
        (
            lib.get::<DeviceGetFn>(b"cuDeviceGet\0").ok().map(|s| *s),
            lib.get::<DeviceGetNameFn>(b"cuDeviceGetName\0")
                .ok()
                .map(|s| *s),
            lib.get::<DeviceGetAttributeFn>(b"cuDeviceGetAttribute\0")
                .ok()
                .map(|s| *s),
            lib.get::<DriverGetVersionFn>(b"cuDriverGetVersion\0")
                .ok()
                .map(|s| *s),
        )
    };
    // The function pointers stay valid: crate::cuda never unloads the library.
    Ok(DRIVER.get_or_init(|| Driver {
        node_get_type,
        device_get,
        device_get_name,
        device_get_attribute,
        driver_get_version,
    }))
}

/// The CUDA version the driver supports, e.g. "CUDA 13.0 driver API" (`cuDriverGetVersion`).
pub fn driver_version() -> Option<String> {
    let v = driver_cuda_version()?;
    Some(format!("CUDA {}.{} driver API", v / 1000, (v % 1000) / 10))
}

/// `cuDriverGetVersion`: e.g. 13000 for CUDA 13.0; `None` without a driver.
fn driver_cuda_version() -> Option<i32> {
    let get = driver().ok()?.driver_get_version?;
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer.
    (unsafe { get(&mut v) } == 0 && v > 0).then_some(v)
}

/// Name and compute capability of the CUDA device with this ordinal, from the driver (which
/// must be initialised: a process that ran CUDA work); `None` when the driver cannot say.
pub fn device_info(ordinal: u32) -> Option<crate::trace::DeviceInfo> {
    /// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR in cuda.h.
    const CC_MAJOR: c_int = 75;
    const CC_MINOR: c_int = 76;
    let d = driver().ok()?;
    let (get, get_name, get_attribute) =
        (d.device_get?, d.device_get_name?, d.device_get_attribute?);
    let mut device: c_int = 0;
    // SAFETY: `device` is a valid out-pointer; an unknown ordinal is an error code, not UB.
    if unsafe { get(&mut device, c_int::try_from(ordinal).ok()?) } != 0 {
        return None;
    }
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds `len` bytes; the driver writes a NUL-terminated name into it.
    if unsafe { get_name(name.as_mut_ptr(), name.len() as c_int - 1, device) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = name.iter().map(|&c| c as u8).collect();
    let name = CStr::from_bytes_until_nul(&bytes)
        .ok()?
        .to_string_lossy()
        .into_owned();
    let attribute = |attribute: c_int| {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer; a bad attribute is an error code.
        (unsafe { get_attribute(&mut value, attribute, device) } == 0).then_some(value)
    };
    Some(crate::trace::DeviceInfo {
        name,
        index: ordinal,
        compute_capability: match (attribute(CC_MAJOR), attribute(CC_MINOR)) {
            (Some(major), Some(minor)) => format!("{major}.{minor}"),
            _ => String::new(),
        },
    })
}

/// Checks that the CUDA driver (`libcuda.so.1`, opened by [`crate::cuda`]) can be loaded and
/// has what the recorder calls. Call it before touching cudarc, whose dynamic loader panics
/// when the library is missing.
pub fn ensure_cuda_driver() -> Result<(), CuptiError> {
    driver().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library_search::Candidate;

    fn explicit(path: &Path) -> Search {
        Search {
            candidates: vec![Candidate {
                path: path.to_owned(),
                origin: Origin::Variable("CUPTI_LIB"),
            }],
            searched: Vec::new(),
            explicit: true,
        }
    }

    #[test]
    fn cupti_lib_pointing_to_missing_file_is_one_line() {
        let err = load(&explicit(Path::new("/nonexistent/libcupti.so.13")), None).unwrap_err();
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(
            msg.contains("CUPTI_LIB=/nonexistent/libcupti.so.13"),
            "{msg}"
        );
        assert!(msg.contains("no such file"), "{msg}");
    }

    #[test]
    fn cupti_lib_pointing_to_non_library_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libcupti.so");
        std::fs::write(&fake, b"not an ELF file\n").unwrap();
        let err = load(&explicit(&fake), None).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CuptiError::CuptiLibInvalid { .. }), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.contains("set CUPTI_LIB"), "{msg}");
    }

    /// Files that are not libraries, where the search found them: each is tried, and the error
    /// names every place searched, the last loader error and what to do.
    #[test]
    fn nothing_loadable_names_the_places_searched_and_the_remedy() {
        let dir = tempfile::tempdir().unwrap();
        let venv_lib = dir
            .path()
            .join("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&venv_lib).unwrap();
        std::fs::write(venv_lib.join("libcupti.so.13"), b"").unwrap();
        std::fs::write(dir.path().join("libcupti.so.12"), b"").unwrap();
        let search = Search {
            candidates: vec![
                Candidate {
                    path: venv_lib.join("libcupti.so.13"),
                    origin: Origin::Python {
                        prefix: dir.path().join("venv"),
                        via: library_search::PythonVia::VirtualEnv,
                    },
                },
                Candidate {
                    path: dir.path().join("libcupti.so.12"),
                    origin: Origin::LdLibraryPath,
                },
            ],
            searched: vec![venv_lib.clone(), dir.path().to_owned()],
            explicit: false,
        };
        let msg = load(&search, None).unwrap_err().to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.starts_with("libcupti not found: looked for libcupti.so.13/libcupti.so.12/libcupti.so in $CUPTI_LIB (unset), "), "{msg}");
        assert!(msg.contains(&venv_lib.display().to_string()), "{msg}");
        // The last candidate's loader error is kept.
        assert!(
            msg.contains(&format!(
                "({}: ",
                dir.path().join("libcupti.so.12").display()
            )),
            "{msg}"
        );
        assert!(msg.contains("pip install nvidia-cuda-cupti"), "{msg}");
    }

    #[test]
    fn a_cupti_newer_than_the_driver_or_older_than_gapscope_reads_is_unusable() {
        assert_eq!(unusable(130001, Some(13000)), None);
        assert_eq!(unusable(130001, Some(13020)), None);
        // An older CUPTI runs on a newer driver.
        assert_eq!(unusable(26, Some(13000)), None);
        // No driver here: nothing to compare with.
        assert_eq!(unusable(130001, None), None);
        assert_eq!(
            unusable(130001, Some(12080)),
            Some(Unusable::DriverTooOld {
                cupti_cuda: 13,
                driver: 12080
            })
        );
        assert_eq!(
            unusable(MIN_CUPTI_API_VERSION - 1, None),
            Some(Unusable::TooOld)
        );
        let msg = CuptiError::DriverTooOld {
            path: "/v/nvidia/cu13/lib/libcupti.so.13".into(),
            origin: "$VIRTUAL_ENV".into(),
            cupti_cuda: 13,
            driver_cuda: "12.8".into(),
            driver_major: 12,
            searched: "$CUPTI_LIB (unset), /v/nvidia/cu13/lib".into(),
        }
        .to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(
            msg.contains("CUPTI for CUDA 13, but the driver supports CUDA 12.8"),
            "{msg}"
        );
        assert!(
            msg.contains("(searched: $CUPTI_LIB (unset), /v/nvidia/cu13/lib)"),
            "{msg}"
        );
    }

    #[test]
    fn cupti_versions_map_to_their_cuda() {
        assert_eq!(cupti_cuda_major(130001), Some(13));
        assert_eq!(cupti_cuda_major(140100), Some(14));
        assert_eq!(cupti_cuda_major(26), Some(12));
        assert_eq!(cupti_cuda_major(MIN_CUPTI_API_VERSION), Some(12));
        assert_eq!(cupti_cuda_major(MIN_CUPTI_API_VERSION - 1), None);
    }

    #[test]
    fn error_messages_are_one_line() {
        let errors = [
            CuptiError::MultipleSubscribers {
                holder: Some("CUPTI for Nsight Systems".into()),
            },
            CuptiError::MultipleSubscribers { holder: None },
            CuptiError::AlreadyRecording,
            CuptiError::CudaDriverNotFound {
                reason: "libcuda.so.1: cannot open shared object file".into(),
            },
            CuptiError::Call {
                call: "cuptiActivityEnable(CONCURRENT_KERNEL)",
                code: 1,
                name: "CUPTI_ERROR_INVALID_PARAMETER".into(),
            },
        ];
        for e in errors {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "{msg}");
        }
        let msg = CuptiError::MultipleSubscribers {
            holder: Some("CUPTI for Nsight Systems".into()),
        }
        .to_string();
        assert!(msg.contains("(CUPTI for Nsight Systems)"), "{msg}");
        assert!(msg.contains("torch.profiler"), "{msg}");
    }
}

#[cfg(test)]
mod real_library_tests {
    use super::*;

    /// With `CUPTI_LIB` naming a real libcupti (no GPU needed): every symbol resolves and the
    /// version is read.
    #[test]
    #[ignore = "needs CUPTI_LIB naming a real libcupti, no GPU (.ci/run sets it to pip's)"]
    fn loads_the_library_named_by_cupti_lib() {
        let path = std::env::var_os("CUPTI_LIB").expect("CUPTI_LIB names a libcupti");
        let search = Search {
            candidates: vec![library_search::Candidate {
                path: path.into(),
                origin: Origin::Variable("CUPTI_LIB"),
            }],
            searched: Vec::new(),
            explicit: true,
        };
        let c = load(&search, None).unwrap();
        assert!(c.version() >= MIN_CUPTI_API_VERSION, "{}", c.version());
        assert_eq!(
            c.result_name(sys::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED),
            "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
        );
        let name = c.callback_name(
            sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
        );
        eprintln!("{} version {} cbid name {name:?}", c.path(), c.version());
        #[cfg(cupti_subscribe_v2)]
        assert!(c.has_subscribe_v2());
    }
}
