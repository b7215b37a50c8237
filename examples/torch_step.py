"""A tiny step, run eagerly and then as a replayed CUDA graph (needs only torch).

Each step runs inside torch.cuda.nvtx.range("step") and torch.profiler.record_function("step")
in both regimes; times are CUDA events.
  gapscope record -o traces --step-range step -- python examples/torch_step.py
  python examples/torch_step.py --profile kineto.json  # not under gapscope: one CUPTI subscriber
"""
import argparse
import torch


def step(x, w1, w2, out):
    h = torch.relu(x @ w1)
    h = h @ w2
    # Collective stand-in (no process group): reduce 4 "shards", then broadcast back.
    r = h.view(4, -1, h.shape[-1]).sum(0)
    out.copy_(r.repeat(4, 1) * 0.25 + x)


def timed(fn, n):
    """Runs fn n times, each inside an NVTX "step" range; returns microseconds per step."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        # NVTX reaches gapscope's recorder; record_function reaches torch.profiler (Kineto).
        with torch.cuda.nvtx.range("step"), torch.profiler.record_function("step"):
            fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="steps per regime")
    p.add_argument("--size", type=int, default=1024, help="matrix size (multiple of 4)")
    p.add_argument("--profile", metavar="PATH",
                   help="run under torch.profiler and export a Kineto Chrome trace to PATH")
    a = p.parse_args()

    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(a.size, a.size, device=dev)
    w1 = torch.randn(a.size, a.size, device=dev) / a.size ** 0.5
    w2 = torch.randn(a.size, a.size, device=dev) / a.size ** 0.5
    out = torch.empty_like(x)

    def eager():
        step(x, w1, w2, out)

    # Warm up on a side stream (cuBLAS handles, allocator), as graph capture requires.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.nvtx.range("capture"), torch.cuda.graph(graph):
        eager()

    def run():
        e = timed(eager, a.steps)
        g = timed(graph.replay, a.steps)
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, size {a.size}")
        print(f"eager   {e:9.1f} us/step ({a.steps} steps)")
        print(f"graphed {g:9.1f} us/step ({a.steps} steps)")

    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run()
        prof.export_chrome_trace(a.profile)
        print(f"wrote {a.profile}")
    else:
        run()


if __name__ == "__main__":
    main()
