"""A decode loop that runs until it is signalled (issue 25 f: SIGINT/SIGTERM sent to
`gapscope record` itself must reach the program, and the trace must still be written).

  python benches/hostile/signal_loop.py [--seconds 60]
"""
import argparse
import time

import torch

from common import report


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60)
    args = p.parse_args()
    x = torch.ones(1024, device="cuda")
    report(program="signal_loop")
    end = time.time() + args.seconds
    while time.time() < end:
        torch.cuda.nvtx.range_push("decode_step")
        x = x * 1.0001 + 0.5
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        time.sleep(0.001)  # a serving loop's pace, not a launch storm: the trace stays small


if __name__ == "__main__":
    main()
