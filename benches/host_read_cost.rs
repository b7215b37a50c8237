//! What one host-sample read costs `gapscope record` (issue 45), on the CPU: py-spy, configured
//! as the sampler configures it, reads a `python3` child whose main thread spins at a given
//! stack depth beside a number of idle Python threads; each shape is read `--reads` times in a
//! row. Beside it, the part py-spy spends finding which of the process's threads run (one
//! `/proc/PID/task/TID/stat` read per OS thread, every read), timed the same way.
//!
//!     cargo bench --bench host_read_cost                  # 2,000 reads a shape
//!     cargo bench --bench host_read_cost -- --reads 500
//!
//! Prints per shape: Python threads, frames read, OS threads, the read's median [p10–p90] n
//! in µs, and the thread scan's.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Idle Python threads beside the main one, and the main thread's stack depth.
const SHAPES: [(usize, usize); 4] = [(0, 5), (0, 45), (8, 45), (40, 45)];

const PROGRAM: &str = "import sys, threading\n\
idle, depth = int(sys.argv[1]), int(sys.argv[2])\n\
never = threading.Event()\n\
for _ in range(idle):\n    threading.Thread(target=never.wait, daemon=True).start()\n\
def deep(k):\n    if k == 0:\n        print('ready', flush=True)\n        while True:\n            sum(range(1000))\n    return deep(k - 1)\n\
deep(depth)\n";

fn spawn(idle: usize, depth: usize) -> Child {
    let mut child = Command::new("python3")
        .args(["-c", PROGRAM, &idle.to_string(), &depth.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 on PATH");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the child's ready line");
    child
}

/// median [p10–p90] n of `us`.
fn summary(mut us: Vec<f64>) -> String {
    us.sort_by(f64::total_cmp);
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    format!(
        "{:.0} [{:.0}–{:.0}] n={}",
        at(0.5),
        at(0.1),
        at(0.9),
        us.len()
    )
}

/// What py-spy does before each read to learn which threads run (remoteprocess's
/// `Thread::active`): list the tasks, read each one's stat.
fn scan_threads(pid: u32) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let Ok(entry) = entry else { continue };
        let mut buf = [0u8; 512];
        if let Ok(mut f) = std::fs::File::open(entry.path().join("stat")) {
            let _ = f.read(&mut buf);
            n += 1;
        }
    }
    n
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reads: usize = args
        .iter()
        .position(|a| a == "--reads")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(2000);
    let config = gapscope::record::host_sampler::py_spy_config();
    println!(
        "| idle threads | depth | Python threads | frames read | OS threads | read µs | thread scan µs |"
    );
    println!("|--:|--:|--:|--:|--:|---|---|");
    for (idle, depth) in SHAPES {
        let mut child = spawn(idle, depth);
        let pid = child.id();
        let mut spy = py_spy::PythonSpy::new(pid as i32, &config).expect("py-spy reads python3");
        let (mut read_us, mut scan_us) = (Vec::new(), Vec::new());
        let (mut threads, mut frames, mut tasks) = (0, 0, 0);
        for _ in 0..reads {
            let t = Instant::now();
            if let Ok(traces) = spy.get_stack_traces() {
                read_us.push(t.elapsed().as_secs_f64() * 1e6);
                threads = traces.len();
                frames = traces.iter().map(|t| t.frames.len()).sum();
            }
            let t = Instant::now();
            tasks = scan_threads(pid);
            scan_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "| {idle} | {depth} | {threads} | {frames} | {tasks} | {} | {} |",
            summary(read_us),
            summary(scan_us)
        );
    }
}
