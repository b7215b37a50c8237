"""What the example programs share with benches/record_overhead.py: the JSON file of a run's
CUDA-event step periods per phase, the host-speed probe written beside them, and the --json and
--profile switches (torch.profiler with CPU + CUDA activities around the timed phases).

JSON shape: {"rank", "world", "torch", "device", "mode": "plain"|"profiler",
"phases": {PHASE: [µs, ...], "PHASE/host": [µs, ...]}, "host_speed_us", ...}.
"""
import contextlib
import json
import statistics
import time


def add_arguments(parser):
    parser.add_argument("--profile", action="store_true",
                        help="run the timed phases under torch.profiler (CPU + CUDA activities)")
    parser.add_argument("--json", metavar="PATH",
                        help="write the periods per phase as JSON there ({rank} is substituted)")


def profiled(enabled):
    """torch.profiler around the timed phases when `enabled`, else nothing."""
    if not enabled:
        return contextlib.nullcontext()
    import torch
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    return torch.profiler.profile(activities=activities)


def host_speed_us():
    """Median µs of a fixed pure-Python loop (no CUDA): how fast this process runs host code,
    to tell a slow host from a costly profiler when step host times differ between runs."""
    times = []
    for _ in range(21):
        began = time.perf_counter_ns()
        sum(i * i for i in range(20000))
        times.append((time.perf_counter_ns() - began) / 1e3)
    return statistics.median(times)


def write_json(path, phases, profile, rank=0, world=1, **fields):
    """Writes one rank's periods (every step of every phase) to `path` ({rank} substituted)."""
    import torch
    record = {"rank": rank, "world": world, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "mode": "profiler" if profile else "plain",
              **fields, "phases": phases, "host_speed_us": host_speed_us()}
    with open(path.replace("{rank}", str(rank)), "w") as f:
        json.dump(record, f)


def percentile(sorted_values, q):
    """The q-quantile of sorted values, interpolated between the two nearest."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def print_phases(periods):
    """One line per phase: `phase=NAME n=N median_us=… p10_us=… p90_us=…` (interpolated)."""
    for name, values in periods.items():
        s = sorted(values)
        print(f"phase={name} n={len(s)} median_us={statistics.median(s):.2f} "
              f"p10_us={percentile(s, 0.1):.2f} p90_us={percentile(s, 0.9):.2f}")
