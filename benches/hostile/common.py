"""Shared by the hostile programs: each prints one line `hostile: {json}` with its own counts
(what it launched), so that benches/hostile/run.py can set records kept against expected."""
import json
import sys


def report(**counts):
    print("hostile: " + json.dumps(counts), flush=True)
    sys.stdout.flush()


def steps_argument(doc, default):
    """The --steps argument every simple hostile program takes."""
    import argparse

    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=default)
    return p.parse_args()


def add_kernels(steps, x=None):
    """`steps` one-kernel adds (after a fill kernel when x is None), synchronised: returns x."""
    import torch

    if x is None:
        x = torch.ones(1024, device="cuda")
    for _ in range(steps):
        x = x + 1.0
    torch.cuda.synchronize()
    return x
