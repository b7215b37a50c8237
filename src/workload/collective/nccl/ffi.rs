//! FFI leaf: NCCL opened with libloading, its raw declarations (`ncclUniqueId`, the 2.29
//! `ncclConfig_t`, function types), and thin safe wrappers: [`load_nccl`], [`NcclLib`]'s
//! calls and an owned communicator ([`Comm`]) destroyed on drop.
#![allow(unsafe_code)]

use super::version::NcclVersion;
use crate::library_search::{self, Environment, FileSystem, NCCL, Origin, mapped_path};
use crate::workload::collective::{GraphUsageMode, NcclLoadError, WorkloadError};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::fmt;
use std::sync::OnceLock;

const NCCL_UINT8: c_int = 1;
const NCCL_IN_PROGRESS: c_int = 7;

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclUniqueId {
    pub internal: [u8; 128],
}

impl fmt::Debug for NcclUniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NcclUniqueId({:02x?}..)", &self.internal[..8])
    }
}

type NcclComm = *mut c_void;

/// `ncclConfig_t` as declared by nccl.h 2.29 (fields through `numRmaCtx`). NCCL reads a config
/// according to its `version`: a 2.30 NCCL given version 22900 reads these fields and defaults
/// the rest.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct NcclConfigV229 {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
    traffic_class: c_int,
    comm_name: *const c_char,
    collnet_enable: c_int,
    cta_policy: c_int,
    shrink_share: c_int,
    nvls_ctas: c_int,
    n_channels_per_net_peer: c_int,
    nvlink_centric_sched: c_int,
    graph_usage_mode: c_int,
    num_rma_ctx: c_int,
}

const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;

impl NcclConfigV229 {
    /// `NCCL_CONFIG_INITIALIZER` of nccl.h 2.29 with `graphUsageMode` set.
    fn with_graph_usage_mode(mode: GraphUsageMode) -> NcclConfigV229 {
        NcclConfigV229 {
            size: std::mem::size_of::<NcclConfigV229>(),
            magic: 0xcafe_beef,
            version: NcclVersion::new(2, 29, 0).code() as c_uint,
            blocking: NCCL_CONFIG_UNDEF_INT,
            cga_cluster_size: NCCL_CONFIG_UNDEF_INT,
            min_ctas: NCCL_CONFIG_UNDEF_INT,
            max_ctas: NCCL_CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: NCCL_CONFIG_UNDEF_INT,
            traffic_class: NCCL_CONFIG_UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: NCCL_CONFIG_UNDEF_INT,
            cta_policy: NCCL_CONFIG_UNDEF_INT,
            shrink_share: NCCL_CONFIG_UNDEF_INT,
            nvls_ctas: NCCL_CONFIG_UNDEF_INT,
            n_channels_per_net_peer: NCCL_CONFIG_UNDEF_INT,
            nvlink_centric_sched: NCCL_CONFIG_UNDEF_INT,
            graph_usage_mode: mode.as_u8() as c_int,
            num_rma_ctx: NCCL_CONFIG_UNDEF_INT,
        }
    }
}
type FnGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnGetUniqueId = unsafe extern "C" fn(*mut NcclUniqueId) -> c_int;
type FnCommInitRank = unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int) -> c_int;
type FnCommInitRankConfig =
    unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int, *mut NcclConfigV229) -> c_int;
type FnAllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    NcclComm,
    cudarc::driver::sys::CUstream,
) -> c_int;
type FnCommDestroy = unsafe extern "C" fn(NcclComm) -> c_int;
type FnGetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type FnGetLastError = unsafe extern "C" fn(NcclComm) -> *const c_char;

/// The loaded NCCL library (process-wide, never unloaded).
pub struct NcclLib {
    /// The file actually mapped.
    pub path: String,
    /// Where [`crate::library_search`] found it.
    pub origin: Origin,
    pub version: NcclVersion,
    get_unique_id: FnGetUniqueId,
    comm_init_rank: FnCommInitRank,
    comm_init_rank_config: Option<FnCommInitRankConfig>,
    all_gather: FnAllGather,
    comm_destroy: FnCommDestroy,
    get_error_string: FnGetErrorString,
    get_last_error: Option<FnGetLastError>,
    _lib: libloading::Library,
}

