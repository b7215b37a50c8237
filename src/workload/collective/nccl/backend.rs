//! The real `ncclAllGather` backend ([`NcclAllGather`]): one communicator per graph usage
//! mode, the mode routed to NCCL as [`ModeRoute`] says.
#![forbid(unsafe_code)]

use super::ffi::{self, Comm, load_nccl};
use super::rank::{ID_FILE_ENV, RankInfo, detect_rank_from_env, exchange_unique_id};
use super::version::{ModeRoute, NcclVersion};
use crate::workload::collective::{
    Backend, GraphUsageMode, LibraryCallHook, RoutingAllGather, WorkloadError, open_library_call,
};
use crate::workload::device::raw_ptr;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Library call of the NCCL backend.
pub const NCCL_LIBRARY_CALL: &str = "ncclAllGather";

/// Communicators this process has created with a shared unique-id file.
static COMMUNICATORS_MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// NCCL_GRAPH_MIXING_SUPPORT is read once per process: remember what we set.
static MIXING_ENV_SET: Mutex<Option<&'static str>> = Mutex::new(None);

/// Applies the route's environment assignment; returns a note when it replaced a different
/// value the user had set. Errors when this process already set another value (NCCL has
/// cached the first one).
fn apply_env_route(route: ModeRoute) -> Result<Option<String>, WorkloadError> {
    let Some((name, value)) = route.env_assignment() else {
        return Ok(None);
    };
    let mut set = MIXING_ENV_SET.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(prev) = *set {
        if prev != value {
            return Err(WorkloadError::Config(format!(
                "{name} was already set to {prev} in this process and NCCL reads it once: create communicators of different graph usage modes in separate processes"
            )));
        }
        return Ok(None);
    }
    let before = std::env::var(name).ok();
    ffi::set_env_before_nccl_init(name, value);
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
    lib: &'static ffi::NcclLib,
    /// Dropped after `Drop::drop` made `ctx` current (fields drop after it).
    comm: Comm,
    ctx: Arc<CudaContext>,
    info: RankInfo,
    mode: GraphUsageMode,
    route: ModeRoute,
    env_note: Option<String>,
    hook: Option<LibraryCallHook>,
}

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
    ) -> Result<NcclAllGather, WorkloadError> {
        let lib = load_nccl()?;
        let mut route = ModeRoute::select(lib.version, mode);
        if matches!(route, ModeRoute::ConfigField(_)) && !lib.has_init_rank_config() {
            route = ModeRoute::MixingEnv(mode.mixing_env_value());
        }
        // Before any NCCL call that may initialise NCCL's parameters.
        let env_note = apply_env_route(route)?;
        ctx.bind_to_thread()
            .map_err(|e| WorkloadError::cuda("cuCtxSetCurrent", e))?;
        let id = if info.world == 1 {
            lib.unique_id()?
        } else {
            let path = crate::settings::Setting::NcclIdFile.read().ok_or_else(|| {
                WorkloadError::Config(format!(
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
        let config_mode = match route {
            ModeRoute::ConfigField(m) => Some(m),
            ModeRoute::MixingEnv(_) => None,
        };
        let comm = lib.init_comm(info.world, id, info.rank, config_mode)?;
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

    /// [`Self::new`] with rank and world from the launcher's environment ([`super::rank::detect_rank`]).
    pub fn from_env(
        ctx: &Arc<CudaContext>,
        mode: GraphUsageMode,
    ) -> Result<NcclAllGather, WorkloadError> {
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
        // ncclCommDestroy (when `comm` drops, right after this) needs the device's context.
        let _ = self.ctx.bind_to_thread();
    }
}

impl RoutingAllGather for NcclAllGather {
    fn all_gather(
        &mut self,
        stream: &Arc<CudaStream>,
        send: &CudaSlice<u8>,
        recv: &mut CudaSlice<u8>,
        _capturing: bool,
    ) -> Result<(), WorkloadError> {
        let bytes = send.len();
        if recv.len() < bytes * self.info.world {
            return Err(WorkloadError::Config(format!(
                "ncclAllGather: recv {} bytes, needs ≥ {} ({} ranks × {bytes})",
                recv.len(),
                bytes * self.info.world,
                self.info.world
            )));
        }
        let send_ptr = raw_ptr(send, stream)?;
        let recv_ptr = raw_ptr(recv, stream)?;
        let _call = open_library_call(&self.hook, NCCL_LIBRARY_CALL);
        self.comm.all_gather(send_ptr, recv_ptr, bytes, stream)
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

    fn library_call_name(&self) -> &'static str {
        NCCL_LIBRARY_CALL
    }

    fn set_library_call_hook(&mut self, hook: Option<LibraryCallHook>) {
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
}
