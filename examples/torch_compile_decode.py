"""A decode loop run eagerly, then compiled with torch.compile(mode="reduce-overhead") (CUDA graph
trees replayed inside the compiled call), each step inside the NVTX range "decode_step": the
shape of issue 23's first program. Prints each phase's CUDA-event period per step (µs) so that a
recording can be checked against the program's own figures; --json writes every step's period
and host time per phase (benches/record_overhead.py reads it). Needs torch with a CUDA GPU.

With --force-eager-fallback each step also advances a position counter in place, an input of
the compiled function: CUDA graph trees do not capture a function that mutates an input they
do not own, so torch.compile runs the compiled step without graphs ("skipping cudagraphs due to
mutated inputs", in its log with TORCH_LOGS=perf_hints) and the program prints how many graphs
it skipped. The compiled phase then launches its Triton kernels eagerly.

  python examples/torch_compile_decode.py
  gapscope record -o traces --step-range decode_step -- python examples/torch_compile_decode.py
  gapscope record -o traces --step-range decode_step -- \
      python examples/torch_compile_decode.py --force-eager-fallback
"""
import argparse
import statistics
import time

import torch

from step_periods import add_arguments, profiled, write_json


def make_model(hidden, layers):
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden)]
    return torch.nn.Sequential(*blocks).cuda().half().eval()


def run(step, x, steps, name, phases):
    """`steps` steps, each in an NVTX decode_step range, timed with CUDA events; every step's
    period and host time go to phases[name] and phases[name + "/host"]."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    host = []
    for i in range(steps):
        starts[i].record()
        began = time.perf_counter_ns()
        with torch.cuda.nvtx.range("decode_step"):
            x = step(x)
        host.append((time.perf_counter_ns() - began) / 1e3)
    starts[steps].record()
    torch.cuda.synchronize()
    periods = [1e3 * starts[i].elapsed_time(starts[i + 1]) for i in range(steps)]
    phases[name], phases[name + "/host"] = periods, host
    tail = sorted(periods[len(periods) // 10:])  # the first tenth is warm-up
    print(f"phase={name} n={len(tail)} median_us={statistics.median(tail):.2f} "
          f"p10_us={tail[len(tail) // 10]:.2f} p90_us={tail[9 * len(tail) // 10]:.2f}")
    return x


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="steps per phase")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--force-eager-fallback", action="store_true",
                   help="mutate an input in each step, so that torch.compile skips CUDA graphs")
    add_arguments(p)
    args = p.parse_args()
    model = make_model(args.hidden, args.layers)
    x = torch.randn(8, args.hidden, device="cuda", dtype=torch.half)

    position = torch.zeros((), device="cuda", dtype=torch.long)

    @torch.no_grad()
    def eager_step(h, position):
        if position is not None:
            position.add_(1)  # an input mutated in place: graph trees refuse to capture this
        return model(h).tanh()

    compiled = torch.compile(eager_step, mode="reduce-overhead")
    counter = position if args.force_eager_fallback else None

    def compiled_step(h):
        # Graph trees reuse their output buffers: copy what the next step reads.
        return compiled(h, counter).clone()

    phases = {}
    with profiled(args.profile):
        x = run(lambda h: eager_step(h, counter), x, args.steps, "eager", phases)
        x = run(compiled_step, x, args.steps, "compiled", phases)
    from torch._dynamo.utils import counters
    print(f"cudagraph_skips={counters['inductor']['cudagraph_skips']}")
    if args.json:
        write_json(args.json, phases, args.profile)


if __name__ == "__main__":
    main()
