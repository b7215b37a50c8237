#!/usr/bin/env bash
# How `gapscope analyze` scales (issue 29): wall time and peak RSS of whole processes on
# synthetic torch.profiler (Kineto) traces made by examples/gen_kineto.rs, in one run:
#
#   100k kernels (66 MB, 10 steps)     gapscope, and HTA 0.5.0 on the same file when it installs
#   the same 100k kernels in torch's own layout (92 MB: each event over several lines, as
#                                      torch's profiler writes them), gapscope and HTA
#   1 M kernels (669 MB, 80 steps)     gapscope; and the size of its rank summary (--summary)
#   8 ranks x 1 M kernels (5.3 GB)     gapscope on the folder of the 8 rank files
#
# A benchmark, not a test: CI does not run it. With BASE=path/to/another/gapscope (e.g. the
# main branch's, built beforehand), every row is measured for both binaries, run by run in
# turn, so that both see the same load.
#
#   benches/scale.sh                                    # RUNS=5 runs per row (3 of the 8-rank row)
#   BASE=/tmp/gapscope-main RUNS=5 BIG_RUNS=3 benches/scale.sh
#   NEW=/tmp/gapscope-branch BASE=/tmp/gapscope-main benches/scale.sh   # two copied binaries
#   NO_HTA=1 benches/scale.sh                           # without HTA (its runs take minutes)
#
# Timed by benches/common/time_run.py (wall time to the microsecond, peak RSS):
# `gapscope analyze FILE --json > /dev/null` (import, analysis, JSON report); HTA as
# benches/hta_compare.sh times it. Prints n, the median and min-max of
# each, and peak RSS per kernel. The traces go to $WORK (default /tmp/gapscope-scale); the
# 8-rank folder (5.6 GB) is deleted at the end unless KEEP=1, and skipped when the disk has
# less room than it needs.
set -euo pipefail

RUNS=${RUNS:-5}
BIG_RUNS=${BIG_RUNS:-3}
HTA_RUNS=${HTA_RUNS:-3}
LIMIT=${LIMIT:-900}
WORK=${WORK:-/tmp/gapscope-scale}
VENV=${VENV:-/tmp/hta-venv}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${BASE:-}

# NEW: the binary measured (default: this tree's release build, built here).
if [ -z "${NEW:-}" ]; then
    (cd "$ROOT" && cargo build -q --release --bin gapscope)
    NEW="$ROOT/target/release/gapscope"
fi
# GEN: the trace generator (default: built here; only run for traces not yet in $WORK).
if [ -z "${GEN:-}" ]; then
    (cd "$ROOT" && cargo build -q --release --example gen_kineto)
    GEN="$ROOT/target/release/examples/gen_kineto"
fi
mkdir -p "$WORK/100k" "$WORK/100k-torch" "$WORK/1m"
[ -s "$WORK/100k/rank-0.json" ] || "$GEN" --kernels 100000 --annotations 10 -o "$WORK/100k/rank-0.json"
[ -s "$WORK/100k-torch/rank-0.json" ] || "$GEN" --layout torch --kernels 100000 --annotations 10 -o "$WORK/100k-torch/rank-0.json"
[ -s "$WORK/1m/rank-0.json" ] || "$GEN" --kernels 1000000 --annotations 80 -o "$WORK/1m/rank-0.json"

HTA=
if [ -z "${NO_HTA:-}" ]; then
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import hta' 2>/dev/null; then
        HTA="$VENV/bin/python"
    elif python3 -m venv "$VENV" && "$VENV/bin/pip" install -q HolisticTraceAnalysis==0.5.0; then
        HTA="$VENV/bin/python"
    else
        echo "HTA did not install: its row is left out" >&2
    fi
fi

# The 8-rank folder: copies of the 1 M-kernel trace, when the disk has room for them.
RANKS8="$WORK/8x1m"
one=$(stat -c %s "$WORK/1m/rank-0.json")
if [ ! -s "$RANKS8/rank-7.json" ]; then
    free=$(df --output=avail -B1 "$WORK" | tail -1)
    if [ "$free" -gt $((9 * one)) ]; then
        mkdir -p "$RANKS8"
        for r in 0 1 2 3 4 5 6 7; do cp "$WORK/1m/rank-0.json" "$RANKS8/rank-$r.json"; done
    else
        echo "not enough disk in $WORK for 8 x $one bytes: the 8-rank row is left out" >&2
        RANKS8=
    fi
fi

# time_it OUT CMD...: one timed run (benches/common/time_it.sh).
. "$(dirname "$0")/common/time_it.sh"

TOOLS=(new)
[ -n "$BASE" ] && TOOLS=(base new)
binary() { if [ "$1" = base ]; then echo "$BASE"; else echo "$NEW"; fi; }

