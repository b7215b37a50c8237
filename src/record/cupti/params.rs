//! What CUPTI passes to the subscriber callback, read: the one place that casts its callback
//! data and the API calls' parameter structs. [`entry`] is the callback CUPTI calls; it hands a
//! [`Handler`] safe views ([`ApiCallback`], [`NvtxCallback`], [`ResourceCallback`]) that live as
//! long as CUPTI's data does.
//!
//! Every view reads lazily: the subscriber callback runs on every enabled API call, so nothing
//! is read that the handler does not ask for.

use super::config::GRAPH_LAUNCH_CBIDS;
use super::error::CuptiError;
use super::loader::{Cupti, Driver};
use super::sys;
use std::ffi::{CStr, c_char, c_void};
use std::marker::PhantomData;

/// What the subscriber callback does with each kind of event.
pub(crate) trait Handler {
    fn api(call: &ApiCallback<'_>);
    fn nvtx(event: &NvtxCallback<'_>);
    fn resource(event: &ResourceCallback<'_>);
    /// A handler panicked (the panic was caught: it never unwinds into CUPTI).
    fn panicked();
}

/// The subscriber callback: views CUPTI's data by domain and hands it to `H`.
///
/// # Safety
/// Called by CUPTI only, with the data it documents for `domain` (null or alive for the call).
pub(crate) unsafe extern "C" fn entry<H: Handler>(
    _userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    data: *const c_void,
) {
    let r = std::panic::catch_unwind(|| match domain {
        sys::CUPTI_CB_DOMAIN_RUNTIME_API | sys::CUPTI_CB_DOMAIN_DRIVER_API => {
            // SAFETY: for API domains CUPTI passes a CUpti_CallbackData alive for this call.
            if let Some(data) = unsafe { (data as *const sys::CUpti_CallbackData).as_ref() } {
                H::api(&ApiCallback { domain, cbid, data });
            }
        }
        sys::CUPTI_CB_DOMAIN_RESOURCE => {
            // SAFETY: for the resource domain CUPTI passes a CUpti_ResourceData alive for this
            // call.
            let data = unsafe { (data as *const sys::CUpti_ResourceData).as_ref() };
            H::resource(&ResourceCallback { cbid, data });
        }
        sys::CUPTI_CB_DOMAIN_NVTX => {
            // SAFETY: for the NVTX domain CUPTI passes a CUpti_NvtxData alive for this call.
            if let Some(data) = unsafe { (data as *const NvtxData).as_ref() } {
                H::nvtx(&NvtxCallback { cbid, data });
            }
        }
        _ => {}
    });
    if r.is_err() {
        H::panicked();
    }
}

// ---------------------------------------------------------------------------------------------
// Runtime and driver API calls
// ---------------------------------------------------------------------------------------------

/// An API call's enter or exit callback.
pub(crate) struct ApiCallback<'a> {
    domain: sys::CUpti_CallbackDomain,
    cbid: u32,
    data: &'a sys::CUpti_CallbackData,
}

/// CUPTI's name of an API function: a global constant string (cupti_callbacks.h), kept as
/// CUPTI's pointer so that the hot path measures no string.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FunctionName(*const c_char);

impl FunctionName {
    /// The name's bytes; `None` when CUPTI gave none.
    pub fn to_bytes(self) -> Option<&'static [u8]> {
        // SAFETY: only CUPTI's functionName makes a FunctionName, a NUL-terminated string that
        // lives as long as libcupti, which is never unloaded.
        (!self.0.is_null()).then(|| unsafe { CStr::from_ptr(self.0) }.to_bytes())
    }
}

impl<'a> ApiCallback<'a> {
    pub fn domain(&self) -> sys::CUpti_CallbackDomain {
        self.domain
    }

    pub fn cbid(&self) -> u32 {
        self.cbid
    }

    /// The enter callback (else the exit).
    pub fn entering(&self) -> bool {
        self.data.callbackSite == sys::CUPTI_API_ENTER
    }

    pub fn correlation_id(&self) -> u32 {
        self.data.correlationId
    }

