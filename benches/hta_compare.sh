#!/usr/bin/env bash
# gapscope vs HTA (HolisticTraceAnalysis 0.5.0) on synthetic torch.profiler (Kineto) traces.
# A benchmark, not a test: CI does not run it. Needs python3 and PyPI (for the throwaway venv).
#
#   benches/hta_compare.sh                  # all cases, 3 runs each
#   RUNS=5 benches/hta_compare.sh 100k-10   # one case
#   RUNS=3 GAPSCOPE_RUNS=9 benches/hta_compare.sh 1m-80   # fewer of the slow HTA runs
#   LIMIT=600 benches/hta_compare.sh        # give up on a run after 600 s (default 900)
#
# Cases: 100k-10 (100k kernels, 10 ProfilerStep annotations), 100k-12500, 1m-80.
# Each trace lives alone in its folder as rank-0.json (HTA reads every *.json of a folder and
# takes the rank from "distributedInfo": {"rank": 0}). Timed by benches/common/time_run.py: wall time
# and peak RSS of `TraceAnalysis(trace_dir=...)` + `get_idle_time_breakdown(ranks=[0])`, and of
# `gapscope analyze FILE --json > /dev/null` (import + analysis + JSON report). Prints n, the
# median and the min-max of each, and the HTA/gapscope ratios. Traces are kept in $WORK
# (default /tmp/gapscope-hta; the 1M-kernel one is about 690 MB).
set -euo pipefail

RUNS=${RUNS:-3}
GAPSCOPE_RUNS=${GAPSCOPE_RUNS:-$RUNS} # gapscope's runs are cheap: more of them narrow its spread
LIMIT=${LIMIT:-900} # seconds per run; a run past it counts as "did not finish"
WORK=${WORK:-/tmp/gapscope-hta}
VENV=${VENV:-/tmp/hta-venv}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(100k-10 100k-12500 1m-80)

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import hta' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q HolisticTraceAnalysis==0.5.0
fi
(cd "$ROOT" && cargo build -q --release --example gen_kineto && cargo build -q --release --bin gapscope)
GEN="$ROOT/target/release/examples/gen_kineto"
GAPSCOPE="$ROOT/target/release/gapscope"
mkdir -p "$WORK"

# time_it OUT CMD...: one timed run (benches/common/time_it.sh).
. "$(dirname "$0")/common/time_it.sh"

# summary FILE: "n=3 time median 1.23 s [1.20-1.30], peak RSS median 456 MB [450-460]"
summary() {
    python3 - "$1" "$LIMIT" <<'PY'
import statistics, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
dnf = sum(1 for l in lines if l == ["dnf"])
rows = [tuple(map(float, l)) for l in lines if l != ["dnf"]]
if not rows:
    print(f"n={dnf}: none finished within {sys.argv[2]} s")
    sys.exit()
t = [r[0] for r in rows]; m = [r[1] / 1024 for r in rows]
print(f"n={len(rows)} time median {statistics.median(t):.3f} s [{min(t):.3f}-{max(t):.3f}], "
      f"peak RSS median {statistics.median(m):.0f} MB [{min(m):.0f}-{max(m):.0f}]"
      + (f"; {dnf} more did not finish within {sys.argv[2]} s" if dnf else ""))
PY
}

ratio() {
    python3 - "$1" "$2" <<'PY'
import statistics, sys
def med(p, i):
    v = [float(l.split()[i]) for l in open(p) if l.strip() and l.split() != ["dnf"]]
    return statistics.median(v) if v else None
h, g = sys.argv[1], sys.argv[2]
if med(h, 0) is None or med(g, 0) is None:
    print("HTA/gapscope: no ratio (a tool did not finish)")
else:
    print(f"HTA/gapscope: time {med(h, 0) / med(g, 0):.1f}x, peak RSS {med(h, 1) / med(g, 1):.1f}x")
PY
}

for case in "${CASES[@]}"; do
    case $case in
        100k-10) kernels=100000 annotations=10 ;;
        100k-12500) kernels=100000 annotations=12500 ;;
        1m-80) kernels=1000000 annotations=80 ;;
        *) echo "unknown case $case (100k-10, 100k-12500, 1m-80)" >&2; exit 2 ;;
    esac
    dir="$WORK/$case"
    mkdir -p "$dir"
    trace="$dir/rank-0.json"
    [ -s "$trace" ] || "$GEN" --kernels "$kernels" --annotations "$annotations" -o "$trace"
    size=$(du -m "$trace" | cut -f1)
    : > "$WORK/$case.hta"
    : > "$WORK/$case.gapscope"
    : > "$WORK/$case.hta.log"
    : > "$WORK/$case.gapscope.log"
    for r in $(seq $((RUNS > GAPSCOPE_RUNS ? RUNS : GAPSCOPE_RUNS))); do
        [ "$r" -gt "$GAPSCOPE_RUNS" ] || time_it "$WORK/$case.gapscope" "$GAPSCOPE" analyze "$trace" --json
        [ "$r" -gt "$RUNS" ] || time_it "$WORK/$case.hta" "$VENV/bin/python" "$ROOT/benches/hta_run.py" "$dir"
    done
    echo "== $case: $kernels kernels, $annotations annotations, ${size} MB"
    echo "gapscope: $(summary "$WORK/$case.gapscope")"
    echo "HTA:      $(summary "$WORK/$case.hta")"
    ratio "$WORK/$case.hta" "$WORK/$case.gapscope"
done
