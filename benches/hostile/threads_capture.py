"""Several Python threads, each capturing its own CUDA graph at the same time (torch's default
capture_error_mode "global"), then eager steps in an NVTX range `decode_step` plus a replay of
each graph per step (issue 25 a: captures on non-main threads once stopped the recording).

  python benches/hostile/threads_capture.py [--threads 4] [--steps 400] [--where main|thread]
      [--capture-mode global|thread_local|relaxed] [--no-graphs]

--where thread runs the eager steps inside one non-main thread too. Kernels expected: each
eager step launches --ops kernels plus one graph replay of --ops kernels per thread's graph.
"""
import argparse
import threading

import torch

from common import report


def work(x, ops):
    for _ in range(ops):
        x = x * 1.0001 + 0.5
    return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--ops", type=int, default=3)
    p.add_argument("--where", choices=["main", "thread"], default="main")
    p.add_argument("--capture-mode", default="global")
    p.add_argument("--no-graphs", action="store_true")
    args = p.parse_args()
    torch.cuda.init()
    graphs, errors = [None] * args.threads, []

    def capture(i):
        try:
            x = torch.ones(1024, device="cuda")
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                work(x, args.ops)  # warm-up on the side stream, as torch's docs ask
            torch.cuda.synchronize()
            if args.no_graphs:
                for _ in range(args.steps):
                    with torch.cuda.stream(s):
                        torch.cuda.nvtx.range_push("thread_step")
                        work(x, args.ops)
                        torch.cuda.nvtx.range_pop()
                torch.cuda.synchronize()
                return
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s, capture_error_mode=args.capture_mode):
                y = work(x, args.ops)
            graphs[i] = (g, x, y)
        except Exception as e:  # the count of failures is part of the report
            errors.append(repr(e))

    threads = [threading.Thread(target=capture, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()

    def steps():
        x = torch.ones(1024, device="cuda")
        for _ in range(args.steps):
            torch.cuda.nvtx.range_push("decode_step")
            x = work(x, args.ops)
            for entry in graphs:
                if entry is not None:
                    entry[0].replay()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()

    if args.where == "thread":
        t = threading.Thread(target=steps)
        t.start()
        t.join()
    else:
        steps()
    captured = sum(g is not None for g in graphs)
    eager = args.steps * args.ops + (args.threads * args.steps * args.ops if args.no_graphs else 0)
    report(program="threads_capture", threads=args.threads, where=args.where,
           capture_mode=args.capture_mode, graphs=captured, errors=errors,
           eager_kernels=eager, replayed_kernels=captured * args.steps * args.ops,
           graph_launches=captured * args.steps,
           markers=args.steps + (args.threads * args.steps if args.no_graphs else 0))


if __name__ == "__main__":
    main()
