"""A decode step with an NCCL all-gather, run eagerly, as a replayed CUDA graph and as freshly
captured graphs: a PyTorch program written the way users write them (needs only torch + NCCL).

Phases (each step's period is measured with CUDA events, in µs; repeated --rounds times):
  eager        --eager-steps steps, each inside the NVTX range "decode_step"
  replay       one captured graph, replayed --replays times (no NVTX)
  fresh        --fresh graphs, all captured first, then each launched once
  replay_ext,  the same with an external event record + wait before the all-gather, which
  fresh_ext    emulates NCCL graph usage mode 2 (default on with one process)
Each phase also has PHASE/host: every step's host time, launch calls plus the timing event record.

  python examples/torch_graphs.py
  torchrun --nproc-per-node 2 examples/torch_graphs.py
  gapscope record -o traces --step-range decode_step -- torchrun --nproc-per-node 2 examples/torch_graphs.py
  NCCL_GRAPH_MIXING_SUPPORT=0 gapscope record -o traces-nomix --step-range decode_step -- \\
      torchrun --nproc-per-node 2 examples/torch_graphs.py
  python examples/torch_graphs.py --profile --profile-out kineto-{rank}.json  # not under gapscope
"""
import argparse
import functools
import json
import os
import signal
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

from step_periods import host_speed_us

SHARD_ROWS = 64  # rows of h each rank contributes to the all-gather


