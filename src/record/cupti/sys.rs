//! Raw CUPTI bindings: bindgen output, nothing else (see build.rs for where it comes from).
//!
//! Functions are not linked; [`CuptiLib`] is a table of pointers filled at run time by
//! `super::loader`.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    unused_imports,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]

include!(concat!(env!("OUT_DIR"), "/cupti_bindings.rs"));

/// The kernel record CONCURRENT_KERNEL delivers for the CUPTI version the bindings were made
/// from. Every field the recorder reads sits at the same offset in Kernel9, 10 and 11.
#[cfg(cupti_kernel = "11")]
pub type ActivityKernel = CUpti_ActivityKernel11;
#[cfg(cupti_kernel = "10")]
pub type ActivityKernel = CUpti_ActivityKernel10;
#[cfg(cupti_kernel = "9")]
pub type ActivityKernel = CUpti_ActivityKernel9;

/// Where the bindings came from ("committed bindings/cupti_13_0.rs" or "generated from ...").
pub const BINDINGS_ORIGIN: &str = env!("GAPSCOPE_CUPTI_BINDINGS");
