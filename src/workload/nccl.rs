//! The real `ncclAllGather` backend.
//!
//! NCCL is opened with libloading here, not through cudarc: cudarc's loader looks for
//! `libnccl.so`, `libnccl.so.13`, `.12`, … but never `libnccl.so.2` (the name NCCL installs),
//! panics when it finds nothing, and its bindings assume one NCCL version's structs. We open,
//! in order, `$NCCL_LIB`, `libnccl.so.2`, `libnccl.so`,
//! `/usr/lib/x86_64-linux-gnu/libnccl.so.2`, resolve the file actually mapped (from
//! `/proc/self/maps`), and call only `ncclGetVersion`, `ncclGetUniqueId`, `ncclCommInitRank`
//! / `ncclCommInitRankConfig`, `ncclAllGather`, `ncclCommDestroy`, `ncclGetErrorString`
//! (`ncclGetLastError` when present). The library stays loaded for the life of the process.
//!
//! Graph usage mode: NCCL ≥ 2.29 gets it through `ncclConfig_t::graphUsageMode`
//! (`ncclCommInitRankConfig` with the 2.29 struct layout and `version = 22900`; NCCL fills
//! newer fields with their defaults for an older config version). Older NCCL has no field:
//! `NCCL_GRAPH_MIXING_SUPPORT` is set in the environment before the first NCCL call of the
//! process (mode 2 → 1, modes 0/1 → 0). NCCL reads it once per process.
//!
//! Ranks: one per process. Rank and world come from `RANK`/`WORLD_SIZE` (torchrun),
//! `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`, `SLURM_PROCID`/`SLURM_NTASKS`,
//! `PMI_RANK`/`PMI_SIZE`; none: R = 1. With R = 1 NCCL takes its one-rank shortcut (a plain
//! copy, no strong stream, no graph nodes), so the graph usage mode has no effect. With R > 1
//! the unique id goes through the file named by `GAPSCOPE_NCCL_ID_FILE` (rank 0 writes it
//! atomically, the others poll for it).

use crate::workload::collective::{
    Backend, GraphUsageMode, RoutingAllGather, RunnerError, ScopeHook, open_scope, raw_ptr,
};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Library-call scope of the NCCL backend.
pub const NCCL_SCOPE: &str = "ncclAllGather";
/// Environment variable naming the unique-id file for multi-process runs.
pub const ID_FILE_ENV: &str = "GAPSCOPE_NCCL_ID_FILE";
/// Seconds ranks other than 0 wait for the unique-id file (default 120).
pub const ID_TIMEOUT_ENV: &str = "GAPSCOPE_NCCL_ID_TIMEOUT_S";
/// A unique-id file older than this many seconds before this process looked for it is stale
/// (default 120).
pub const ID_MAX_AGE_ENV: &str = "GAPSCOPE_NCCL_ID_MAX_AGE_S";
const ID_MAGIC: &[u8; 8] = b"GSNCCLID";
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

