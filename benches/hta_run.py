"""Times HTA (HolisticTraceAnalysis) on one trace folder: load + idle-time breakdown of rank 0.

Usage: python hta_run.py TRACE_DIR   (run by benches/hta_compare.sh under /usr/bin/time -v)
Prints one line on stderr: load and analysis seconds, and the idle-time table size.
"""

import sys
import time

from hta.trace_analysis import TraceAnalysis


def main() -> None:
    trace_dir = sys.argv[1]
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir)
    t1 = time.perf_counter()
    result = analysis.get_idle_time_breakdown(ranks=[0], visualize=False)
    t2 = time.perf_counter()
    table = result[0] if isinstance(result, tuple) else result
    print(
        f"hta: load {t1 - t0:.2f} s, idle-time breakdown {t2 - t1:.2f} s, "
        f"{len(table)} rows",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
