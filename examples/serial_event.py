"""NCCL's serial-event shape of graph usage mode 2, on one GPU (issue 41): NCCL's strong stream
makes every captured collective wait on its `serialEvent` (an external event-wait node) and record
it again after the collective (an external event-record node), so each replay waits for the
record node of the replay before it (NCCL src/misc/strongstream.cc). Here: a side stream, an
external event recorded on it once before capture, and a step of GEMM → wait on the event → a copy
standing for the all-gather → record the event → GEMM. Mode 1 is the same step without the wait
and record. The eager steps (in NVTX ranges `decode_step`) wait on and record the same event, as
NCCL's eager calls do; the graphs, captured on the side stream, are replayed back to back outside
any range. Prints each phase's CUDA-event period (µs) and the mode-2 − mode-1 difference the
program measures itself; --json writes every step's period (benches/record_overhead.py reads it).
Needs torch ≥ 2.4 with a CUDA GPU.

As NCCL does, the program reads NCCL_GRAPH_MIXING_SUPPORT: with 0, NCCL builds no serial event
(graph usage mode 1), so the eager steps and the "mode 2" graph are built without the wait and
the record too, which is what `gapscope try` is shown to tell apart (docs/try.md).

  python examples/serial_event.py
  gapscope record -- python examples/serial_event.py
  gapscope try --env NCCL_GRAPH_MIXING_SUPPORT=0 --env NCCL_MEM_SYNC_DOMAIN=0 -- python examples/serial_event.py
"""
import argparse
import os
import statistics

import torch

from step_periods import add_arguments, print_phases, profiled, write_json
from phases import timed


def make_step(tokens, hidden, serial):
    """step(serial=None): GEMM, (wait on `serial`), copy, (record `serial`), GEMM."""
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16)
    gathered = torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)

    def step(with_serial_event):
        h = x @ w1
        stream = torch.cuda.current_stream()
        if with_serial_event:
            stream.wait_event(serial)
        gathered.copy_(h)  # the all-gather's stand-in
        if with_serial_event:
            serial.record(stream)
        torch.matmul(gathered, w2, out=out)

    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eager-steps", type=int, default=300)
    p.add_argument("--replays", type=int, default=300)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    add_arguments(p)
    args = p.parse_args()
    side = torch.cuda.Stream()
    serial = torch.cuda.Event(external=True)
    serial.record(side)  # once, before any capture, as NCCL's strong stream does
    step = make_step(args.tokens, args.hidden, serial)
    # NCCL_GRAPH_MIXING_SUPPORT=0: no serial event, as NCCL then builds none (mode 1 throughout).
    serialised = os.environ.get("NCCL_GRAPH_MIXING_SUPPORT", "1").strip() != "0"
    phases = {}
    with profiled(args.profile):
        with torch.cuda.stream(side):  # warm-up, off the capture
            for mode2 in (False, True):
                step(mode2)
        torch.cuda.synchronize()
        timed(lambda: step(serialised), args.eager_steps, "eager", phases, nvtx="decode_step")
        graphs = {}
        for name, mode2 in (("mode1", False), ("mode2", serialised)):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                step(mode2)
            graphs[name] = g
        torch.cuda.synchronize()
        for name, g in graphs.items():
            timed(g.replay, args.replays, f"replay_{name}", phases)
    print_phases({k: v for k, v in phases.items() if not k.endswith("/host")})
    medians = {k: statistics.median(v) for k, v in phases.items()}
    print(f"mode2_minus_mode1_us={medians['replay_mode2'] - medians['replay_mode1']:.2f}")
    if args.json:
        write_json(args.json, phases, args.profile)


if __name__ == "__main__":
    main()
