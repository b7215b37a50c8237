"""A device-side assert (an index out of range) after --good kernels that completed
(issue 25 c): the trace must keep what ran before the fault, and name the fault.

  python benches/hostile/device_assert.py [--good 500]
"""
import argparse
import sys

import torch

from common import report


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--good", type=int, default=500)
    args = p.parse_args()
    x = torch.ones(1024, device="cuda")
    for _ in range(args.good):
        x = x * 1.0001  # one kernel each
    torch.cuda.synchronize()
    report(program="device_assert", good_kernels=args.good + 1)  # + the ones() fill
    index = torch.tensor([5000], device="cuda")
    try:
        y = x[index]  # indexSelect with an out-of-range index: device-side assert
        torch.cuda.synchronize()
        print(float(y.sum()))
    except RuntimeError as e:
        print("fault:", str(e).splitlines()[0], file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
