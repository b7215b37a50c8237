//! The result layer: every CUPTI call the recorder makes, as a safe method on [`Cupti`] that
//! returns `Result<_, CuptiError>` (as cudarc's `result` module does over its `sys`).
//!
//! `sys` (bindgen) → `loader` (the library resolved) → this layer → the recorder and its
//! callbacks, which hold no `unsafe`. The calls that take handles CUPTI gave a callback (graph
//! nodes, graphs, executable graphs) are `unsafe fn`s here: only `params`, where those handles
//! are known to be alive, calls them.

use super::error::CuptiError;
use super::loader::Cupti;
use super::sys;

/// A CUPTI subscriber, as a plain value the callbacks can keep in an atomic. It names a live
/// subscriber from [`Cupti::subscribe`] until that [`Subscriber`] unsubscribes; CUPTI checks
/// the handles it is given and answers a stale one with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SubscriberHandle(usize);

impl SubscriberHandle {
    /// The bits to keep in an `AtomicUsize`.
    pub fn to_bits(self) -> usize {
        self.0
    }

    /// A handle kept with [`SubscriberHandle::to_bits`].
    pub fn from_bits(bits: usize) -> SubscriberHandle {
        SubscriberHandle(bits)
    }

    fn raw(self) -> sys::CUpti_SubscriberHandle {
        self.0 as sys::CUpti_SubscriberHandle
    }
}

/// The recorder's subscription: unsubscribes when dropped (or explicitly, to hear whether it
/// worked).
#[derive(Debug)]
pub(crate) struct Subscriber {
    cupti: &'static Cupti,
    handle: SubscriberHandle,
    subscribed: bool,
}

impl Subscriber {
    pub fn handle(&self) -> SubscriberHandle {
        self.handle
    }

    /// `cuptiUnsubscribe`.
    pub fn unsubscribe(mut self) -> Result<(), CuptiError> {
        self.subscribed = false;
        self.cupti.unsubscribe(self.handle)
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if self.subscribed {
            let _ = self.cupti.unsubscribe(self.handle);
        }
    }
}

/// The subscriber callback's C type.
pub(crate) type CallbackFn = unsafe extern "C" fn(
    userdata: *mut std::ffi::c_void,
    domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    data: *const std::ffi::c_void,
);

