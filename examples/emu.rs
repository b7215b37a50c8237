//! Rust port of `examples/probe/emu.cu`: does the topology NCCL graph usage mode 2 builds around a
//! captured collective cost idle time on one GPU?
//!
//! step: spin(5 µs) → all-gather stand-in (copy kernel, emulated 8 ranks × 8 KiB) → spin(10 µs)
//! → spin(5 µs). Mode 2: the copy wrapped as NCCL's strong stream does (side capture stream,
//! external wait on serialEvent, record node after); mode 1: side capture stream joined without
//! dependencies, no external nodes. Kernels stamp %globaltimer.
//!
//! Usage: `cargo run --release --example emu -- [iters=500] [single|alt|per]`
//! (first letter 's': one executable graph replayed; 'a': two alternating; else one per step).
//! Prints one line and exits 1 when there is no GPU, driver or NVRTC.

use gapscope::workload::capture::Launch;
use gapscope::workload::collective::{GraphUsageMode, WorkloadError};
use gapscope::workload::emu::{EmuSetup, NoObserver, run_emu_cell};
use std::process::ExitCode;

fn run(iters: usize, launch: Launch) -> Result<(), WorkloadError> {
    let mut setup = EmuSetup::new(0, iters)?;
    for mode in [GraphUsageMode::Two, GraphUsageMode::One] {
        for graphed in [false, true] {
            let r = run_emu_cell(&mut setup, mode, graphed, launch, &mut NoObserver)?;
            if let Some(n) = r.nodes {
                println!("{}", n.line(mode));
            }
            println!("{}", r.line());
        }
    }
    // The stand-in must produce a real all-gather result (silent when it does).
    setup.verify_gather()
}

fn main() -> ExitCode {
    // cudarc panics when a library or symbol is missing; the checks in EmuSetup::new come
    // first, and this hook keeps any other panic to one line.
    std::panic::set_hook(Box::new(|info| {
        gapscope::messages::line(&format!(
            "emu: internal error: {}",
            gapscope::panic_message::one_line(info)
        ));
    }));
    let args: Vec<String> = std::env::args().collect();
    let iters = match args.get(1) {
        None => 500,
        Some(a) => match a.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                gapscope::messages::line(&format!(
                    "emu: iters must be a positive integer, not {a:?} (usage: emu [iters] [single|alt|per])"
                ));
                return ExitCode::from(1);
            }
        },
    };
    let launch = Launch::from_emu_cu_arg(args.get(2).map(String::as_str));
    match std::panic::catch_unwind(|| run(iters, launch)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            gapscope::messages::line(&format!("emu: {e}"));
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(1),
    }
}
