"""cudaDeviceReset in the middle of a run (through the CUDA runtime torch loaded), then exit
(issue 25 f): the kernels before the reset must be kept.

  python benches/hostile/device_reset.py [--steps 300]
"""
import ctypes
import glob
import os

import torch

from common import add_kernels, report, steps_argument


def cudart():
    here = os.path.dirname(torch.__file__)
    for pattern in ("../nvidia/cu13/lib/libcudart.so*", "../nvidia/cuda_runtime/lib/libcudart.so*",
                    "lib/libcudart*.so*"):
        for path in sorted(glob.glob(os.path.join(here, pattern))):
            return ctypes.CDLL(path)
    return ctypes.CDLL("libcudart.so")


def main():
    args = steps_argument(__doc__, 300)
    add_kernels(args.steps)
    rc = cudart().cudaDeviceReset()
    report(program="device_reset", kernels=args.steps + 1, reset_rc=rc)
    os._exit(0)  # torch's own teardown after a reset is not what is tested


if __name__ == "__main__":
    main()
