//! CUPTI's activity records, read: the one place that casts a record to the struct of the
//! kind it announces. Fields are read one by one with unaligned reads, so a record of an older
//! layout (Kernel9 under Kernel10 bindings) is never read past its end. [`read`] turns one record into an [`Activity`] of plain values, which
//! `decode` stores without touching CUPTI's memory again.

use super::sys;
use crate::trace::{ApiDomain, EventRecord, MemOp};
use std::ffi::CStr;

/// One runtime or driver API call as CUPTI reported it (from its activity record, or from its
/// enter and exit callbacks).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ApiCallSeen {
    pub domain: ApiDomain,
    pub cbid: u32,
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    pub thread: u32,
    /// Its `cudaError_t`/`CUresult`.
    pub returned: u32,
}

/// A KERNEL or CONCURRENT_KERNEL record; its name borrows CUPTI's buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelRecord<'a> {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    pub name: Option<&'a CStr>,
    pub graph: u32,
    pub node: u64,
}

/// A SYNCHRONIZATION record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncRecord {
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    /// `CUpti_ActivitySynchronizationType`.
    pub sync_type: u32,
    pub stream: u32,
    pub event: u32,
}

/// Half of an NVTX range: its start (with the name) or its end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkerHalf<'a> {
    pub flags: u32,
    pub id: u32,
    pub timestamp: u64,
    pub name: Option<&'a CStr>,
    pub thread: u32,
}

/// One activity record's fields that the trace keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Activity<'a> {
    Kernel(KernelRecord<'a>),
    Memcpy {
        /// Its `kind` is left 0: the store names it from `copy_kind`.
        op: MemOp,
        copy_kind: u32,
    },
    /// Its `kind` is left 0: the store names it.
    Memset(MemOp),
    Api(ApiCallSeen),
    Sync(SyncRecord),
    Event(EventRecord),
    Marker(MarkerHalf<'a>),
    /// A kind the recorder did not enable.
    Other,
}

/// Reads field `$f` of the record at `$p` (records may be packed: read unaligned).
macro_rules! field {
    ($p:expr, $f:ident) => {
        std::ptr::read_unaligned(&raw const (*$p).$f)
    };
}

/// The trace's [`MemOp`] of a MEMCPY or MEMSET record at `$m`, its kind not yet named.
macro_rules! mem_record {
    ($m:expr) => {
        MemOp {
            start: field!($m, start),
            end: field!($m, end),
            device: field!($m, deviceId),
            stream: field!($m, streamId),
            corr: field!($m, correlationId),
            bytes: field!($m, bytes),
            kind: 0,
            graph: field!($m, graphId),
            node: field!($m, graphNodeId),
        }
    };
}

/// A record's name: `None` when null.
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for `'a`.
unsafe fn name<'a>(p: *const std::ffi::c_char) -> Option<&'a CStr> {
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// Reads one activity record.
///
/// # Safety
/// `rec` points to a complete CUPTI activity record of the kind its first field announces
/// (as `cuptiActivityGetNextRecord` returns them), alive for `'a`; a kernel or marker record's
/// `name` is null or a NUL-terminated string alive for `'a`.
pub(crate) unsafe fn read<'a>(rec: *const sys::CUpti_Activity) -> Activity<'a> {
    // SAFETY: every read below is a field of the struct of the kind the record announces
    // (the caller's contract; whole block).
    unsafe {
        let kind = field!(rec, kind);
        match kind {
            sys::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL | sys::CUPTI_ACTIVITY_KIND_KERNEL => {
                let k = rec as *const sys::ActivityKernel;
                Activity::Kernel(KernelRecord {
                    start: field!(k, start),
                    end: field!(k, end),
                    device: field!(k, deviceId),
                    stream: field!(k, streamId),
                    corr: field!(k, correlationId),
                    name: name(field!(k, name)),
                    graph: field!(k, graphId),
                    node: field!(k, graphNodeId),
                })
            }
            sys::CUPTI_ACTIVITY_KIND_MEMCPY => {
                let m = rec as *const sys::CUpti_ActivityMemcpy6;
                Activity::Memcpy {
                    op: mem_record!(m),
                    copy_kind: u32::from(field!(m, copyKind)),
                }
            }
            sys::CUPTI_ACTIVITY_KIND_MEMSET => {
                let m = rec as *const sys::CUpti_ActivityMemset4;
                Activity::Memset(mem_record!(m))
            }
            sys::CUPTI_ACTIVITY_KIND_RUNTIME | sys::CUPTI_ACTIVITY_KIND_DRIVER => {
                let a = rec as *const sys::CUpti_ActivityAPI;
                Activity::Api(ApiCallSeen {
                    domain: if kind == sys::CUPTI_ACTIVITY_KIND_RUNTIME {
                        ApiDomain::Runtime
                    } else {
                        ApiDomain::Driver
                    },
                    cbid: field!(a, cbid),
                    start: field!(a, start),
                    end: field!(a, end),
                    corr: field!(a, correlationId),
                    thread: field!(a, threadId),
                    returned: field!(a, returnValue),
                })
            }
            sys::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => {
                let s = rec as *const sys::CUpti_ActivitySynchronization2;
                Activity::Sync(SyncRecord {
                    start: field!(s, start),
                    end: field!(s, end),
                    corr: field!(s, correlationId),
                    sync_type: field!(s, type_),
                    stream: field!(s, streamId),
                    event: field!(s, cudaEventId),
                })
            }
            sys::CUPTI_ACTIVITY_KIND_CUDA_EVENT => {
                let e = rec as *const sys::CUpti_ActivityCudaEvent2;
                Activity::Event(EventRecord {
                    device_ts: field!(e, deviceTimestamp),
                    corr: field!(e, correlationId),
                    stream: field!(e, streamId),
                    event: field!(e, eventId),
                })
            }
            sys::CUPTI_ACTIVITY_KIND_MARKER => {
                let m = rec as *const sys::CUpti_ActivityMarker2;
                let flags = field!(m, flags);
                // The name comes with the start record only.
                let starts = flags & sys::CUPTI_ACTIVITY_FLAG_MARKER_START != 0;
                Activity::Marker(MarkerHalf {
                    flags,
                    id: field!(m, id),
                    timestamp: field!(m, timestamp),
                    name: if starts { name(field!(m, name)) } else { None },
                    thread: if field!(m, objectKind) == sys::CUPTI_ACTIVITY_OBJECT_THREAD {
                        field!(m, objectId).pt.threadId
                    } else {
                        0
                    },
                })
            }
            _ => Activity::Other,
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Records a test made, read as CUPTI's would be.
    use super::*;

    /// The record structs [`read`] knows, each announcing its kind in its first field.
    pub trait Record {}
    impl Record for sys::ActivityKernel {}
    impl Record for sys::CUpti_ActivityMemcpy6 {}
    impl Record for sys::CUpti_ActivityMemset4 {}
    impl Record for sys::CUpti_ActivityAPI {}
    impl Record for sys::CUpti_ActivitySynchronization2 {}
    impl Record for sys::CUpti_ActivityCudaEvent2 {}
    impl Record for sys::CUpti_ActivityMarker2 {}

    /// Reads `r`, whose name pointers (if any) are null or strings that outlive the result.
    pub fn read<R: Record>(r: &R) -> Activity<'_> {
        // SAFETY: `r` is a whole record struct of a kind `read` knows (or announces another
        // kind, which reads as Other); names: the caller's word.
        unsafe { super::read(r as *const R as *const sys::CUpti_Activity) }
    }
}