rm -f "$WORK"/*.times "$WORK"/*.times.log
for r in $(seq "$RUNS"); do
    for tool in "${TOOLS[@]}"; do
        time_it "$WORK/100k.$tool.times" "$(binary "$tool")" analyze "$WORK/100k/rank-0.json" --json
        time_it "$WORK/100kt.$tool.times" "$(binary "$tool")" analyze "$WORK/100k-torch/rank-0.json" --json
        time_it "$WORK/1m.$tool.times" "$(binary "$tool")" analyze "$WORK/1m/rank-0.json" --json
    done
    if [ -n "$HTA" ] && [ "$r" -le "$HTA_RUNS" ]; then
        time_it "$WORK/100k.hta.times" "$HTA" "$ROOT/benches/hta_run.py" "$WORK/100k"
        time_it "$WORK/100kt.hta.times" "$HTA" "$ROOT/benches/hta_run.py" "$WORK/100k-torch"
    fi
done
if [ -n "$RANKS8" ]; then
    for r in $(seq "$BIG_RUNS"); do
        for tool in "${TOOLS[@]}"; do
            time_it "$WORK/8x1m.$tool.times" "$(binary "$tool")" analyze "$RANKS8" --json
        done
    done
fi
"$NEW" analyze "$WORK/1m/rank-0.json" --summary "$WORK/1m.summary.json" > /dev/null 2>&1

python3 - "$WORK" "$one" "$(stat -c %s "$WORK/100k/rank-0.json")" "$(stat -c %s "$WORK/1m.summary.json")" "$(stat -c %s "$WORK/100k-torch/rank-0.json")" <<'PY'
import os, statistics, sys
work, one, small, summary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
small_torch = int(sys.argv[5])
rows = [("100k", "100k kernels, %d MB" % (small // 10**6), 100_000, "", "(HTA: time, RSS)"),
        ("100kt", "100k kernels in torch's layout, %d MB" % (small_torch // 10**6), 100_000, "", ""),
        ("1m", "1 M kernels, %d MB" % (one // 10**6), 1_000_000, "<= 0.8 s, <= 300 MB", ""),
        ("8x1m", "8 ranks x 1 M kernels, %.1f GB" % (8 * one / 1e9), 8_000_000, "<= 8 s, <= 1 GB", "")]
def load(path):
    if not os.path.exists(path):
        return None
    lines = [l.split() for l in open(path) if l.strip()]
    done = [tuple(map(float, l)) for l in lines if l != ["dnf"]]
    return done, len(lines) - len(done)
def med(v):
    return statistics.median(v)
print("| input | binary | n | wall s median [min-max] | peak RSS MB median [min-max] | RSS bytes/kernel | goal |")
print("|---|---|--:|---|---|--:|---|")
medians = {}
for key, label, kernels, goal, _ in rows:
    for tool in ("base", "new", "hta"):
        got = load(f"{work}/{key}.{tool}.times")
        if got is None:
            continue
        done, dnf = got
        if not done:
            print(f"| {label} | {tool} | 0 | none finished ({dnf} past the limit) | | | |")
            continue
        t = [d[0] for d in done]; m = [d[1] * 1024 / 1e6 for d in done]
        medians[(key, tool)] = (med(t), med(m))
        print(f"| {label} | {tool} | {len(done)}{f' (+{dnf} dnf)' if dnf else ''} | "
              f"{med(t):.3f} [{min(t):.3f}-{max(t):.3f}] | {med(m):.0f} [{min(m):.0f}-{max(m):.0f}] | "
              f"{med(m) * 1e6 / kernels:.0f} | {goal if tool != 'hta' else ''} |")
for key, label, *_ in rows:
    if (key, "base") in medians and (key, "new") in medians:
        (bt, bm), (nt, nm) = medians[(key, "base")], medians[(key, "new")]
        print(f"{label}: new/base wall {nt / bt:.2f}x, peak RSS {nm / bm:.2f}x")
for key, label in (("100k", "100k kernels"), ("100kt", "100k kernels in torch's layout")):
    if (key, "hta") in medians and (key, "new") in medians:
        (ht, hm), (nt, nm) = medians[(key, "hta")], medians[(key, "new")]
        print(f"{label}: HTA/gapscope wall {ht / nt:.1f}x, peak RSS {hm / nm:.1f}x")
print(f"rank summary of the 1 M-kernel trace: {summary} bytes, {100 * summary / one:.2f} % of the trace")
PY

if [ -z "${KEEP:-}" ] && [ -n "$RANKS8" ]; then
    rm -rf "$RANKS8"
fi
