//! Writes a synthetic single-rank torch.profiler (Kineto) Chrome trace, streamed: N kernels, each
//! with its `cudaLaunchKernel` runtime event and `ac2g` flow pair, and A `ProfilerStep#k`
//! annotations spread evenly over them (see [`gapscope::trace::synthetic::kineto::write_kineto`]).
//!
//! ```sh
//! cargo run --release --example gen_kineto -- --kernels 100000 --annotations 10 -o rank-0.json
//! cargo run --release --example gen_kineto -- --layout torch -o rank-0.json   # torch's layout
//! ```

use clap::Parser;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Write a synthetic torch.profiler (Kineto) trace")]
struct Args {
    /// Number of kernels (each with one cudaLaunchKernel and an ac2g flow pair).
    #[arg(long, default_value_t = 100_000)]
    kernels: u64,
    /// Number of ProfilerStep#k annotations, spread evenly over the kernels.
    #[arg(long, default_value_t = 10)]
    annotations: u64,
    /// How the events are written: `compact` (one per line, the scale bench's traces) or
    /// `torch` (as torch's profiler writes them, over several lines).
    #[arg(long, default_value = "compact", value_parser = ["compact", "torch"])]
    layout: String,
    /// Output file.
    #[arg(short, long)]
    output: PathBuf,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&args.output)?);
    use gapscope::trace::synthetic::kineto::{Layout, write_kineto_as};
    let layout = if args.layout == "torch" {
        Layout::Torch
    } else {
        Layout::Compact
    };
    write_kineto_as(
        &mut w,
        args.kernels,
        args.annotations,
        &args.output.display().to_string(),
        layout,
    )?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()
}
