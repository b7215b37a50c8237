"""fork() after CUDA is initialised: the child does host work only and exits; the parent goes
on launching (issue 25 f). The child must not write a second, empty trace over the parent's,
nor hang.

  python benches/hostile/fork_after_init.py [--steps 200]
"""
import os

import torch

from common import add_kernels, report, steps_argument


def main():
    args = steps_argument(__doc__, 200)
    x = add_kernels(args.steps)
    pid = os.fork()
    if pid == 0:
        sum(range(100000))  # host work only: CUDA is unusable in a forked child
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    add_kernels(args.steps, x)
    report(program="fork_after_init", kernels=2 * args.steps + 1,
           child_status=os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
