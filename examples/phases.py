"""A program with phases (issue 23's second shape): a long eager phase (longer than the trace
budget), then two captured graphs of the same step, one of them with an external event record and
wait before its last kernel (torch.cuda.Event(external=True): the node pair NCCL's graph usage mode
2 builds), each replayed outside any NVTX range. Prints each phase's CUDA-event period (µs) and the
mode-2 − mode-1 difference the program measures itself. Needs torch ≥ 2.4 with a CUDA GPU.

  python examples/phases.py
  gapscope record -o traces --step-range decode_step -- python examples/phases.py
"""
import argparse
import statistics

import torch


def stats(name, periods):
    s = sorted(periods)
    print(f"phase={name} n={len(s)} median_us={statistics.median(s):.2f} "
          f"p10_us={s[len(s) // 10]:.2f} p90_us={s[9 * len(s) // 10]:.2f}")
    return statistics.median(s)


def timed(launch, steps, nvtx=None):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    for i in range(steps):
        ev[i].record()
        if nvtx:
            with torch.cuda.nvtx.range(nvtx):
                launch()
        else:
            launch()
    ev[steps].record()
    torch.cuda.synchronize()
    return [1e3 * ev[i].elapsed_time(ev[i + 1]) for i in range(steps)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eager-steps", type=int, default=320)
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--size", type=int, default=512)
    args = p.parse_args()
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda")
    out = torch.empty_like(a)
    side = torch.cuda.Stream()

    def step(ext=None):
        h = torch.relu(a @ b)
        if ext is not None:
            ext.record()
            torch.cuda.current_stream().wait_event(ext)
        out.copy_(h + 1)

    stats("eager", timed(step, args.eager_steps, nvtx="decode_step"))
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
    medians = {name: stats(f"replay_{name}", timed(g.replay, args.replays))
               for name, g in graphs.items()}
    print(f"mode2_minus_mode1_us={medians['mode2'] - medians['mode1']:.2f}")


if __name__ == "__main__":
    main()
