#!/bin/bash
# Builds benches/cupti_attach_cost.cu with nvcc and runs it in PROCS separate processes per mode
# and graph size, then prints, per mode, size, phase and graph: n (processes), the median over
# processes of each process's median host time per cudaGraphLaunch, its [min–max], and the
# median over processes of (phase − the same process's plain) per launch and per node.
#
#   bash benches/cupti_attach_cost.sh [OUT_DIR]
# Environment: PROCS (default 6), NODES (default "6 24 96"), LAUNCHES (default 400),
# MODES (default "subscribe activity kernels"; PIECE+PIECE… modes pause what `gapscope record`
# enables piece by piece, see the .cu), CUDA_HOME (default /usr/local/cuda),
# GPU (CUDA_VISIBLE_DEVICES for the runs, default 0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-cupti-attach-cost}
procs=${PROCS:-6}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out"
include=$(dirname "$(find -L "$cuda" -name cupti.h -print -quit 2>/dev/null)")
lib=$(dirname "$(find -L "$cuda" -name 'libcupti.so*' -print -quit 2>/dev/null)")
if [ "$include" = . ] || [ "$lib" = . ] || ! command -v nvcc >/dev/null; then
  echo "error: needs nvcc and CUPTI under CUDA_HOME=$cuda" >&2
  exit 2
fi
nvcc -O2 -std=c++17 -I"$include" -o "$out/cupti_attach_cost" "$here/cupti_attach_cost.cu" \
  -L"$lib" -lcupti -Xlinker -rpath="$lib"
: > "$out/runs.txt"
for mode in ${MODES:-subscribe activity kernels}; do
  for nodes in ${NODES:-6 24 96}; do
    for _ in $(seq "$procs"); do
      CUDA_VISIBLE_DEVICES=${GPU:-0} timeout 60 "$out/cupti_attach_cost" "$mode" "$nodes" \
        "${LAUNCHES:-400}" >> "$out/runs.txt" 2>> "$out/stderr.txt" || echo "run failed: $mode $nodes" >&2
      echo "end" >> "$out/runs.txt"
    done
  done
done
python3 - "$out/runs.txt" <<'PY'
import re, statistics, sys
from collections import defaultdict
host, extra, faults, runs = defaultdict(list), defaultdict(list), defaultdict(int), defaultdict(int)
plain = None
for line in open(sys.argv[1]):
    if line.startswith("end"):
        plain = None
        continue
    f = dict(kv.split("=", 1) for kv in line.split())
    key = (f["mode"], int(f["nodes"]), f["phase"], f["graph"])
    runs[key[:2]] += key[2:] == ("plain", "early")
    if "fault" in f:
        faults[key] += 1
        continue
    us = float(f["host_us"])
    host[key].append(us)
    if f["phase"] == "plain" and f["graph"] == "early":
        plain = us
    elif plain is not None:
        extra[key].append(us - plain)
print("| mode | nodes | phase | graph | n | host µs per launch, median [min–max] "
      "| + µs vs plain | + µs per node | faults |")
print("|---|--:|---|---|--:|---|--:|--:|--:|")
for key in sorted(set(host) | set(faults), key=lambda k: (k[0], k[1], ["plain", "attached", "paused", "detached"].index(k[2]), k[3])):
    v, e = host.get(key, []), extra.get(key, [])
    cell = f"{statistics.median(v):.2f} [{min(v):.2f}–{max(v):.2f}]" if v else "—"
    more = f"{statistics.median(e):+.2f}" if e else "—"
    per_node = f"{statistics.median(e) / key[1]:+.3f}" if e else "—"
    fault = f"{faults[key]} of {runs[key[:2]]}" if faults.get(key) else ""
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(v)} | {cell} | {more} | {per_node} | {fault} |")
PY
