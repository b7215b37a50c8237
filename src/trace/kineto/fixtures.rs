//! torch's events as written, in each layout torch writes them, for the tests of the general
//! reader (`scan`) and of the templates (`templates`).
#![forbid(unsafe_code)]

use super::scan::{RawEvent, ScanError, Scanner};

/// `text`'s first event, read by [`Scanner::event`] as the import reads it.
pub(super) fn event(text: &str) -> Result<RawEvent<'_>, ScanError> {
    let mut s = Scanner::new(text.as_bytes(), 0);
    let mut ev = RawEvent::default();
    s.event(&mut ev).map(|()| ev)
}

/// torch's events as `examples/gen_kineto.rs` writes them: a runtime call, its flow start,
/// a kernel, its flow end.
pub(super) const COMPACT: [&str; 4] = [
    r#"{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":4242,"tid":4242,"ts":1000.000,"dur":3.985,"args":{"External id":2,"cbid":211,"correlation":100}}"#,
    r#"{"ph":"s","id":100,"pid":4242,"tid":4242,"ts":1000.000,"cat":"ac2g","name":"ac2g"}"#,
    r#"{"ph":"X","cat":"kernel","name":"ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn","pid":0,"tid":7,"ts":1003.525,"dur":6.705,"args":{"External id":2,"queued":0,"device":0,"context":1,"stream":7,"correlation":100,"registers per thread":32,"shared memory":0,"grid":[2,1,1],"block":[128,1,1],"est. achieved occupancy %":0}}"#,
    r#"{"ph":"f","id":100,"pid":0,"tid":7,"ts":1003.525,"cat":"ac2g","name":"ac2g","bp":"e"}"#,
];

/// The events of [`COMPACT`] as libkineto lays them out (over several lines, spaces after
/// commas and colons).
pub(super) const LIBKINETO: [&str; 4] = [
    r##"{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": 1000.000, "dur": 3.985,
    "args": {
      "External id": 2,      "cbid": 211,      "correlation": 100
    }
  }"##,
    r##"{
    "ph": "s", "id": 100, "pid": 4242, "tid": 4242, "ts": 1000.000,
    "cat": "ac2g", "name": "ac2g"
  }"##,
    r##"{
    "ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "pid": 0, "tid": 7,
    "ts": 1003.525, "dur": 6.705,
    "args": {
      "External id": 2,      "queued": 0,      "device": 0,      "context": 1,      "stream": 7,      "correlation": 100,      "registers per thread": 32,      "shared memory": 0,      "grid": [2, 1, 1],      "block": [128, 1, 1],      "est. achieved occupancy %": 0
    }
  }"##,
    r##"{
    "ph": "f", "id": 100, "pid": 0, "tid": 7, "ts": 1003.525,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  }"##,
];

/// The events of [`COMPACT`] as Python's `json.dump` writes them (one line, `", "` and
/// `": "` between tokens), times as Python prints floats.
pub(super) const JSON_DUMP: [&str; 4] = [
    r##"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 1000.0, "dur": 3.985, "args": {"External id": 2, "cbid": 211, "correlation": 100}}"##,
    r##"{"ph": "s", "id": 100, "pid": 4242, "tid": 4242, "ts": 1000.0, "cat": "ac2g", "name": "ac2g"}"##,
    r##"{"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "pid": 0, "tid": 7, "ts": 1003.525, "dur": 6.705, "args": {"External id": 2, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 100, "registers per thread": 32, "shared memory": 0, "grid": [2, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 0}}"##,
    r##"{"ph": "f", "id": 100, "pid": 0, "tid": 7, "ts": 1003.525, "cat": "ac2g", "name": "ac2g", "bp": "e"}"##,
];

/// One event of each kind in `traces/torch-step-kineto-h200.json` (torch 2.x, H200), as
/// written there.
pub(super) const REAL: [&str; 12] = [
    r##"{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaStreamIsCapturing", "pid": 469, "tid": 469,
    "ts": 5095587836765.929, "dur": 3.752,
    "args": {
            "cbid": 317, "correlation": 9
    }
  }"##,
    r##"{
    "ph": "s", "id": 33, "pid": 469, "tid": 469, "ts": 5095587837374.958,
    "cat": "ac2g", "name": "ac2g"
  }"##,
    r##"{
    "ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "pid": 0, "tid": 7,
    "ts": 5095587837414.412, "dur": 10.240,
    "args": {
      "External id": 3,      "queued": 0, "device": 0, "context": 1,      "stream": 7, "correlation": 33,      "registers per thread": 121,      "shared memory": 12672,      "blocks per SM": 1.939394,      "warps per SM": 7.757576,      "grid": [8, 8, 4],      "block": [128, 1, 1],      "est. achieved occupancy %": 12
    }
  }"##,
    r##"{
    "ph": "f", "id": 9, "pid": 469, "tid": 469, "ts": 5095587836765.929,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  }"##,
    r##"{
    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
    "ts": 5095587837985.582, "dur": 1.152,
    "args": {
      "External id": 45,      "device": 0, "context": 1,      "stream": 7, "correlation": 126,      "bytes": 1048576, "memory bandwidth (GB/s)": 910.2222222222222
    }
  }"##,
    r##"{
    "ph": "X", "cat": "user_annotation", "name": "step", "pid": 469, "tid": 469,
    "ts": 5095587837002.975, "dur": 1046.265,
    "args": {
      "External id": 1,"Record function id": 0, "Ev Idx": 0
    }
  }"##,
    r##"{
    "ph": "X", "cat": "cpu_op", "name": "aten::matmul", "pid": 469, "tid": 469,
    "ts": 5095587837051.048, "dur": 385.646,
    "args": {
      "External id": 2,"Record function id": 0, "Sequence number": 0, "Fwd thread id": 0, "Ev Idx": 1
    }
  }"##,
    r##"{
    "ph": "X", "cat": "gpu_user_annotation", "name": "step", "pid": 0, "tid": 7,
    "ts": 5095587844191.717, "dur": 158.082,
    "args": {
      "External id": 1261
    }
  }"##,
    r##"{
    "ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
    "ts": 5095587834559.908, "dur": 2187.653
  }"##,
    r##"{
    "ph": "X", "cat": "Trace", "ts": 5095587834366.578, "dur": 11899.304,
    "pid": "Spans", "tid": "PyTorch Profiler",
    "name": "PyTorch Profiler (0)",
    "args": {
      "Op count": 0
    }
  }"##,
    r##"{
    "name": "process_name", "ph": "M", "ts": 5095587834440.340, "pid": 469, "tid": 0,
    "args": {
      "name": "python3"
    }
  }"##,
    r##"{
    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",
    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 5095587834366.578
  }"##,
];