/// An NCCL version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> NcclVersion {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }

    /// Decodes `ncclGetVersion`'s integer (≥ 2.9: M*10000+m*100+p; before: M*1000+m*100+p).
    pub fn from_code(code: i32) -> NcclVersion {
        let c = code.max(0) as u32;
        if c >= 10000 {
            NcclVersion::new(c / 10000, (c % 10000) / 100, c % 100)
        } else {
            NcclVersion::new(c / 1000, (c % 1000) / 100, c % 100)
        }
    }

    /// `NCCL_VERSION(major, minor, patch)` for 2.9 and later.
    pub const fn code(self) -> u32 {
        self.major * 10000 + self.minor * 100 + self.patch
    }

    /// `ncclConfig_t::graphUsageMode` exists from 2.29 on.
    pub fn has_graph_usage_mode(self) -> bool {
        self >= NcclVersion::new(2, 29, 0)
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// How the graph usage mode reaches NCCL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRoute {
    /// `ncclCommInitRankConfig` with `graphUsageMode` (NCCL ≥ 2.29).
    ConfigField(GraphUsageMode),
    /// `NCCL_GRAPH_MIXING_SUPPORT=<value>` before comm init (NCCL < 2.29).
    MixingEnv(&'static str),
}

impl ModeRoute {
    /// The route for `mode` on NCCL `version`.
    pub fn select(version: NcclVersion, mode: GraphUsageMode) -> ModeRoute {
        if version.has_graph_usage_mode() {
            ModeRoute::ConfigField(mode)
        } else {
            ModeRoute::MixingEnv(mode.mixing_env_value())
        }
    }

    /// The environment assignment this route needs, if any.
    pub fn env_assignment(self) -> Option<(&'static str, &'static str)> {
        match self {
            ModeRoute::ConfigField(_) => None,
            ModeRoute::MixingEnv(v) => Some(("NCCL_GRAPH_MIXING_SUPPORT", v)),
        }
    }
}

impl fmt::Display for ModeRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModeRoute::ConfigField(m) => write!(f, "ncclConfig_t.graphUsageMode={m}"),
            ModeRoute::MixingEnv(v) => write!(f, "NCCL_GRAPH_MIXING_SUPPORT={v}"),
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

/// The names tried, in order.
pub fn nccl_candidates(nccl_lib_env: Option<&str>) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(p) = nccl_lib_env.map(str::trim).filter(|p| !p.is_empty()) {
        v.push(p.to_string());
    }
    for c in [
        "libnccl.so.2",
        "libnccl.so",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
    ] {
        if !v.iter().any(|x| x == c) {
            v.push(c.to_string());
        }
    }
    v
}

/// The path of the first mapped file whose name contains `needle`, from /proc/self/maps text.
pub fn mapped_path(maps: &str, needle: &str) -> Option<String> {
    maps.lines().find_map(|l| {
        let path = l.split_whitespace().nth(5)?;
        let name = Path::new(path).file_name()?.to_str()?;
        name.contains(needle).then(|| path.to_string())
    })
}

