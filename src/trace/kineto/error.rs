//! Why an event, or the trace as a whole, cannot be imported: each displays as the message the
//! import error shows after the file's name ([`super::ImportError::Malformed`]).
#![forbid(unsafe_code)]

use crate::trace::InvalidTrace;

/// An event that cannot be imported. `what` is the event's category as Kineto writes it
/// (`kernel`, `gpu_memcpy`, …); `key` the field or `args` key at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum EventError {
    #[error("{what} event without \"name\"")]
    NoName { what: &'static str },
    #[error("complete (\"X\") event without \"{key}\"")]
    NoTime { key: &'static str },
    #[error("\"{what}\" {us} µs overflows 64-bit nanoseconds")]
    TimeOverflows { what: &'static str, us: u64 },
    #[error("\"{what}\" {us} µs is not a non-negative time that fits in 64-bit nanoseconds")]
    TimeOutOfRange { what: &'static str, us: f64 },
    #[error("\"ts\" + \"dur\" overflows 64-bit nanoseconds")]
    EndOverflows,
    #[error("{what} event: args \"{key}\" is not a non-negative integer")]
    NotAnInteger {
        what: &'static str,
        key: &'static str,
    },
    #[error("{what} event: args \"{key}\" {value} does not fit 32 bits")]
    Over32Bits {
        what: &'static str,
        key: &'static str,
        value: u64,
    },
    #[error("{what} event without a non-negative integer args \"{key}\"")]
    RequiredArg {
        what: &'static str,
        key: &'static str,
    },
    /// A number whose text breaks JSON's grammar.
    #[error("{0}")]
    Number(&'static str),
    #[error("invalid string: {0}")]
    InvalidString(String),
    #[error("a string is not valid UTF-8")]
    NotUtf8,
}

/// A document that was read whole yet is no usable trace.
#[derive(Debug, thiserror::Error)]
pub(super) enum UnusableTrace {
    #[error("no \"traceEvents\" array")]
    NoTraceEvents,
    #[error(
        "MTIA device activity ({events} \"mtia_runtime\"/\"mtia_ccp_events\" events) and no CUDA \
         GPU activity: MTIA traces are not supported (gapscope reads CUDA GPU traces)"
    )]
    MtiaOnly { events: u64 },
    #[error(
        "no GPU activity (no \"kernel\", \"gpu_memcpy\" or \"gpu_memset\" events): profile with \
         ProfilerActivity.CUDA"
    )]
    NoGpuActivity,
    #[error(transparent)]
    Invalid(#[from] InvalidTrace),
}