    pub fn function_name(&self) -> FunctionName {
        FunctionName(self.data.functionName)
    }

    /// The executable graph a graph launch is about to launch (`None` for other calls).
    pub fn launched_graph_exec(&self) -> Option<usize> {
        let params = self.data.functionParams;
        if params.is_null() || !GRAPH_LAUNCH_CBIDS.contains(&(self.domain, self.cbid)) {
            return None;
        }
        // SAFETY: every graph launch's parameter struct starts with the executable graph.
        Some(unsafe { *(params as *const usize) })
    }

    /// (waits on an external event, records an external event): the flags of a stream wait or
    /// event record; (false, false) for other calls.
    pub fn external_flags(&self) -> (bool, bool) {
        // SAFETY: functionParams is CUPTI's for this (domain, cbid).
        unsafe { external_flags(self.domain, self.cbid, self.data.functionParams) }
    }

    /// At exit, the call's status (`cudaError_t` or `CUresult`; 0 is success); 0 at enter.
    pub fn returned(&self) -> u32 {
        let value = self.data.functionReturnValue;
        if self.entering() || value.is_null() {
            return 0;
        }
        // SAFETY: at API exit CUPTI points functionReturnValue at the call's cudaError_t or
        // CUresult, both 32-bit.
        unsafe { *(value as *const u32) }
    }
}

/// External flags of the API call about to run, from its parameters.
///
/// # Safety
/// `params` is null or the `functionParams` CUPTI passed for this (domain, cbid).
unsafe fn external_flags(
    domain: sys::CUpti_CallbackDomain,
    cbid: u32,
    params: *const c_void,
) -> (bool, bool) {
    if params.is_null() {
        return (false, false);
    }
    // SAFETY (all arms): CUPTI's functionParams for this callback id points to the params
    // struct named after it in generated_cuda_{runtime_api_,}meta.h.
    unsafe {
        match (domain, cbid) {
            (
                sys::CUPTI_CB_DOMAIN_RUNTIME_API,
                sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
            ) => {
                let p = params as *const sys::cudaStreamWaitEvent_v3020_params;
                ((*p).flags & sys::cudaEventWaitExternal != 0, false)
            }
            (
                sys::CUPTI_CB_DOMAIN_RUNTIME_API,
                sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000,
            ) => {
                let p = params as *const sys::cudaStreamWaitEvent_ptsz_v7000_params;
                ((*p).flags & sys::cudaEventWaitExternal != 0, false)
            }
            (
                sys::CUPTI_CB_DOMAIN_RUNTIME_API,
                sys::CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010,
            ) => {
                let p = params as *const sys::cudaEventRecordWithFlags_v11010_params;
                (false, (*p).flags & sys::cudaEventRecordExternal != 0)
            }
            (
                sys::CUPTI_CB_DOMAIN_RUNTIME_API,
                sys::CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010,
            ) => {
                let p = params as *const sys::cudaEventRecordWithFlags_ptsz_v11010_params;
                (false, (*p).flags & sys::cudaEventRecordExternal != 0)
            }
            (sys::CUPTI_CB_DOMAIN_DRIVER_API, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent) => {
                let p = params as *const sys::cuStreamWaitEvent_params;
                ((*p).Flags & sys::CU_EVENT_WAIT_EXTERNAL != 0, false)
            }
            (
                sys::CUPTI_CB_DOMAIN_DRIVER_API,
                sys::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz,
            ) => {
                let p = params as *const sys::cuStreamWaitEvent_ptsz_params;
                ((*p).Flags & sys::CU_EVENT_WAIT_EXTERNAL != 0, false)
            }
            (
                sys::CUPTI_CB_DOMAIN_DRIVER_API,
                sys::CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags,
            ) => {
                let p = params as *const sys::cuEventRecordWithFlags_params;
                (false, (*p).flags & sys::CU_EVENT_RECORD_EXTERNAL != 0)
            }
            (
                sys::CUPTI_CB_DOMAIN_DRIVER_API,
                sys::CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz,
            ) => {
                let p = params as *const sys::cuEventRecordWithFlags_ptsz_params;
                (false, (*p).flags & sys::CU_EVENT_RECORD_EXTERNAL != 0)
            }
            _ => (false, false),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// NVTX
// ---------------------------------------------------------------------------------------------

/// `CUpti_NvtxData` (cupti_callbacks.h): what CUPTI passes with an NVTX callback.
#[repr(C)]
struct NvtxData {
    function_name: *const c_char,
    function_params: *const c_void,
    function_return_value: *const c_void,
}

/// NVTX callback ids (cupti_nvtx_cbid.h, stable since CUDA 10): pushes and the pop of the
/// default domain.
pub(crate) const NVTX_RANGE_PUSH_A: u32 = 8;
pub(crate) const NVTX_RANGE_PUSH_W: u32 = 9;
pub(crate) const NVTX_RANGE_PUSH_EX: u32 = 10;
pub(crate) const NVTX_RANGE_POP: u32 = 11;

/// The start of `nvtxEventAttributes_t` (nvToolsExt.h, version 2) up to its message.
#[repr(C)]
struct NvtxEventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_char,
}

/// `NVTX_MESSAGE_TYPE_ASCII`.
const NVTX_MESSAGE_TYPE_ASCII: i32 = 1;

// The C layouts read through these (nvToolsExt.h: NVTX_EVENT_ATTRIB_STRUCT_SIZE is 48, the
// message union at 40; cupti_callbacks.h: three pointers).
const _: () = assert!(std::mem::size_of::<NvtxEventAttributes>() == 48);
const _: () = assert!(std::mem::offset_of!(NvtxEventAttributes, message_type) == 32);
const _: () = assert!(std::mem::offset_of!(NvtxEventAttributes, message) == 40);
const _: () = assert!(std::mem::size_of::<NvtxData>() == 24);

/// An NVTX callback.
pub(crate) struct NvtxCallback<'a> {
    cbid: u32,
    data: &'a NvtxData,
}

impl<'a> NvtxCallback<'a> {
    pub fn cbid(&self) -> u32 {
        self.cbid
    }

    /// The ASCII message of a default-domain push, if it has one.
    pub fn pushed_message(&self) -> Option<&'a [u8]> {
        // SAFETY: function_params is CUPTI's for this NVTX callback id.
        unsafe { pushed_message(self.cbid, self.data.function_params) }
    }
}

/// The ASCII message of a default-domain push, if it has one.
///
/// # Safety
/// `params` is null or the `functionParams` CUPTI passed for NVTX callback `cbid`.
unsafe fn pushed_message<'a>(cbid: u32, params: *const c_void) -> Option<&'a [u8]> {
    if params.is_null() {
        return None;
    }
    let message = match cbid {
        // SAFETY: nvtxRangePushA_params is `{ const char *message; }`.
        NVTX_RANGE_PUSH_A => unsafe { *(params as *const *const c_char) },
        NVTX_RANGE_PUSH_EX => {
            // SAFETY: nvtxRangePushEx_params is `{ const nvtxEventAttributes_t *eventAttrib; }`.
            let attributes = unsafe { *(params as *const *const NvtxEventAttributes) };
            if attributes.is_null() {
                return None;
            }
            // SAFETY: the program passed a valid nvtxEventAttributes_t for this call.
            let a = unsafe { &*attributes };
            let whole = usize::from(a.size) >= std::mem::size_of::<NvtxEventAttributes>();
            if !whole || a.message_type != NVTX_MESSAGE_TYPE_ASCII {
                return None;
            }
            a.message
        }
        _ => return None,
    };
    // SAFETY: NVTX messages are NUL-terminated strings alive for the call.
    (!message.is_null()).then(|| unsafe { CStr::from_ptr(message) }.to_bytes())
}

// ---------------------------------------------------------------------------------------------
// Resources: contexts and graphs
// ---------------------------------------------------------------------------------------------

/// A resource callback (context creation, graph node and executable graph events).
pub(crate) struct ResourceCallback<'a> {
    cbid: u32,
    data: Option<&'a sys::CUpti_ResourceData>,
}

