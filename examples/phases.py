"""A program with phases (issue 23's second shape): a long eager phase (longer than the trace
budget), then two captured graphs of the same step, one of them with an external event record and
wait before its last kernel (torch.cuda.Event(external=True): the node pair NCCL's graph usage mode
2 builds), each replayed outside any NVTX range. Prints each phase's CUDA-event period (µs) and the
mode-2 − mode-1 difference the program measures itself; --json writes every step's period and host
time per phase (benches/record_overhead.py reads it). Needs torch ≥ 2.4 with a CUDA GPU.

  python examples/phases.py
  gapscope record -o traces --step-range decode_step -- python examples/phases.py
"""
import argparse
import statistics
import time

import torch

from step_periods import add_arguments, profiled, write_json


def stats(name, periods):
    s = sorted(periods)
    print(f"phase={name} n={len(s)} median_us={statistics.median(s):.2f} "
          f"p10_us={s[len(s) // 10]:.2f} p90_us={s[9 * len(s) // 10]:.2f}")
    return statistics.median(s)


def timed(launch, steps, name, phases, nvtx=None):
    """Every step's CUDA-event period and host time go to phases[name] and phases[name + "/host"];
    returns the periods."""
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    host = []
    for i in range(steps):
        ev[i].record()
        began = time.perf_counter_ns()
        if nvtx:
            with torch.cuda.nvtx.range(nvtx):
                launch()
        else:
            launch()
        host.append((time.perf_counter_ns() - began) / 1e3)
    ev[steps].record()
    torch.cuda.synchronize()
    phases[name] = [1e3 * ev[i].elapsed_time(ev[i + 1]) for i in range(steps)]
    phases[name + "/host"] = host
    return phases[name]


def make_step(size):
    """step(ext=None): a GEMM, then (with `ext`) an event record and wait, then a copy."""
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    out = torch.empty_like(a)

    def step(ext=None):
        h = torch.relu(a @ b)
        if ext is not None:
            ext.record()
            torch.cuda.current_stream().wait_event(ext)
        out.copy_(h + 1)

    return step


def run_phases(args, step, phases):
    """The eager phase, then the two graphs' captures and replays; returns the replay medians."""
    side = torch.cuda.Stream()
    stats("eager", timed(step, args.eager_steps, "eager", phases, nvtx="decode_step"))
    graphs = {}
    for name, ext in (("mode1", None), ("mode2", torch.cuda.Event(external=True))):
        with torch.cuda.stream(side):  # warm-up off the capture stream, as torch advises
            step(ext)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            # The captured function marks its step too, as programs that reuse it do.
            with torch.cuda.nvtx.range("decode_step"):
                step(ext)
        graphs[name] = g
    return {name: stats(f"replay_{name}", timed(g.replay, args.replays, f"replay_{name}", phases))
            for name, g in graphs.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eager-steps", type=int, default=320)
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--size", type=int, default=512)
    add_arguments(p)
    args = p.parse_args()
    step = make_step(args.size)
    phases = {}
    with profiled(args.profile):
        medians = run_phases(args, step, phases)
    print(f"mode2_minus_mode1_us={medians['mode2'] - medians['mode1']:.2f}")
    if args.json:
        write_json(args.json, phases, args.profile)


if __name__ == "__main__":
    main()
