"""SIGSEGV after --steps eager steps and --replays graph replays (issue 25: a partial trace).

  python benches/hostile/segv.py [--steps 2000] [--replays 100]
"""
import argparse
import ctypes

import torch

from common import report


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--replays", type=int, default=100)
    args = p.parse_args()
    x = torch.ones(1024, device="cuda")
    for _ in range(args.steps):
        torch.cuda.nvtx.range_push("decode_step")
        x = x * 1.0001 + 0.5
        torch.cuda.nvtx.range_pop()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = x * 2.0
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2.0 + 1.0
    for _ in range(args.replays):
        g.replay()
    torch.cuda.synchronize()
    report(program="segv", eager_kernels=2 * args.steps, graph_launches=args.replays,
           markers=args.steps)
    ctypes.string_at(0)  # SIGSEGV


if __name__ == "__main__":
    main()