/// The resource callbacks whose descriptor is a `CUpti_GraphData`.
const GRAPH_CBIDS: [u32; 4] = [
    sys::CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
    sys::CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
    sys::CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_CREATED,
    sys::CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED,
];

/// A graph resource callback without CUPTI's data (never seen; noted in the trace).
#[derive(Debug)]
pub(crate) struct NoGraphData;

impl<'a> ResourceCallback<'a> {
    pub fn cbid(&self) -> u32 {
        self.cbid
    }

    /// Whether this is one of the graph events.
    pub fn is_graph_event(&self) -> bool {
        GRAPH_CBIDS.contains(&self.cbid)
    }

    /// The graph event's data; `None` when this is no graph event or CUPTI passed no data.
    pub fn graph(&self) -> Option<Result<GraphEvent<'a>, NoGraphData>> {
        let data = self.data.filter(|_| self.is_graph_event())?;
        let descriptor = data.resourceDescriptor as *const sys::CUpti_GraphData;
        // SAFETY: for graph callbacks resourceDescriptor is null or a CUpti_GraphData, alive
        // for the call.
        Some(match unsafe { descriptor.as_ref() } {
            Some(gd) => Ok(GraphEvent {
                data: *gd,
                _alive: PhantomData,
            }),
            None => Err(NoGraphData),
        })
    }
}

