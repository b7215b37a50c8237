"""The process exits from a non-main thread with libc exit() while the main thread is still
launching (issue 25 f): atexit handlers run on that thread.

  python benches/hostile/exit_from_thread.py [--steps 300]
"""
import ctypes
import threading
import time

import torch

from common import add_kernels, report, steps_argument


def main():
    args = steps_argument(__doc__, 300)
    x = add_kernels(args.steps)
    report(program="exit_from_thread", kernels=args.steps + 1)

    def leave():
        time.sleep(0.2)
        ctypes.CDLL(None).exit(7)

    threading.Thread(target=leave).start()
    while True:  # still launching when the other thread exits
        x = x + 1.0
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
