"""Issue 25 e: a program killed with SIGKILL (as by the OOM killer) after STEPS eager steps and
REPLAYS graph replays, each in an NVTX range `step`, after sleeping 3 s so that CUPTI's worker
(flushing every second under `gapscope record`) has handed the completed buffers over.
`gapscope record` must exit 137 and write the trace from what was delivered, with a note.

    gapscope record -o out --step-range step -- python benches/hostile/sigkill.py [STEPS] [REPLAYS]
"""

import os
import signal
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
replays = int(sys.argv[2]) if len(sys.argv) > 2 else 100
x = torch.zeros(1024, device="cuda")
for _ in range(steps):
    with torch.cuda.nvtx.range("step"):
        x.mul_(0.5).add_(1.0)
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    x.add_(1.0)
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    x.mul_(0.5).add_(1.0)
for _ in range(replays):
    with torch.cuda.nvtx.range("step"):
        graph.replay()
torch.cuda.synchronize()
print(f"sigkill: {steps} eager steps ({2 * steps} kernels), {replays} replays ({2 * replays} kernels); killing myself", flush=True)
time.sleep(3)
os.kill(os.getpid(), signal.SIGKILL)