impl fmt::Debug for NcclLib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NcclLib({} {})", self.version, self.path)
    }
}

/// Finds NCCL where [`crate::library_search`] says (`$NCCL_LIB`, the Python environment,
/// `LD_LIBRARY_PATH`, the toolkit, then by soname): (the library, the file, where it was
/// found), or every place searched and the loader's errors.
fn open_nccl() -> Result<(libloading::Library, String, Origin), NcclLoadError> {
    let this_process = std::env::current_exe()
        .map(|p| vec![p.into_os_string()])
        .unwrap_or_default();
    let env = Environment::current(this_process);
    let search = library_search::search(&NCCL, &env, &FileSystem::default());
    let mut errors = Vec::new();
    for candidate in &search.candidates {
        // SAFETY: loading NCCL runs its initialisers, as linking against it would.
        match unsafe { libloading::Library::new(&candidate.path) } {
            Ok(lib) => {
                let name = candidate.path.display().to_string();
                return Ok((lib, name, candidate.origin.clone()));
            }
            Err(e) => errors.push(format!("{}: {e}", candidate.path.display()).replace('\n', " ")),
        }
    }
    Err(NcclLoadError::NotFound {
        searched: search.searched_line(&NCCL),
        failures: errors,
    })
}

fn load_nccl_uncached() -> Result<NcclLib, NcclLoadError> {
    let (lib, name, origin) = open_nccl()?;
    // SAFETY (symbol lookups): each type matches the declaration in nccl.h; the pointers are
    // copied out and stay valid because the library is never unloaded.
    unsafe fn sym<T: Copy>(
        lib: &libloading::Library,
        name: &'static str,
    ) -> Result<T, NcclLoadError> {
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| NcclLoadError::MissingSymbol {
                name,
                reason: e.to_string(),
            })
    }
    unsafe {
        let get_version: FnGetVersion = sym(&lib, "ncclGetVersion")?;
        let mut code: c_int = 0;
        let rc = get_version(&mut code);
        if rc != 0 {
            return Err(NcclLoadError::Version(rc));
        }
        let path = std::fs::read_to_string("/proc/self/maps")
            .ok()
            .and_then(|m| mapped_path(&m, "libnccl"))
            .unwrap_or(name);
        Ok(NcclLib {
            path,
            origin,
            version: NcclVersion::from_code(code),
            get_unique_id: sym(&lib, "ncclGetUniqueId")?,
            comm_init_rank: sym(&lib, "ncclCommInitRank")?,
            comm_init_rank_config: sym(&lib, "ncclCommInitRankConfig").ok(),
            all_gather: sym(&lib, "ncclAllGather")?,
            comm_destroy: sym(&lib, "ncclCommDestroy")?,
            get_error_string: sym(&lib, "ncclGetErrorString")?,
            get_last_error: sym(&lib, "ncclGetLastError").ok(),
            _lib: lib,
        })
    }
}

/// Loads NCCL once per process (see [`crate::library_search`] for the search order) and says
/// which one (`gapscope: note: using NCCL from …`).
pub fn load_nccl() -> Result<&'static NcclLib, WorkloadError> {
    static LIB: OnceLock<Result<NcclLib, NcclLoadError>> = OnceLock::new();
    LIB.get_or_init(|| {
        let lib = load_nccl_uncached()?;
        crate::messages::line(&library_search::using_note(
            &NCCL,
            &lib.path,
            &format!("version {}", lib.version),
            &lib.origin,
        ));
        Ok(lib)
    })
    .as_ref()
    .map_err(|e| WorkloadError::NcclUnavailable(e.clone()))
}

impl NcclLib {
    fn error(&self, call: &'static str, code: c_int, comm: Option<NcclComm>) -> WorkloadError {
        // SAFETY: NCCL returns static strings (or null).
        let mut detail = unsafe { cstr((self.get_error_string)(code)) };
        if let (Some(f), Some(c)) = (self.get_last_error, comm) {
            let last = unsafe { cstr(f(c)) };
            if !last.is_empty() {
                detail = format!("{detail}: {last}");
            }
        }
        WorkloadError::Nccl {
            call,
            code,
            detail: detail.replace('\n', " "),
        }
    }

