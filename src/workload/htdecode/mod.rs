//! The HT-decode workload: nccl_ep's `ncclEpUpdateHandle` + dispatch + combine for one rank,
//! as CUDA kernels (`kernels/ht_decode.cu`) compiled at run time by NVRTC.
//!
//! One step, enqueued on one stream, capturable in a CUDA graph (no allocation, no
//! synchronisation, no event inside the enqueue methods):
//!
//! 1. [`HtDecode::prepare`]: memset of the preprocessing block to 0, memset of the
//!    sparse-to-dense map to 0xFF, `convert_topk_to_routing_map`;
//! 2. the routing all-gather of [`HtDecode::routing_map`] into [`HtDecode::gathered_mut`]
//!    (`ranks` × [`HtDecode::routing_map_bytes_per_rank`] bytes, rank-major) by a collective
//!    backend, or [`HtDecode::emulate_all_gather`] on one GPU;
//! 3. [`HtDecode::after_gather`]: `preprocess_metadata`, `dispatch`, `expert_standin`
//!    (optional), `combine`.
//!
//! Inputs come from a seeded RNG per rank ([`reference::generate_inputs`]); every rank of a
//! run must use the same [`HtDecodeConfig::seed`], so that the gathered maps are the ones
//! [`reference::reference_all_gather`] rebuilds.
//!
//! The device buffers are allocated with cudarc's event tracking switched off, so no cudarc
//! call adds event records or waits around our launches (they would show up as extra nodes
//! and gaps in the very traces this crate analyses). The price: ordering between streams is
//! the caller's job, as with plain CUDA.
//!
//! Correctness on a GPU: `cargo test --release ht_decode -- --nocapture`, or
//! [`run_correctness_check`] from the release binary (no Rust toolchain needed).
//!
//! Files, each using only those above it: `config` (shape, block layout, errors) →
//! [`reference`](mod@reference) (the CPU reference) → `step` (the device step) → `check` (device against
//! reference).
#![forbid(unsafe_code)]

mod check;
mod config;
pub mod reference;
mod step;

pub use check::{CheckError, NoCuda, cuda_available, run_correctness_check};
pub use config::{BlockLayout, HtDecodeConfig, HtDecodeError, MAX_TOP_K};
pub use step::{
    HtDecode, KERNEL_SOURCE, POISON_BYTE, compile_kernels, kernel_names, nvrtc_available,
    nvrtc_targets,
};
