"""A real torch.profiler trace for the scale bench (issue 29), made the way users make one.

CPU and CUDA activities, a schedule, ProfilerStep annotations from prof.step(), and
export_chrome_trace (libkineto's own layout). Each step runs LAYERS x (matmul, gelu, mul, add)
on bfloat16 tensors plus a sum: about 4 x LAYERS kernels a step.

Usage (on a machine with a CUDA GPU and torch):
    python benches/torch_profile_trace.py OUT.json STEPS LAYERS
    python benches/torch_profile_trace.py /tmp/real-100k.json 25 1000   # ~100k kernels, ~150 MB
Then on any machine: `gapscope analyze OUT.json --json`, and HTA with benches/hta_run.py on a
folder holding it as rank-0.json.
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> None:
    out, steps, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16) for _ in range(8)]

    def step():
        y = x
        for i in range(layers):
            y = torch.nn.functional.gelu(y @ ws[i % 8]) * 0.5 + 0.25
        return y.sum()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=1, warmup=1, active=steps),
    ) as prof:
        for _ in range(steps + 2):
            step()
            torch.cuda.synchronize()
            prof.step()
    t = time.perf_counter()
    prof.export_chrome_trace(out)
    print(f"exported {out} in {time.perf_counter() - t:.1f} s, torch {torch.__version__}")


if __name__ == "__main__":
    main()