def pick_port():
    """A port free now (the store binds it a moment later; see init_process_group below)."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return str(s.getsockname()[1])
    except OSError:
        return "29511"


def default_rendezvous_env():
    """A plain `python` run gets the variables torchrun would set, for a world of one.
    Returns whether the port was chosen here (and may be chosen again)."""
    chosen = "MASTER_PORT" not in os.environ
    if chosen:
        os.environ["MASTER_PORT"] = pick_port()
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                        ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)
    return chosen


def init_process_group(local_rank, port_chosen_here):
    """NCCL process group; a port picked here can be taken by the time the store binds it
    (seen in back-to-back benchmark runs), so such a run picks another and tries again."""
    for attempt in range(3):
        try:
            dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
            return
        except dist.DistNetworkError:
            if not port_chosen_here or attempt == 2:
                raise
            os.environ["MASTER_PORT"] = pick_port()


def make_step(size, world):
    """Returns step(ext_event=None); every tensor is allocated here, so a step is capturable."""
    opts = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(size, size, **opts)
    w1 = torch.randn(size, size, **opts) / size ** 0.5
    w2 = torch.randn(size, size, **opts) / size ** 0.5
    h1, h2 = torch.empty_like(x), torch.empty_like(x)
    gathered = torch.empty(world * SHARD_ROWS, size, **opts)
    out = torch.empty(SHARD_ROWS, size, **opts)

    def step(ext_event=None):
        torch.matmul(x, w1, out=h1)
        h1.relu_()
        torch.matmul(h1, w2, out=h2)
        if ext_event is not None:
            # Under capture an external event becomes an event-record and an event-wait node.
            stream = torch.cuda.current_stream()
            ext_event.record(stream)
            stream.wait_event(ext_event)
        dist.all_gather_into_tensor(gathered, h2[:SHARD_ROWS])
        # Mix this rank's shard with the last rank's so the result depends on the collective.
        torch.add(gathered[:SHARD_ROWS], gathered[-SHARD_ROWS:], out=out)
        out.mul_(0.5)

    return step


def timed(launches, events, nvtx=None):
    """Runs each launch, recording a timing event after it; returns the periods in µs (event to
    event, on the GPU) and each step's host time in µs (the launch calls and the event record:
    what a profiler attached to the process adds to them shows here even while the GPU, not
    the host, sets the period)."""
    host = []
    for launch, event in zip(launches, events):
        began = time.perf_counter_ns()
        if nvtx:
            torch.cuda.nvtx.range_push(nvtx)
        launch()
        if nvtx:
            torch.cuda.nvtx.range_pop()
        event.record()
        host.append((time.perf_counter_ns() - began) / 1e3)
    torch.cuda.synchronize()
    used = events[:len(launches)]
    return [a.elapsed_time(b) * 1e3 for a, b in zip(used, used[1:])], host


def capture(step):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def run_phases(args, step, step_ext, events, periods):
    """Phases 2-5 once; periods accumulate per phase name."""
    def add(name, timing):
        gpu, host = timing
        periods[name] += gpu
        periods.setdefault(name + "/host", []).extend(host)

    add("eager", timed([step] * args.eager_steps, events, nvtx="decode_step"))
    variants = [("", step)] + ([("_ext", step_ext)] if step_ext else [])
    for suffix, fn in variants:
        graph = capture(fn)
        add("replay" + suffix, timed([graph.replay] * args.replays, events))
        fresh = [capture(fn) for _ in range(args.fresh)]  # all captured before any launch
        add("fresh" + suffix, timed([g.replay for g in fresh], events))
        del graph, fresh


def percentile(sorted_values, q):
    """Linear-interpolated percentile (q in [0, 1]) of an already sorted list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def main():
    summary, _, details = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(description=summary, epilog=details,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024,
                   help="hidden size of the square weights (default %(default)s)")
    p.add_argument("--eager-steps", type=int, default=200,
                   help="eager steps per round (default %(default)s)")
    p.add_argument("--replays", type=int, default=200,
                   help="replays of one graph per round (default %(default)s)")
    p.add_argument("--fresh", type=int, default=40,
                   help="fresh graphs per round, each launched once (default %(default)s)")
    p.add_argument("--rounds", type=int, default=1,
                   help="repeat the timed phases this many times (default %(default)s)")
    p.add_argument("--external-events", action=argparse.BooleanOptionalAction, default=None,
                   help="also time replay_ext/fresh_ext (default: on with world size 1)")
    p.add_argument("--profile", action="store_true",
                   help="run the timed phases under torch.profiler (CPU + CUDA activities)")
    p.add_argument("--profile-out", metavar="PATH",
                   help="with --profile, export a Chrome trace there ({rank} is substituted)")
    p.add_argument("--json", metavar="PATH",
                   help="write this rank's periods as JSON there ({rank} is substituted)")
    p.add_argument("--all-ranks-print", action="store_true", help="every rank prints its phases")
    p.add_argument("--no-destroy", action="store_true",
                   help="exit without destroy_process_group (as many programs do)")
    p.add_argument("--exit", choices=("return", "os._exit", "sigterm"), default="return",
                   help="how the process ends: return from main (default), os._exit(0) "
                        "(skips atexit handlers), or SIGTERM to itself")
    args = p.parse_args()
    if args.size < SHARD_ROWS:
        p.error(f"--size must be at least {SHARD_ROWS}")

    port_chosen_here = default_rendezvous_env()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    init_process_group(local_rank, port_chosen_here)
    rank, world = dist.get_rank(), dist.get_world_size()
    printing = rank == 0 or args.all_ranks_print
    tag = f" rank={rank}" if args.all_ranks_print else ""

    step = make_step(args.size, world)
    step_ext = None
    use_ext = world == 1 if args.external_events is None else args.external_events
    if use_ext:
        try:
            step_ext = functools.partial(step, torch.cuda.Event(external=True))
        except TypeError:
            if printing:
                print(f"note: torch.cuda.Event(external=True) is not supported by torch "
                      f"{torch.__version__}; skipping replay_ext/fresh_ext{tag}")

    # Warm-up on a side stream (cuBLAS handles, NCCL), as torch.cuda.graph capture requires.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            step()
            if step_ext:
                step_ext()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    most = max(args.eager_steps, args.replays, args.fresh)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(most)]
    periods = {name: [] for name in ("eager", "replay", "fresh")}
    if step_ext:
        periods.update(replay_ext=[], fresh_ext=[])
    if args.profile:
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(args.rounds):
                run_phases(args, step, step_ext, events, periods)
        if args.profile_out:
            prof.export_chrome_trace(args.profile_out.replace("{rank}", str(rank)))
    else:
        for _ in range(args.rounds):
            run_phases(args, step, step_ext, events, periods)

    nccl = torch.cuda.nccl.version()  # a tuple such as (2, 27, 5) in recent torch
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    device = torch.cuda.get_device_name()
    if printing:
        print(f"torch={torch.__version__} nccl={nccl} world={world} device={device!r}{tag}")
        for name, values in periods.items():
            s = sorted(values) or [float("nan")]
            print(f"phase={name} n={len(values)} median_us={statistics.median(s):.2f} "
                  f"p10_us={percentile(s, 0.1):.2f} p90_us={percentile(s, 0.9):.2f}{tag}")
    if args.json:
        record = {"rank": rank, "world": world, "torch": torch.__version__, "nccl": nccl,
                  "device": device, "mode": "profiler" if args.profile else "plain",
                  "phases": periods, "host_speed_us": host_speed_us()}
        with open(args.json.replace("{rank}", str(rank)), "w") as f:
            json.dump(record, f)

    torch.cuda.synchronize()
    dist.barrier()
    if not args.no_destroy:
        dist.destroy_process_group()
    if args.exit == "os._exit":
        sys.stdout.flush()
        os._exit(0)
    elif args.exit == "sigterm":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main()
