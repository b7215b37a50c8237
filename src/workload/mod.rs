//! What runs on the GPU while gapscope records: the HT-decode workload and emu.cu's step, and
//! the routing all-gather they call (emulated or real NCCL). The experiment that runs them
//! (`gapscope run`'s sweep and its rank processes) is [`crate::experiment`].
//!
//! Files, roughly in the order the pipeline uses them:
//! * `cuda/` and `collective/nccl/ffi.rs`: the FFI leaves, the only files with `unsafe` (each allows it
//!   itself; every other file forbids it);
//! * [`device`]: driver / NVRTC checks and the device context; [`spin`]: emu.cu's kernels;
//! * [`collective`]: the all-gather trait, graph usage mode, backend kind, errors;
//!   [`collective::emulated`] and [`collective::nccl`]: its two backends;
//! * [`capture`]: graph capture and launches; [`htdecode`]: the HT-decode step and its CPU
//!   reference; [`emu`]: emu.cu's step, run cell by cell.
// The FFI leaves allow `unsafe` themselves; everything else here forbids it.
#![deny(unsafe_code)]

pub mod capture;
pub mod collective;
pub mod cuda;
pub mod device;
pub mod emu;
pub mod htdecode;
pub mod spin;
