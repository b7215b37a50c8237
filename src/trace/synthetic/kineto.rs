//! A synthetic torch.profiler (Kineto) Chrome trace of any size, streamed to a writer: for the
//! import benchmarks (`benches/kineto_import.rs`, `benches/hta_compare.sh` through
//! `examples/gen_kineto.rs`). It is made here, not recorded: never a stand-in for a real trace.
#![forbid(unsafe_code)]

use std::io::Write;

/// Kernel names with torch-like lengths (the mean sets the bytes per kernel).
const KINETO_NAMES: [&str; 8] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "triton_poi_fused_add_mul_sigmoid_0",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1",
    "triton_per_fused_native_layer_norm_2",
    "triton_poi_fused_cat_3",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
];

const PID: u32 = 4242;
const TID: u32 = 4242;
const STREAM: u32 = 7;
/// Host: one launch every 6 µs, each call 4 µs; 30 µs between steps.
const LAUNCH_PERIOD_NS: u64 = 6_000;
const LAUNCH_DUR_NS: u64 = 4_000;
const STEP_GAP_NS: u64 = 30_000;
const T0_NS: u64 = 1_000_000;

/// Kineto's time format: µs with three decimals (ns).
struct Us(u64);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// splitmix64: deterministic per-kernel variety without a dependency.
fn kineto_mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// How the events of a synthetic trace are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// One event per line with compact separators and only the kernel args HTA and gapscope
    /// read: about 670 bytes per kernel (the issue-29 bench's traces).
    #[default]
    Compact,
    /// As torch's profiler (libkineto) writes them: each event over several lines, `", "` and
    /// `": "` separators, the kernel args with `blocks per SM` and `warps per SM`: about 920
    /// bytes per kernel.
    Torch,
}

/// [`write_kineto_as`] in the [`Layout::Compact`] layout.
pub fn write_kineto(
    w: &mut impl Write,
    kernels: u64,
    annotations: u64,
    trace_name: &str,
) -> std::io::Result<()> {
    write_kineto_as(w, kernels, annotations, trace_name, Layout::Compact)
}

