//! The real `ncclAllGather` backend and what it needs of NCCL.
//!
//! NCCL is opened with libloading here, not through cudarc: cudarc's loader looks for
//! `libnccl.so`, `libnccl.so.13`, `.12`, … but never `libnccl.so.2` (the name NCCL installs),
//! panics when it finds nothing, and its bindings assume one NCCL version's structs. We open
//! the first NCCL [`crate::library_search`] finds (`$NCCL_LIB`, pip's `nvidia-nccl-*` in the
//! Python environment, `LD_LIBRARY_PATH`, the toolkit, then `libnccl.so.2` / `libnccl.so` by
//! soname), resolve the file actually mapped (from `/proc/self/maps`), and call only `ncclGetVersion`, `ncclGetUniqueId`, `ncclCommInitRank`
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
//!
//! Files: [`ffi`] (the FFI leaf: loading NCCL, raw calls), `version` (versions and mode
//! routes), `rank` (rank detection, unique-id exchange), `backend` (the all-gather).
// Only `ffi` may hold `unsafe`: it allows it itself; the other files forbid it.
#![deny(unsafe_code)]

mod backend;
pub mod ffi;
mod rank;
mod version;

pub use backend::{NCCL_LIBRARY_CALL, NcclAllGather, nccl_describe};
pub use ffi::{NcclLib, NcclUniqueId, load_nccl};
pub use rank::{
    ID_FILE_ENV, ID_MAX_AGE_ENV, ID_TIMEOUT_ENV, RankInfo, detect_rank, detect_rank_from_env,
    exchange_unique_id, read_id_file, write_id_file,
};
pub use version::{ModeRoute, NcclVersion};