fn load_nccl_uncached() -> Result<NcclLib, String> {
    let env = std::env::var("NCCL_LIB").ok();
    let mut errors = Vec::new();
    let mut opened = None;
    for c in nccl_candidates(env.as_deref()) {
        // SAFETY: loading NCCL runs its initialisers, as linking against it would.
        match unsafe { libloading::Library::new(&c) } {
            Ok(lib) => {
                opened = Some((c, lib));
                break;
            }
            Err(e) => errors.push(format!("{c}: {e}")),
        }
    }
    let (name, lib) = opened.ok_or_else(|| format!("tried {}", errors.join("; ")))?;
    // SAFETY (symbol lookups): each type matches the declaration in nccl.h; the pointers are
    // copied out and stay valid because the library is never unloaded.
    unsafe fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("{name}: {e}"))
    }
    unsafe {
        let get_version: FnGetVersion = sym(&lib, "ncclGetVersion")?;
        let mut code: c_int = 0;
        let rc = get_version(&mut code);
        if rc != 0 {
            return Err(format!("ncclGetVersion returned {rc}"));
        }
        let path = std::fs::read_to_string("/proc/self/maps")
            .ok()
            .and_then(|m| mapped_path(&m, "libnccl"))
            .unwrap_or(name);
        Ok(NcclLib {
            path,
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

/// Loads NCCL once per process (see the module documentation for the search order).
pub fn load_nccl() -> Result<&'static NcclLib, RunnerError> {
    static LIB: OnceLock<Result<NcclLib, String>> = OnceLock::new();
    LIB.get_or_init(load_nccl_uncached)
        .as_ref()
        .map_err(|e| RunnerError::NcclUnavailable(e.clone()))
}

impl NcclLib {
    fn error(&self, call: &'static str, code: c_int, comm: Option<NcclComm>) -> RunnerError {
        // SAFETY: NCCL returns static strings (or null).
        let mut detail = unsafe { cstr((self.get_error_string)(code)) };
        if let (Some(f), Some(c)) = (self.get_last_error, comm) {
            let last = unsafe { cstr(f(c)) };
            if !last.is_empty() {
                detail = format!("{detail}: {last}");
            }
        }
        RunnerError::Nccl {
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
    ) -> Result<(), RunnerError> {
        match rc {
            0 => Ok(()),
            NCCL_IN_PROGRESS => Err(RunnerError::Nccl {
                call,
                code: rc,
                detail: "in progress: non-blocking communicators are not supported (unset NCCL_COMM_BLOCKING=0)".into(),
            }),
            _ => Err(self.error(call, rc, comm)),
        }
    }

    /// `ncclGetUniqueId`.
    pub fn unique_id(&self) -> Result<NcclUniqueId, RunnerError> {
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

/// This process's place among the ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: usize,
    pub world: usize,
    /// Rank within the node (device to use), when the launcher says.
    pub local_rank: Option<usize>,
    /// Where it came from: "torchrun", "openmpi", "slurm", "pmi" or "default".
    pub source: &'static str,
}

impl RankInfo {
    pub fn single() -> RankInfo {
        RankInfo {
            rank: 0,
            world: 1,
            local_rank: Some(0),
            source: "default",
        }
    }
}

/// Detects rank and world size from launcher variables, read through `get` (testable).
pub fn detect_rank(get: &dyn Fn(&str) -> Option<String>) -> Result<RankInfo, RunnerError> {
    const SOURCES: &[(&str, &str, &str, &str)] = &[
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        (
            "openmpi",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ),
        ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ];
    let parse = |name: &str, v: String| -> Result<usize, RunnerError> {
        v.trim()
            .parse::<usize>()
            .map_err(|_| RunnerError::Config(format!("{name}={v:?} is not a non-negative integer")))
    };
    for &(source, rk, wk, lk) in SOURCES {
        let (Some(r), Some(w)) = (get(rk), get(wk)) else {
            continue;
        };
        let rank = parse(rk, r)?;
        let world = parse(wk, w)?;
        if world == 0 || rank >= world {
            return Err(RunnerError::Config(format!(
                "{rk}={rank} is not below {wk}={world}"
            )));
        }
        let local_rank = match get(lk) {
            Some(v) => Some(parse(lk, v)?),
            None => None,
        };
        return Ok(RankInfo {
            rank,
            world,
            local_rank,
            source,
        });
    }
    Ok(RankInfo::single())
}

/// [`detect_rank`] on the process environment.
pub fn detect_rank_from_env() -> Result<RankInfo, RunnerError> {
    detect_rank(&|k| std::env::var(k).ok())
}

fn io_err(path: &Path, e: impl fmt::Display) -> RunnerError {
    RunnerError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

/// Rank 0: writes `id` to `path` atomically (temporary file, fsync, rename).
pub fn write_id_file(path: &Path, id: &NcclUniqueId) -> Result<(), RunnerError> {
    let tmp = PathBuf::from(format!("{}.tmp.{}", path.display(), std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    f.write_all(ID_MAGIC).map_err(|e| io_err(&tmp, e))?;
    f.write_all(&id.internal).map_err(|e| io_err(&tmp, e))?;
    f.sync_all().map_err(|e| io_err(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

/// Reads a complete id file no older than `not_before`; `None` while absent, partial or stale.
pub fn read_id_file(path: &Path, not_before: SystemTime) -> Option<NcclUniqueId> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.modified().ok()? < not_before {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if bytes.len() != ID_MAGIC.len() + 128 || &bytes[..ID_MAGIC.len()] != ID_MAGIC {
        return None;
    }
    let mut id = NcclUniqueId { internal: [0; 128] };
    id.internal.copy_from_slice(&bytes[ID_MAGIC.len()..]);
    Some(id)
}

fn env_secs(name: &str, default: u64) -> Result<u64, RunnerError> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| RunnerError::Config(format!("{name}={v:?} is not a number of seconds"))),
        Err(_) => Ok(default),
    }
}

/// Shares the unique id through `path`: rank 0 creates and writes it, the others poll.
pub fn exchange_unique_id(
    lib: &NcclLib,
    path: &Path,
    rank: usize,
) -> Result<NcclUniqueId, RunnerError> {
    if rank == 0 {
        let _ = std::fs::remove_file(path);
        let id = lib.unique_id()?;
        write_id_file(path, &id)?;
        return Ok(id);
    }
    let timeout = Duration::from_secs(env_secs(ID_TIMEOUT_ENV, 120)?);
    let max_age = Duration::from_secs(env_secs(ID_MAX_AGE_ENV, 120)?);
    let not_before = SystemTime::now()
        .checked_sub(max_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let t0 = Instant::now();
    loop {
        if let Some(id) = read_id_file(path, not_before) {
            return Ok(id);
        }
        if t0.elapsed() > timeout {
            return Err(RunnerError::Io {
                path: path.display().to_string(),
                detail: format!(
                    "rank {rank}: no fresh NCCL unique id after {} s (is rank 0 running, and does {ID_FILE_ENV} name the same path on a shared filesystem?)",
                    timeout.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Communicators this process has created with a shared unique-id file.
static COMMUNICATORS_MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// NCCL_GRAPH_MIXING_SUPPORT is read once per process: remember what we set.
static MIXING_ENV_SET: Mutex<Option<&'static str>> = Mutex::new(None);

/// Applies the route's environment assignment; returns a note when it replaced a different
/// value the user had set. Errors when this process already set another value (NCCL has
/// cached the first one).
fn apply_env_route(route: ModeRoute) -> Result<Option<String>, RunnerError> {
    let Some((name, value)) = route.env_assignment() else {
        return Ok(None);
    };
    let mut set = MIXING_ENV_SET.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(prev) = *set {
        if prev != value {
            return Err(RunnerError::Config(format!(
                "{name} was already set to {prev} in this process and NCCL reads it once: create communicators of different graph usage modes in separate processes"
            )));
        }
        return Ok(None);
    }
    let before = std::env::var(name).ok();
    // SAFETY: set before this process's first NCCL communicator; the runner creates the
    // communicator on its main thread before starting others (documented on NcclAllGather::new).
    unsafe { std::env::set_var(name, value) };
    *set = Some(value);
    Ok(before
        .filter(|b| b.trim() != value)
        .map(|b| format!("{name}={value} (replaced {b:?})")))
}

/// One-line description of an NCCL backend.
pub fn nccl_describe(
    version: NcclVersion,
    path: &str,
    info: &RankInfo,
    mode: GraphUsageMode,
    route: ModeRoute,
) -> String {
    if info.world == 1 {
        format!(
            "nccl {version} ({path}), R=1, graph usage mode {mode} via {route}: one-rank shortcut, no strong-stream nodes (graph usage mode {mode} has no effect)"
        )
    } else {
        format!(
            "nccl {version} ({path}), R={}, rank {} ({}), graph usage mode {mode} via {route}",
            info.world, info.rank, info.source
        )
    }
}

/// The real NCCL all-gather: one communicator, one rank per process.
pub struct NcclAllGather {
    lib: &'static NcclLib,
    comm: NcclComm,
    ctx: Arc<CudaContext>,
    info: RankInfo,
    mode: GraphUsageMode,
    route: ModeRoute,
    env_note: Option<String>,
    hook: Option<ScopeHook>,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls are not
// concurrent; `&mut self` on every call serialises them.
unsafe impl Send for NcclAllGather {}

impl NcclAllGather {
    /// Loads NCCL, selects the mode route, shares the unique id (R > 1: through the file named
    /// by `GAPSCOPE_NCCL_ID_FILE`) and creates the communicator on `ctx`'s device.
    ///
    /// Call on the main thread before other threads start: on NCCL < 2.29 this sets
    /// `NCCL_GRAPH_MIXING_SUPPORT` in the process environment.
    pub fn new(
        ctx: &Arc<CudaContext>,
        mode: GraphUsageMode,
        info: RankInfo,
    ) -> Result<NcclAllGather, RunnerError> {
        let lib = load_nccl()?;
        let mut route = ModeRoute::select(lib.version, mode);
        if matches!(route, ModeRoute::ConfigField(_)) && lib.comm_init_rank_config.is_none() {
            route = ModeRoute::MixingEnv(mode.mixing_env_value());
        }
        // Before any NCCL call that may initialise NCCL's parameters.
        let env_note = apply_env_route(route)?;
        ctx.bind_to_thread()
            .map_err(|e| RunnerError::cuda("cuCtxSetCurrent", e))?;
        let id = if info.world == 1 {
            lib.unique_id()?
        } else {
            let path = std::env::var(ID_FILE_ENV).map_err(|_| {
                RunnerError::Config(format!(
                    "{} ranks: set {ID_FILE_ENV} to a fresh path on a filesystem all ranks share",
                    info.world
                ))
            })?;
            // One id per communicator: every rank creates its communicators in the same order
            // (one per graph usage mode with NCCL ≥ 2.29), so the k-th meets the others' k-th
            // and never reads an earlier communicator's id.
            let k = COMMUNICATORS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = if k == 0 { path } else { format!("{path}.{k}") };
            exchange_unique_id(lib, Path::new(&path), info.rank)?
        };
        let mut comm: NcclComm = std::ptr::null_mut();
        let (call, rc) = match (route, lib.comm_init_rank_config) {
            (ModeRoute::ConfigField(m), Some(init)) => {
                let mut cfg = NcclConfigV229::with_graph_usage_mode(m);
                // SAFETY: out-pointer to a local; `cfg` has nccl.h 2.29's layout and version.
                let rc = unsafe {
                    init(
                        &mut comm,
                        info.world as c_int,
                        id,
                        info.rank as c_int,
                        &mut cfg,
                    )
                };
                ("ncclCommInitRankConfig", rc)
            }
            _ => {
                // SAFETY: out-pointer to a local.
                let rc = unsafe {
                    (lib.comm_init_rank)(&mut comm, info.world as c_int, id, info.rank as c_int)
                };
                ("ncclCommInitRank", rc)
            }
        };
        lib.check(call, rc, None)?;
        if comm.is_null() {
            return Err(RunnerError::Nccl {
                call,
                code: 0,
                detail: "returned a null communicator".into(),
            });
        }
        Ok(NcclAllGather {
            lib,
            comm,
            ctx: ctx.clone(),
            info,
            mode,
            route,
            env_note,
            hook: None,
        })
    }

    /// [`Self::new`] with rank and world from the launcher's environment ([`detect_rank`]).
    pub fn from_env(
        ctx: &Arc<CudaContext>,
        mode: GraphUsageMode,
    ) -> Result<NcclAllGather, RunnerError> {
        let info = detect_rank_from_env()?;
        NcclAllGather::new(ctx, mode, info)
    }

    pub fn version(&self) -> NcclVersion {
        self.lib.version
    }

    pub fn library_path(&self) -> &str {
        &self.lib.path
    }

    pub fn rank_info(&self) -> &RankInfo {
        &self.info
    }

    pub fn route(&self) -> ModeRoute {
        self.route
    }
}

impl Drop for NcclAllGather {
    fn drop(&mut self) {
        if !self.comm.is_null() {
            let _ = self.ctx.bind_to_thread();
            // SAFETY: the communicator created in `new`, destroyed once. Errors cannot be
            // reported from Drop.
            let _ = unsafe { (self.lib.comm_destroy)(self.comm) };
            self.comm = std::ptr::null_mut();
        }
    }
}

impl RoutingAllGather for NcclAllGather {
    fn all_gather(
        &mut self,
        stream: &Arc<CudaStream>,
        send: &CudaSlice<u8>,
        recv: &mut CudaSlice<u8>,
        _capturing: bool,
    ) -> Result<(), RunnerError> {
        let bytes = send.len();
        if recv.len() < bytes * self.info.world {
            return Err(RunnerError::Config(format!(
                "ncclAllGather: recv {} bytes, needs ≥ {} ({} ranks × {bytes})",
                recv.len(),
                bytes * self.info.world,
                self.info.world
            )));
        }
        let send_ptr = raw_ptr(send, stream)?;
        let recv_ptr = raw_ptr(recv, stream)?;
        let _scope = open_scope(&self.hook, NCCL_SCOPE);
        // SAFETY: device buffers of the sizes checked above, a live communicator and stream.
        let rc = unsafe {
            (self.lib.all_gather)(
                send_ptr as *const c_void,
                recv_ptr as *mut c_void,
                bytes,
                NCCL_UINT8,
                self.comm,
                stream.cu_stream(),
            )
        };
        self.lib.check("ncclAllGather", rc, Some(self.comm))
    }

    fn describe(&self) -> String {
        let mut d = nccl_describe(
            self.lib.version,
            &self.lib.path,
            &self.info,
            self.mode,
            self.route,
        );
        if let Some(n) = &self.env_note {
            d.push_str(&format!("; {n}"));
        }
        d
    }

    fn scope_name(&self) -> &'static str {
        NCCL_SCOPE
    }

    fn set_scope_hook(&mut self, hook: Option<ScopeHook>) {
        self.hook = hook;
    }

    fn ranks(&self) -> usize {
        self.info.world
    }

    fn mode(&self) -> GraphUsageMode {
        self.mode
    }

    fn backend(&self) -> Backend {
        Backend::Nccl
    }
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
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn version_decoding() {
        assert_eq!(NcclVersion::from_code(22803), NcclVersion::new(2, 28, 3));
        assert_eq!(NcclVersion::from_code(23007), NcclVersion::new(2, 30, 7));
        assert_eq!(NcclVersion::from_code(2708), NcclVersion::new(2, 7, 8));
        assert_eq!(NcclVersion::new(2, 28, 3).to_string(), "2.28.3");
        assert_eq!(NcclVersion::new(2, 29, 0).code(), 22900);
        assert!(!NcclVersion::new(2, 28, 9).has_graph_usage_mode());
        assert!(NcclVersion::new(2, 29, 0).has_graph_usage_mode());
        assert!(NcclVersion::new(2, 30, 7).has_graph_usage_mode());
    }

    #[test]
    fn mode_route_selection() {
        let old = NcclVersion::new(2, 28, 3);
        let new = NcclVersion::new(2, 30, 7);
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::Two),
            ModeRoute::MixingEnv("1")
        );
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::One),
            ModeRoute::MixingEnv("0")
        );
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::Zero),
            ModeRoute::MixingEnv("0")
        );
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::Two).env_assignment(),
            Some(("NCCL_GRAPH_MIXING_SUPPORT", "1"))
        );
        assert_eq!(
            ModeRoute::select(new, GraphUsageMode::One),
            ModeRoute::ConfigField(GraphUsageMode::One)
        );
        assert_eq!(
            ModeRoute::select(new, GraphUsageMode::One).env_assignment(),
            None
        );
        assert_eq!(
            ModeRoute::MixingEnv("0").to_string(),
            "NCCL_GRAPH_MIXING_SUPPORT=0"
        );
        assert_eq!(
            ModeRoute::ConfigField(GraphUsageMode::Two).to_string(),
            "ncclConfig_t.graphUsageMode=2"
        );
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

    #[test]
    fn candidates_order() {
        assert_eq!(
            nccl_candidates(None),
            [
                "libnccl.so.2",
                "libnccl.so",
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
            ]
        );
        assert_eq!(
            nccl_candidates(Some("/opt/nccl/lib/libnccl.so.2"))[0],
            "/opt/nccl/lib/libnccl.so.2"
        );
        assert_eq!(nccl_candidates(Some("libnccl.so.2")).len(), 3);
        assert_eq!(nccl_candidates(Some("  ")).len(), 3);
    }

    #[test]
    fn maps_parsing() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f02-7f03 r-xp 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3\n\
                    7f04-7f05 rw-p 00000000 00:00 0\n";
        assert_eq!(
            mapped_path(maps, "libnccl").as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3")
        );
        assert_eq!(mapped_path(maps, "libcupti"), None);
    }

    #[test]
    fn rank_detection() {
        assert_eq!(detect_rank(&env(&[])).unwrap(), RankInfo::single());
        let r = detect_rank(&env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "3"),
        ]))
        .unwrap();
        assert_eq!(
            (r.rank, r.world, r.local_rank, r.source),
            (3, 8, Some(3), "torchrun")
        );
        let r = detect_rank(&env(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "16"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "5"),
        ]))
        .unwrap();
        assert_eq!(
            (r.rank, r.world, r.local_rank, r.source),
            (5, 16, Some(5), "openmpi")
        );
        let r = detect_rank(&env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")])).unwrap();
        assert_eq!(
            (r.rank, r.world, r.local_rank, r.source),
            (1, 2, None, "slurm")
        );
        // torchrun wins over slurm when both are present.
        let r = detect_rank(&env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
        ]))
        .unwrap();
        assert_eq!(r.source, "torchrun");
        // RANK without WORLD_SIZE is ignored.
        assert_eq!(
            detect_rank(&env(&[("RANK", "1")])).unwrap(),
            RankInfo::single()
        );
        assert!(detect_rank(&env(&[("RANK", "8"), ("WORLD_SIZE", "8")])).is_err());
        assert!(detect_rank(&env(&[("RANK", "x"), ("WORLD_SIZE", "8")])).is_err());
        assert!(detect_rank(&env(&[("RANK", "0"), ("WORLD_SIZE", "0")])).is_err());
    }

    #[test]
    fn describe_strings() {
        let v = NcclVersion::new(2, 28, 3);
        let p = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";
        assert_eq!(
            nccl_describe(
                v,
                p,
                &RankInfo::single(),
                GraphUsageMode::Two,
                ModeRoute::select(v, GraphUsageMode::Two)
            ),
            "nccl 2.28.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2), R=1, graph usage mode 2 via NCCL_GRAPH_MIXING_SUPPORT=1: one-rank shortcut, no strong-stream nodes (graph usage mode 2 has no effect)"
        );
        let info = RankInfo {
            rank: 2,
            world: 8,
            local_rank: Some(2),
            source: "torchrun",
        };
        assert_eq!(
            nccl_describe(
                v,
                p,
                &info,
                GraphUsageMode::One,
                ModeRoute::select(v, GraphUsageMode::One)
            ),
            "nccl 2.28.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2), R=8, rank 2 (torchrun), graph usage mode 1 via NCCL_GRAPH_MIXING_SUPPORT=0"
        );
        let v2 = NcclVersion::new(2, 30, 7);
        assert!(
            nccl_describe(
                v2,
                p,
                &info,
                GraphUsageMode::Two,
                ModeRoute::select(v2, GraphUsageMode::Two)
            )
            .ends_with("via ncclConfig_t.graphUsageMode=2")
        );
    }

    #[test]
    fn id_file_roundtrip_and_staleness() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("id");
        let mut id = NcclUniqueId { internal: [0; 128] };
        for (i, b) in id.internal.iter_mut().enumerate() {
            *b = i as u8;
        }
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        assert_eq!(read_id_file(&path, long_ago), None);
        write_id_file(&path, &id).unwrap();
        assert_eq!(read_id_file(&path, long_ago), Some(id));
        // A file older than `not_before` is stale.
        let future = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(read_id_file(&path, future), None);
        // A truncated file is not read.
        std::fs::write(&path, b"GSNCCLID123").unwrap();
        assert_eq!(read_id_file(&path, long_ago), None);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