/// Writes a synthetic single-rank torch.profiler (Kineto) Chrome trace: `kernels` kernels, each
/// with its `cudaLaunchKernel` runtime event and `ac2g` flow pair, and `annotations`
/// `ProfilerStep#k` annotations spread evenly over them, each event written in `layout`. Keys
/// follow torch 2.x output (100k kernels ≈ 68 MB compact, 92 MB in torch's layout).
/// Deterministic. `trace_name` goes to `traceName`.
pub fn write_kineto_as(
    w: &mut impl Write,
    kernels: u64,
    annotations: u64,
    trace_name: &str,
    layout: Layout,
) -> std::io::Result<()> {
    let n = kernels;
    let steps = annotations.clamp(1, n.max(1));
    // Step j holds kernels [first(j), first(j + 1)).
    let first = |j: u64| j * n / steps;
    // Host launch of kernel i (in step j): a fixed period, plus a gap per step boundary.
    let launch = |i: u64, j: u64| T0_NS + i * LAUNCH_PERIOD_NS + j * STEP_GAP_NS;

    write!(
        w,
        r#"{{
  "schemaVersion": 1,
  "deviceProperties": [
    {{
      "id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150110011392,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 132,
      "sharedMemPerMultiprocessor": 233472
    }}
  ],
  "distributedInfo": {{"backend": "nccl", "rank": 0, "world_size": 1, "pg_count": 1, "pg_config": [], "nccl_version": "2.21.5"}},
  "cuda_runtime_version": 12040,
  "cuda_driver_version": 12080,
  "record_shapes": 1,
  "trace_id": "6A3E0B5D2F1C4E7A",
  "traceEvents": [
  {{
    "name": "process_name", "ph": "M", "ts": {t0}, "pid": {PID}, "tid": 0,
    "args": {{
      "name": "python3"
    }}
  }},
  {{
    "name": "thread_name", "ph": "M", "ts": {t0}, "pid": {PID}, "tid": {TID},
    "args": {{
      "name": "thread {TID} (python3)"
    }}
  }},
  {{
    "name": "process_name", "ph": "M", "ts": {t0}, "pid": 0, "tid": 0,
    "args": {{
      "name": "python3"
    }}
  }},
  {{
    "name": "thread_name", "ph": "M", "ts": {t0}, "pid": 0, "tid": {STREAM},
    "args": {{
      "name": "stream {STREAM}"
    }}
  }}"#,
        t0 = Us(T0_NS)
    )?;

    let mut gpu_free = 0u64;
    let mut external = 1u64;
    for j in 0..steps {
        let (lo, hi) = (first(j), first(j + 1));
        // The annotation spans the step's launches.
        let start = launch(lo, j) - 1_000;
        let end = launch(hi.max(lo + 1) - 1, j) + LAUNCH_DUR_NS + 1_000;
        write!(
            w,
            r#",
  {{
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {PID}, "tid": {TID},
    "ts": {ts}, "dur": {dur},
    "args": {{
      "External id": {external}, "Record function id": 0, "Ev Idx": {external}
    }}
  }}"#,
            step = j + 1,
            ts = Us(start),
            dur = Us(end - start),
        )?;
        external += 1;
        for i in lo..hi {
            let corr = 100 + i;
            let r = kineto_mix(i);
            // The same kernel sequence every step, as in training or decode loops.
            let name = KINETO_NAMES[(kineto_mix(i - lo) % KINETO_NAMES.len() as u64) as usize];
            let host = launch(i, j);
            let host_dur = LAUNCH_DUR_NS - 300 + (r >> 8) % 600;
            let dur = 1_500 + (r >> 16) % 7_000;
            let ks = gpu_free.max(host + host_dur / 2 + 1_200) + (r >> 32) % 700;
            gpu_free = ks + dur;
            // The values the format strings below name.
            macro_rules! write_kernel {
                (concat!($($part:tt)*) $(,)?) => {
                    write!(
                        w,
                        concat!($($part)*),
                        PID = PID,
                        TID = TID,
                        STREAM = STREAM,
                        external = external,
                        corr = corr,
                        name = name,
                        hts = Us(host),
                        hdur = Us(host_dur),
                        kts = Us(ks),
                        kdur = Us(dur),
                    )
                };
            }
            if layout == Layout::Torch {
                write_kernel!(
                    // libkineto's own layout, as in traces/torch-step-kineto-h200.json.
                    concat!(
                        ",\n  {{\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": {PID}, \"tid\": {TID},\n",
                        "    \"ts\": {hts}, \"dur\": {hdur},\n    \"args\": {{\n",
                        "      \"External id\": {external},      \"cbid\": 211, \"correlation\": {corr}\n    }}\n  }}",
                        ",\n  {{\n    \"ph\": \"s\", \"id\": {corr}, \"pid\": {PID}, \"tid\": {TID}, \"ts\": {hts},\n",
                        "    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }}",
                        ",\n  {{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{name}\", \"pid\": 0, \"tid\": {STREAM},\n",
                        "    \"ts\": {kts}, \"dur\": {kdur},\n    \"args\": {{\n",
                        "      \"External id\": {external},      \"queued\": 0, \"device\": 0, \"context\": 1,",
                        "      \"stream\": {STREAM}, \"correlation\": {corr},      \"registers per thread\": 32,",
                        "      \"shared memory\": 0,      \"blocks per SM\": 0.015152,      \"warps per SM\": 0.060606,",
                        "      \"grid\": [2, 1, 1],      \"block\": [128, 1, 1],      \"est. achieved occupancy %\": 0\n    }}\n  }}",
                        ",\n  {{\n    \"ph\": \"f\", \"id\": {corr}, \"pid\": 0, \"tid\": {STREAM}, \"ts\": {kts},\n",
                        "    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }}"
                    ),
                )?;
                external += 1;
                continue;
            }
            write_kernel!(
                // One event per line, compact separators and the kernel args HTA and gapscope
                // read (no blocks/warps per SM): ~670 bytes per kernel with its runtime event and
                // flows.
                concat!(
                    ",\n{{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":{PID},\"tid\":{TID},",
                    "\"ts\":{hts},\"dur\":{hdur},\"args\":{{\"External id\":{external},\"cbid\":211,\"correlation\":{corr}}}}}",
                    ",\n{{\"ph\":\"s\",\"id\":{corr},\"pid\":{PID},\"tid\":{TID},\"ts\":{hts},\"cat\":\"ac2g\",\"name\":\"ac2g\"}}",
                    ",\n{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{name}\",\"pid\":0,\"tid\":{STREAM},",
                    "\"ts\":{kts},\"dur\":{kdur},\"args\":{{\"External id\":{external},\"queued\":0,\"device\":0,",
                    "\"context\":1,\"stream\":{STREAM},\"correlation\":{corr},\"registers per thread\":32,",
                    "\"shared memory\":0,\"grid\":[2,1,1],\"block\":[128,1,1],\"est. achieved occupancy %\":0}}}}",
                    ",\n{{\"ph\":\"f\",\"id\":{corr},\"pid\":0,\"tid\":{STREAM},\"ts\":{kts},\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}}"
                ),
            )?;
            external += 1;
        }
    }
    write!(
        w,
        r#",
  {{
    "name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": {end}
  }}
  ],
  "traceName": {name},
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1700000000000000000
}}
"#,
        end = Us(gpu_free + 1_000),
        name = serde_json::to_string(trace_name).map_err(std::io::Error::other)?
    )
}