/// A graph node or executable graph event: its handles are alive while the callback runs.
pub(crate) struct GraphEvent<'a> {
    data: sys::CUpti_GraphData,
    _alive: PhantomData<&'a ()>,
}

impl GraphEvent<'_> {
    /// The node's id (node events).
    pub fn node_id(&self, cupti: &Cupti) -> Result<u64, CuptiError> {
        // SAFETY: the event's node is alive for the callback.
        unsafe { cupti.graph_node_id(self.data.node) }
    }

    /// The id of the node it now depends on (dependency events).
    pub fn dependency_id(&self, cupti: &Cupti) -> Result<u64, CuptiError> {
        // SAFETY: the event's dependency is alive for the callback.
        unsafe { cupti.graph_node_id(self.data.dependency) }
    }

    /// The id of the node it was cloned from (clone events).
    pub fn original_node_id(&self, cupti: &Cupti) -> Result<u64, CuptiError> {
        // SAFETY: the event's original node is alive for the callback.
        unsafe { cupti.graph_node_id(self.data.originalNode) }
    }

    /// The graph's id.
    pub fn graph_id(&self, cupti: &Cupti) -> Result<u32, CuptiError> {
        // SAFETY: the event's graph is alive for the callback.
        unsafe { cupti.graph_id(self.data.graph) }
    }

    /// The executable graph's id (executable graph events).
    pub fn exec_id(&self, cupti: &Cupti) -> Result<u32, CuptiError> {
        // SAFETY: the event's executable graph is alive for the callback.
        unsafe { cupti.graph_exec_id(self.data.graphExec) }
    }

    /// The executable graph's handle, as a key (what a graph launch's parameters carry).
    pub fn exec_handle(&self) -> usize {
        self.data.graphExec as usize
    }

    /// The node type CUPTI gives (0 for every node on CUDA 13.0: see
    /// [`GraphEvent::driver_node_type`]).
    pub fn cupti_node_type(&self) -> u32 {
        self.data.nodeType
    }

    /// `cuGraphNodeGetType` of the event's node; `Err` carries the `CUresult`.
    pub fn driver_node_type(&self, driver: &Driver) -> Result<u32, u32> {
        let mut ty: sys::CUgraphNodeType = 0;
        // SAFETY: the node is alive for the callback; the function pointer has
        // cuGraphNodeGetType's C signature and writes one enum through a valid pointer.
        let rc = unsafe { (driver.node_get_type)(self.data.node, &mut ty) };
        if rc == 0 { Ok(ty) } else { Err(rc as u32) }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Views over data a test made, as CUPTI would pass it.
    use super::*;

    /// An API callback over `data`, whose `functionParams` and `functionReturnValue` are null
    /// or point at live structs of the types CUPTI documents for (domain, cbid).
    pub fn api(
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
        data: &sys::CUpti_CallbackData,
    ) -> ApiCallback<'_> {
        ApiCallback { domain, cbid, data }
    }

    /// An NVTX callback `cbid` whose parameters are `nvtxRangePushA`'s, with `message`.
    pub fn nvtx(cbid: u32, message: &CStr, run: impl FnOnce(&NvtxCallback<'_>)) {
        let text = message.as_ptr();
        let data = NvtxData {
            function_name: std::ptr::null(),
            function_params: (&raw const text).cast(),
            function_return_value: std::ptr::null(),
        };
        run(&NvtxCallback { cbid, data: &data });
    }

    /// A frame's name where CUPTI gave none.
    pub fn no_name() -> FunctionName {
        FunctionName(std::ptr::null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_flags_read_the_wait_and_record_params() {
        let wait = sys::cudaStreamWaitEvent_v3020_params {
            stream: std::ptr::null_mut(),
            event: std::ptr::null_mut(),
            flags: sys::cudaEventWaitExternal,
        };
        let p = &wait as *const _ as *const c_void;
        // SAFETY: params of the matching struct type.
        let got = unsafe {
            external_flags(
                sys::CUPTI_CB_DOMAIN_RUNTIME_API,
                sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
                p,
            )
        };
        assert_eq!(got, (true, false));
        let rec = sys::cuEventRecordWithFlags_params {
            hEvent: std::ptr::null_mut(),
            hStream: std::ptr::null_mut(),
            flags: sys::CU_EVENT_RECORD_EXTERNAL,
        };
        // SAFETY: params of the matching struct type.
        let got = unsafe {
            external_flags(
                sys::CUPTI_CB_DOMAIN_DRIVER_API,
                sys::CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags,
                &rec as *const _ as *const c_void,
            )
        };
        assert_eq!(got, (false, true));
        // SAFETY: null params are never read.
        let none = unsafe { external_flags(sys::CUPTI_CB_DOMAIN_RUNTIME_API, 1, std::ptr::null()) };
        assert_eq!(none, (false, false));
    }

    #[test]
    fn nvtx_push_messages_are_read_from_a_and_ex_parameters() {
        let name = c"decode_step";
        let push_a = name.as_ptr();
        // SAFETY: params of nvtxRangePushA: a pointer to the message pointer.
        let got = unsafe { pushed_message(NVTX_RANGE_PUSH_A, (&raw const push_a).cast()) };
        assert_eq!(got, Some(&b"decode_step"[..]));

        let mut attributes = NvtxEventAttributes {
            version: 2,
            size: std::mem::size_of::<NvtxEventAttributes>() as u16,
            category: 0,
            color_type: 0,
            color: 0,
            payload_type: 0,
            reserved0: 0,
            payload: 0,
            message_type: NVTX_MESSAGE_TYPE_ASCII,
            message: name.as_ptr(),
        };
        let read = |a: &NvtxEventAttributes| {
            let p: *const NvtxEventAttributes = a;
            // SAFETY: params of nvtxRangePushEx: a pointer to the attributes pointer.
            unsafe { pushed_message(NVTX_RANGE_PUSH_EX, (&raw const p).cast()) }
        };
        assert_eq!(read(&attributes), Some(&b"decode_step"[..]));
        attributes.message_type = 3; // a registered string: no text to compare
        assert_eq!(read(&attributes), None);
        attributes.message_type = NVTX_MESSAGE_TYPE_ASCII;
        attributes.size = 32; // an older, shorter struct: the message is not there to read
        assert_eq!(read(&attributes), None);
        // SAFETY: null parameters are not read.
        assert_eq!(
            unsafe { pushed_message(NVTX_RANGE_PUSH_A, std::ptr::null()) },
            None
        );
    }
}
