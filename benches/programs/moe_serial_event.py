"""A second program of NCCL's serial-event shape, written for benches/record_overhead.py (issue 56 a)
so that the recorder's mode-2 verdict is checked on code it was not tuned on: an MoE decode layer
(RMS norm, router GEMM, softmax and top-k, the routing "all-gather", expert MLP with SiLU, residual)
whose all-gather stand-in (an index_select into a gathered buffer) waits on an external serial event
and records it again, as NCCL's strong stream does in graph usage mode 2 (src/misc/strongstream.cc).
Eager steps sit in NVTX ranges named `forward` (range_push/range_pop, as users write them); the two
graphs (mode 2 first, then mode 1) are replayed back to back outside any range. Reads
NCCL_GRAPH_MIXING_SUPPORT as NCCL does: 0 builds no serial event anywhere.

  python benches/programs/moe_serial_event.py --json periods.json
  python3 benches/record_overhead.py --gapscope G -- benches/programs/moe_serial_event.py \
      --diff graph_mode1,graph_mode2
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from step_periods import add_arguments, print_phases, profiled, write_json  # noqa: E402


def make_layer(tokens, hidden, experts, top_k, serial):
    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(tokens, hidden, device=dev, dtype=dt)
    norm_w = torch.ones(hidden, device=dev, dtype=dt)
    router = torch.randn(hidden, experts, device=dev, dtype=dt) / hidden ** 0.5
    up = torch.randn(hidden, 2 * hidden, device=dev, dtype=dt) / hidden ** 0.5
    down = torch.randn(hidden, hidden, device=dev, dtype=dt) / hidden ** 0.5
    rows = torch.arange(tokens, device=dev).repeat(2)  # "gathered from two ranks"
    gathered = torch.empty(2 * tokens, hidden, device=dev, dtype=dt)
    out = torch.empty_like(x)

    def layer(with_serial_event):
        h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dt) * norm_w
        probs = torch.softmax((h @ router).float(), dim=-1)
        weight, _ = torch.topk(probs, top_k, dim=-1)
        stream = torch.cuda.current_stream()
        if with_serial_event:
            stream.wait_event(serial)
        torch.index_select(h, 0, rows, out=gathered)  # the routing all-gather's stand-in
        if with_serial_event:
            serial.record(stream)
        a, b = (gathered[:tokens] @ up).chunk(2, dim=-1)
        y = (torch.nn.functional.silu(a) * b) @ down
        torch.add(x, y * weight.sum(-1, keepdim=True).to(dt), out=out)

    return layer


def timed(run, steps, name, phases, nvtx=None):
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    host = []
    for i in range(steps):
        events[i].record()
        began = time.perf_counter_ns()
        if nvtx:
            torch.cuda.nvtx.range_push(nvtx)
        run()
        if nvtx:
            torch.cuda.nvtx.range_pop()
        host.append((time.perf_counter_ns() - began) / 1e3)
    events[steps].record()
    torch.cuda.synchronize()
    phases[name] = [1e3 * events[i].elapsed_time(events[i + 1]) for i in range(steps)]
    phases[name + "/host"] = host


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eager-steps", type=int, default=250)
    p.add_argument("--replays", type=int, default=400)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=4)
    add_arguments(p)
    args = p.parse_args()
    side = torch.cuda.Stream()
    serial = torch.cuda.Event(external=True)
    serial.record(side)
    layer = make_layer(args.tokens, args.hidden, args.experts, args.top_k, serial)
    mixing = os.environ.get("NCCL_GRAPH_MIXING_SUPPORT", "1").strip() != "0"
    phases = {}
    with profiled(args.profile):
        with torch.cuda.stream(side):
            layer(False)
            layer(True)
        torch.cuda.synchronize()
        timed(lambda: layer(mixing), args.eager_steps, "eager", phases, nvtx="forward")
        graphs = {}
        for name, serialised in (("graph_mode2", mixing), ("graph_mode1", False)):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                layer(serialised)
            graphs[name] = g
        torch.cuda.synchronize()
        for name, g in graphs.items():
            timed(g.replay, args.replays, name, phases)
    print_phases({k: v for k, v in phases.items() if not k.endswith("/host")})
    medians = {k: statistics.median(v) for k, v in phases.items()}
    print(f"mode2_minus_mode1_us={medians['graph_mode2'] - medians['graph_mode1']:.2f}")
    if args.json:
        write_json(args.json, phases, args.profile)


if __name__ == "__main__":
    main()
