"""Issue 25 d: a long decode loop under `gapscope record` (defaults): one CUDA graph replayed in
an NVTX range per step for SECONDS seconds (default 45, ~700,000 steps on an H200).
Prints the steps it ran; the trace must stay under 5 MB, the untraced steps' ranges summarised
in metadata.sampling.markers.

    gapscope record -o out -- python benches/hostile/long_loop.py [SECONDS]
"""

import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 45.0
x = torch.zeros(1024, device="cuda")
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    for _ in range(3):  # warm-up before capture, as torch asks
        x.add_(1.0)
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    x.add_(1.0)
torch.cuda.synchronize()
steps = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(1000):
        with torch.cuda.nvtx.range("decode_step"):
            graph.replay()
    steps += 1000
torch.cuda.synchronize()
print(f"long_loop: {steps} steps in {seconds:.0f} s", flush=True)
