//! The HT-decode correctness check: the device step against the CPU reference, eagerly and
//! as a captured CUDA graph (`gapscope check-kernels`).
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DriverError, sys};

use super::config::{HtDecodeConfig, HtDecodeError, drv};
use super::reference::CheckReport;
use super::step::HtDecode;

/// Why [`cuda_available`] found no device: typed for its callers; each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum NoCuda {
    #[error("no CUDA device")]
    NoDevice,
    #[error("cannot load libcuda.so.1: {0}")]
    Library(crate::cuda::LibraryError),
    #[error("cuInit/cuDeviceGetCount: {0}")]
    Driver(DriverError),
}

/// Whether a CUDA driver and at least one device are present, checked without letting
/// cudarc's loader panic (see [`crate::cuda::device_count`]); `Ok`: the number of devices.
pub fn cuda_available() -> Result<usize, NoCuda> {
    match crate::cuda::device_count() {
        Ok(n) if n > 0 => Ok(n),
        Ok(_) => Err(NoCuda::NoDevice),
        Err(crate::cuda::NoDevices::Library(e)) => Err(NoCuda::Library(e)),
        Err(crate::cuda::NoDevices::Driver(e)) => Err(NoCuda::Driver(e)),
    }
}

/// Why [`run_correctness_check`] failed: no CUDA, a driver call before the checks, or a check
/// that failed (its report). Typed for the command line; each displays as before.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    NoCuda(#[from] NoCuda),
    #[error("CudaContext::new(0): {0}")]
    Context(DriverError),
    #[error("{0}")]
    ComputeCapability(DriverError),
    #[error("new stream: {0}")]
    Stream(DriverError),
    /// The report, one line per T, when any check fails.
    #[error("{0}")]
    Failed(String),
}

/// Runs the step for each T in `tokens` on GPU 0 (default shape: H 7168, K 8, E 256, R 8,
/// M = T; the rank varies with T) with the single-GPU all-gather stand-in, eagerly (two
/// steps back to back, so the memsets' reset is exercised) and as a captured CUDA graph
/// launched twice, checking each against the CPU reference. Returns one line per T; `Err`
/// holds the same lines when any check fails ([`CheckError::Failed`]) or CUDA is missing.
pub fn run_correctness_check(tokens: &[usize]) -> Result<String, CheckError> {
    let n = cuda_available()?;
    let ctx = CudaContext::new(0).map_err(CheckError::Context)?;
    let name = ctx.name().unwrap_or_else(|_| "?".into());
    let cc = ctx
        .compute_capability()
        .map_err(CheckError::ComputeCapability)?;
    // a created stream: the legacy default stream cannot be captured
    let stream = ctx.new_stream().map_err(CheckError::Stream)?;
    let mut lines = vec![format!(
        "ht_decode correctness on {name} (cc {}.{}, {n} device(s))",
        cc.0, cc.1
    )];
    let mut all_ok = true;
    for (i, &t) in tokens.iter().enumerate() {
        let mut cfg = HtDecodeConfig::with_tokens(t);
        cfg.rank = (i * 3) % cfg.ranks;
        let line = match check_one(&stream, cfg.clone()) {
            Ok((target, eager, graph)) => {
                all_ok &= eager.passed() && graph.passed();
                format!(
                    "T={t} rank={} R={} H={} K={} E={} ({target}): eager {} | graph {}",
                    cfg.rank,
                    cfg.ranks,
                    cfg.hidden,
                    cfg.top_k,
                    cfg.experts,
                    eager.summary(),
                    graph.summary()
                )
            }
            Err(e) => {
                all_ok = false;
                format!("T={t}: ERROR {e}")
            }
        };
        lines.push(line);
    }
    let text = lines.join("\n");
    if all_ok {
        Ok(text)
    } else {
        Err(CheckError::Failed(text))
    }
}

fn check_one(
    stream: &Arc<CudaStream>,
    cfg: HtDecodeConfig,
) -> Result<(String, CheckReport, CheckReport), HtDecodeError> {
    let mut dec = HtDecode::new(stream, cfg)?;
    // eager: two steps back to back
    dec.poison_outputs(stream)?;
    dec.step_emulated(stream)?;
    dec.step_emulated(stream)?;
    let eager = dec.check_against_reference(stream)?;

    // graph: capture one step, launch it twice
    dec.poison_outputs(stream)?;
    stream
        .synchronize()
        .map_err(drv("synchronize before capture"))?;
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(drv("cuStreamBeginCapture"))?;
    let enqueued = dec.step_emulated(stream);
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    enqueued?;
    let graph = ended
        .map_err(drv("cuStreamEndCapture / instantiate"))?
        .ok_or_else(|| HtDecodeError::Config("stream capture produced no graph".into()))?;
    graph.launch().map_err(drv("cuGraphLaunch"))?;
    graph.launch().map_err(drv("cuGraphLaunch"))?;
    let graphed = dec.check_against_reference(stream)?;
    Ok((dec.nvrtc_target().to_string(), eager, graphed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU check, listed as ignored (visibly) where there is no GPU. Run it on a machine
    /// with a CUDA GPU and NVRTC: `cargo test --release ht_decode -- --ignored --nocapture`, or
    /// `gapscope check-kernels` from the release binary.
    #[test]
    #[ignore = "needs a CUDA GPU and NVRTC: cargo test --release ht_decode -- --ignored"]
    fn ht_decode_matches_cpu_reference_on_gpu() {
        if let Err(why) = cuda_available() {
            panic!("no CUDA GPU: {why}");
        }
        match run_correctness_check(&[1, 8, 512]) {
            Ok(text) => eprintln!("{text}"),
            Err(text) => panic!("HT decode does not match the CPU reference:\n{text}"),
        }
    }
}