    fn check(
        &self,
        call: &'static str,
        rc: c_int,
        comm: Option<NcclComm>,
    ) -> Result<(), WorkloadError> {
        match rc {
            0 => Ok(()),
            NCCL_IN_PROGRESS => Err(WorkloadError::Nccl {
                call,
                code: rc,
                detail: "in progress: non-blocking communicators are not supported (unset NCCL_COMM_BLOCKING=0)".into(),
            }),
            _ => Err(self.error(call, rc, comm)),
        }
    }

    /// `ncclGetUniqueId`.
    pub fn unique_id(&self) -> Result<NcclUniqueId, WorkloadError> {
        let mut id = NcclUniqueId { internal: [0; 128] };
        // SAFETY: out-pointer to a local of the declared type.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", rc, None)?;
        Ok(id)
    }
}

/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A live NCCL communicator; destroyed on drop (the caller makes its CUDA context current
/// first, as `ncclCommDestroy` needs).
pub struct Comm {
    lib: &'static NcclLib,
    comm: NcclComm,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls are not
// concurrent; `&mut self` on every call serialises them.
unsafe impl Send for Comm {}

impl NcclLib {
    /// Whether this NCCL has `ncclCommInitRankConfig`.
    pub fn has_init_rank_config(&self) -> bool {
        self.comm_init_rank_config.is_some()
    }

    /// Creates rank `rank` of `world`'s communicator: `ncclCommInitRankConfig` with
    /// `graphUsageMode` when `mode` is given and the function exists, else
    /// `ncclCommInitRank`.
    pub fn init_comm(
        &'static self,
        world: usize,
        id: NcclUniqueId,
        rank: usize,
        mode: Option<GraphUsageMode>,
    ) -> Result<Comm, WorkloadError> {
        let mut comm: NcclComm = std::ptr::null_mut();
        let (call, rc) = match (mode, self.comm_init_rank_config) {
            (Some(m), Some(init)) => {
                let mut cfg = NcclConfigV229::with_graph_usage_mode(m);
                // SAFETY: out-pointer to a local; `cfg` has nccl.h 2.29's layout and version.
                let rc = unsafe { init(&mut comm, world as c_int, id, rank as c_int, &mut cfg) };
                ("ncclCommInitRankConfig", rc)
            }
            _ => {
                // SAFETY: out-pointer to a local.
                let rc =
                    unsafe { (self.comm_init_rank)(&mut comm, world as c_int, id, rank as c_int) };
                ("ncclCommInitRank", rc)
            }
        };
        self.check(call, rc, None)?;
        if comm.is_null() {
            return Err(WorkloadError::Nccl {
                call,
                code: 0,
                detail: "returned a null communicator".into(),
            });
        }
        Ok(Comm { lib: self, comm })
    }
}

impl Comm {
    /// `ncclAllGather(send, recv, bytes, ncclUint8, comm, stream)`. `send` must hold `bytes`
    /// and `recv` `bytes` × ranks bytes of device memory (the caller checks the slices).
    pub fn all_gather(
        &mut self,
        send: u64,
        recv: u64,
        bytes: usize,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<(), WorkloadError> {
        // SAFETY: device addresses of buffers the caller checked, a live communicator and a
        // live stream; NCCL only enqueues work on the stream.
        let rc = unsafe {
            (self.lib.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                bytes,
                NCCL_UINT8,
                self.comm,
                stream.cu_stream(),
            )
        };
        self.lib.check("ncclAllGather", rc, Some(self.comm))
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the communicator `init_comm` created, destroyed once. Errors cannot be
        // reported from Drop.
        let _ = unsafe { (self.lib.comm_destroy)(self.comm) };
    }
}

/// Sets `name=value` in the process environment, for NCCL to read at its first communicator.
/// Call on the main thread before other threads start (NCCL < 2.29 reads
/// `NCCL_GRAPH_MIXING_SUPPORT` this way).
pub fn set_env_before_nccl_init(name: &str, value: &str) {
    // SAFETY: called before this process's first NCCL communicator, from the thread that
    // creates it before starting others (documented on NcclAllGather::new), so no other thread
    // reads the environment concurrently.
    unsafe { std::env::set_var(name, value) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_pointer_width = "64")]
    /// Offsets of `ncclConfig_t`'s fields in nccl.h of NCCL 2.32.3 (`nvidia-nccl-cu13` 2.32.3,
    /// `offsetof` compiled with gcc on x86_64): the 2.29 prefix we send has not moved, so a
    /// newer NCCL reading a config of version 22900 finds `graphUsageMode` where we put it.
    #[test]
    fn config_layout_matches_the_released_header() {
        use std::mem::offset_of;
        let ours = [
            ("size", offset_of!(NcclConfigV229, size)),
            ("magic", offset_of!(NcclConfigV229, magic)),
            ("version", offset_of!(NcclConfigV229, version)),
            ("blocking", offset_of!(NcclConfigV229, blocking)),
            (
                "cgaClusterSize",
                offset_of!(NcclConfigV229, cga_cluster_size),
            ),
            ("minCTAs", offset_of!(NcclConfigV229, min_ctas)),
            ("maxCTAs", offset_of!(NcclConfigV229, max_ctas)),
            ("netName", offset_of!(NcclConfigV229, net_name)),
            ("splitShare", offset_of!(NcclConfigV229, split_share)),
            ("trafficClass", offset_of!(NcclConfigV229, traffic_class)),
            ("commName", offset_of!(NcclConfigV229, comm_name)),
            ("collnetEnable", offset_of!(NcclConfigV229, collnet_enable)),
            ("CTAPolicy", offset_of!(NcclConfigV229, cta_policy)),
            ("shrinkShare", offset_of!(NcclConfigV229, shrink_share)),
            ("nvlsCTAs", offset_of!(NcclConfigV229, nvls_ctas)),
            (
                "nChannelsPerNetPeer",
                offset_of!(NcclConfigV229, n_channels_per_net_peer),
            ),
            (
                "nvlinkCentricSched",
                offset_of!(NcclConfigV229, nvlink_centric_sched),
            ),
            (
                "graphUsageMode",
                offset_of!(NcclConfigV229, graph_usage_mode),
            ),
            ("numRmaCtx", offset_of!(NcclConfigV229, num_rma_ctx)),
        ];
        let header_2_32_3 = [
            0, 8, 12, 16, 20, 24, 28, 32, 40, 44, 48, 56, 60, 64, 68, 72, 76, 80, 84,
        ];
        for ((field, at), expected) in ours.iter().zip(header_2_32_3) {
            assert_eq!(*at, expected, "{field}");
        }
        let cfg = NcclConfigV229::with_graph_usage_mode(GraphUsageMode::One);
        assert_eq!((cfg.magic, cfg.version), (0xcafe_beef, 22900));
        assert_eq!(cfg.size, 88);
        assert_eq!(cfg.graph_usage_mode, 1);
    }

    #[test]
    fn config_layout_matches_nccl_2_29() {
        // size_t + 2 uint + 4 int + ptr + 2 int + ptr + 8 int = 8+8+16+8+8+8+32 = 88.
        assert_eq!(std::mem::size_of::<NcclConfigV229>(), 88);
        assert_eq!(std::mem::offset_of!(NcclConfigV229, net_name), 32);
        assert_eq!(std::mem::offset_of!(NcclConfigV229, comm_name), 48);
        assert_eq!(std::mem::offset_of!(NcclConfigV229, graph_usage_mode), 80);
        let c = NcclConfigV229::with_graph_usage_mode(GraphUsageMode::One);
        assert_eq!(c.magic, 0xcafebeef);
        assert_eq!(c.version, 22900);
        assert_eq!(c.graph_usage_mode, 1);
        assert_eq!(c.blocking, i32::MIN);
        assert_eq!(c.size, 88);
    }
}