impl Cupti {
    /// `cuptiSubscribe_v2` where this CUPTI has it (it names a competing subscriber), else
    /// `cuptiSubscribe`. Fails with [`CuptiError::MultipleSubscribers`] under another profiler.
    pub(crate) fn subscribe(&'static self, callback: CallbackFn) -> Result<Subscriber, CuptiError> {
        let api = self.raw();
        let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
        let subscribed = |handle: sys::CUpti_SubscriberHandle| Subscriber {
            cupti: self,
            handle: SubscriberHandle(handle as usize),
            subscribed: true,
        };
        #[cfg(cupti_subscribe_v2)]
        if self.has_subscribe_v2() {
            let name = c"gapscope";
            let mut holder = [0 as std::ffi::c_char; 256];
            let mut params = sys::CUpti_SubscriberParams {
                // CUpti_SubscriberParams_STRUCT_SIZE: up to the end of the last field.
                structSize: std::mem::offset_of!(sys::CUpti_SubscriberParams, oldSubscriberSize)
                    + std::mem::size_of::<usize>(),
                subscriberName: name.as_ptr(),
                oldSubscriberName: holder.as_mut_ptr(),
                oldSubscriberSize: holder.len(),
            };
            // SAFETY: resolved at load; all pointers are valid for the call; CUPTI copies the
            // name and writes at most `oldSubscriberSize` bytes into `holder`.
            let rc = unsafe {
                api.cuptiSubscribe_v2(
                    &mut handle,
                    Some(callback),
                    std::ptr::null_mut(),
                    &mut params,
                )
            };
            if rc == sys::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
                *holder.last_mut().expect("non-empty") = 0;
                // SAFETY: `holder` is NUL-terminated (its last byte is 0).
                let name = unsafe { std::ffi::CStr::from_ptr(holder.as_ptr()) }
                    .to_string_lossy()
                    .trim()
                    .to_string();
                return Err(CuptiError::MultipleSubscribers {
                    holder: (!name.is_empty()).then_some(name),
                });
            }
            self.check("cuptiSubscribe_v2", rc)?;
            return Ok(subscribed(handle));
        }
        // SAFETY: resolved at load; `handle` is a valid out-pointer; the callback is static.
        let rc = unsafe { api.cuptiSubscribe(&mut handle, Some(callback), std::ptr::null_mut()) };
        if rc == sys::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
            return Err(CuptiError::MultipleSubscribers { holder: None });
        }
        self.check("cuptiSubscribe", rc)?;
        Ok(subscribed(handle))
    }

    fn unsubscribe(&self, subscriber: SubscriberHandle) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; CUPTI checks the handle.
        let rc = unsafe { self.raw().cuptiUnsubscribe(subscriber.raw()) };
        self.check("cuptiUnsubscribe", rc)
    }

    /// `cuptiEnableCallback`: one callback of `subscriber` on or off.
    pub(crate) fn enable_callback(
        &self,
        subscriber: SubscriberHandle,
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
        on: bool,
    ) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; plain values, and CUPTI checks the subscriber.
        let rc = unsafe {
            self.raw()
                .cuptiEnableCallback(u32::from(on), subscriber.raw(), domain, cbid)
        };
        self.check("cuptiEnableCallback", rc)
    }

    /// `cuptiEnableDomain`: every callback of a domain on or off.
    pub(crate) fn enable_domain(
        &self,
        subscriber: SubscriberHandle,
        domain: sys::CUpti_CallbackDomain,
        on: bool,
    ) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; plain values, and CUPTI checks the subscriber.
        let rc = unsafe {
            self.raw()
                .cuptiEnableDomain(u32::from(on), subscriber.raw(), domain)
        };
        self.check("cuptiEnableDomain", rc)
    }

    /// `cuptiActivityEnable` (`on`) or `cuptiActivityDisable`.
    pub(crate) fn enable_kind(
        &self,
        kind: sys::CUpti_ActivityKind,
        on: bool,
    ) -> Result<(), CuptiError> {
        if on {
            // SAFETY: resolved at load; a plain enum value.
            let rc = unsafe { self.raw().cuptiActivityEnable(kind) };
            self.check("cuptiActivityEnable", rc)
        } else {
            // SAFETY: resolved at load; a plain enum value.
            let rc = unsafe { self.raw().cuptiActivityDisable(kind) };
            self.check("cuptiActivityDisable", rc)
        }
    }

    /// `cuptiActivityEnable{Runtime,Driver}Api`: whether one API call keeps activity records;
    /// `None` when this CUPTI cannot choose per call (see [`Cupti::api_filter`]).
    pub(crate) fn enable_api_record(
        &self,
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
        on: bool,
    ) -> Option<Result<(), CuptiError>> {
        let filter = self.api_filter()?;
        let (enable, call) = if domain == sys::CUPTI_CB_DOMAIN_RUNTIME_API {
            (filter.runtime, "cuptiActivityEnableRuntimeApi")
        } else {
            (filter.driver, "cuptiActivityEnableDriverApi")
        };
        // SAFETY: resolved from this libcupti with the C signature; plain values.
        let rc = unsafe { enable(cbid, u8::from(on)) };
        Some(self.check(call, rc))
    }

    /// `cuptiGetTimestamp`: now, in ns, on the clock of the activity records.
    pub(crate) fn timestamp(&self) -> Result<u64, CuptiError> {
        let mut at = 0u64;
        // SAFETY: resolved at load; writes one u64 through a valid pointer.
        let rc = unsafe { self.raw().cuptiGetTimestamp(&mut at) };
        self.check("cuptiGetTimestamp", rc).map(|()| at)
    }

    /// `cuptiSetThreadIdType(SYSTEM)`: records carry the OS thread ids.
    pub(crate) fn use_system_thread_ids(&self) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; a plain enum value.
        let rc = unsafe {
            self.raw()
                .cuptiSetThreadIdType(sys::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        };
        self.check("cuptiSetThreadIdType(SYSTEM)", rc)
    }

    /// `cuptiActivityRegisterCallbacks`: the functions CUPTI asks for buffers and hands
    /// completed ones to. They must stay valid for the whole process (CUPTI keeps them).
    pub(crate) fn register_buffer_callbacks(
        &self,
        requested: sys::CUpti_BuffersCallbackRequestFunc,
        completed: sys::CUpti_BuffersCallbackCompleteFunc,
    ) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; the callbacks have the C signatures CUPTI expects.
        let rc = unsafe {
            self.raw()
                .cuptiActivityRegisterCallbacks(requested, completed)
        };
        self.check("cuptiActivityRegisterCallbacks", rc)
    }

    /// `cuptiActivityEnableLatencyTimestamps`.
    pub(crate) fn enable_latency_timestamps(&self, on: bool) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; a plain flag.
        let rc = unsafe {
            self.raw()
                .cuptiActivityEnableLatencyTimestamps(u8::from(on))
        };
        self.check("cuptiActivityEnableLatencyTimestamps", rc)
    }

    /// `cuptiActivityEnableCudaEventDeviceTimestamps(1)`; `None` where this CUPTI (or the
    /// bindings it was built with) lacks it.
    pub(crate) fn enable_event_device_timestamps(&self) -> Option<Result<(), CuptiError>> {
        #[cfg(cupti_event_device_timestamps)]
        if self.has_event_device_timestamps() {
            // SAFETY: resolved (checked just above); a plain flag.
            let rc = unsafe { self.raw().cuptiActivityEnableCudaEventDeviceTimestamps(1) };
            return Some(self.check("cuptiActivityEnableCudaEventDeviceTimestamps(1)", rc));
        }
        None
    }

    /// `cuptiActivityFlushAll(flag)`. Completed buffers come back through the registered buffer
    /// callback on this thread: the caller must hold no lock that callback takes.
    pub(crate) fn flush_all(&self, flag: u32) -> Result<(), CuptiError> {
        // SAFETY: resolved at load; a plain flag.
        let rc = unsafe { self.raw().cuptiActivityFlushAll(flag) };
        self.check("cuptiActivityFlushAll", rc)
    }

    /// `cuptiActivityGetNumDroppedRecords` of the global buffers (it resets on read).
    pub(crate) fn dropped_records(&self) -> Result<usize, CuptiError> {
        let mut n = 0usize;
        // SAFETY: resolved at load; null context / stream 0 select the global buffers.
        let rc = unsafe {
            self.raw()
                .cuptiActivityGetNumDroppedRecords(std::ptr::null_mut(), 0, &mut n)
        };
        self.check("cuptiActivityGetNumDroppedRecords", rc)
            .map(|()| n)
    }

    /// `cuptiGetGraphNodeId`.
    ///
    /// # Safety
    /// `node` is a graph node alive for the call (one a resource callback was given).
    pub(crate) unsafe fn graph_node_id(&self, node: sys::CUgraphNode) -> Result<u64, CuptiError> {
        let mut id = 0u64;
        // SAFETY: resolved at load; `node` is alive (the caller's contract).
        let rc = unsafe { self.raw().cuptiGetGraphNodeId(node, &mut id) };
        self.check("cuptiGetGraphNodeId", rc).map(|()| id)
    }

    /// `cuptiGetGraphId`.
    ///
    /// # Safety
    /// `graph` is a graph alive for the call (one a resource callback was given).
    pub(crate) unsafe fn graph_id(&self, graph: sys::CUgraph) -> Result<u32, CuptiError> {
        let mut id = 0u32;
        // SAFETY: resolved at load; `graph` is alive (the caller's contract).
        let rc = unsafe { self.raw().cuptiGetGraphId(graph, &mut id) };
        self.check("cuptiGetGraphId", rc).map(|()| id)
    }

    /// `cuptiGetGraphExecId`.
    ///
    /// # Safety
    /// `exec` is an executable graph alive for the call (one a resource callback was given).
    pub(crate) unsafe fn graph_exec_id(&self, exec: sys::CUgraphExec) -> Result<u32, CuptiError> {
        let mut id = 0u32;
        // SAFETY: resolved at load; `exec` is alive (the caller's contract).
        let rc = unsafe { self.raw().cuptiGetGraphExecId(exec, &mut id) };
        self.check("cuptiGetGraphExecId", rc).map(|()| id)
    }
}
