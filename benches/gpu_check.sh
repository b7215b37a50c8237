#!/bin/bash
# The recorder on a GPU, in one command: records examples/torch_graphs.py under `gapscope record`
# (one GPU; with two or more GPUs also two ranks with NCCL graph mixing on and off) and checks
# each trace with benches/check_record.py, each run's exit, `analyze` and (two ranks) `compare`.
#
#   bash benches/gpu_check.sh GAPSCOPE [OUT_DIR]
# GAPSCOPE: the gapscope executable (libgapscope.so beside it, or GAPSCOPE_INJECTION_LIB).
# PYTHON (default python3) must have torch; LIBTEST, when set, is the library's test binary
# (`cargo test --release --lib --no-run`), whose GPU tests run first. EAGER, REPLAYS, FRESH
# (default 100, 100, 10) size the program; the default trace budget (64) is assumed. Exit 0
# when every check passes, 1 otherwise. Keep OUT_DIR's logs and traces for the issue note.
set -uo pipefail
gapscope=${1:?usage: bash benches/gpu_check.sh GAPSCOPE [OUT_DIR]}
out=${2:-gpu-check}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
program="$here/../examples/torch_graphs.py"
mkdir -p "$out"
failures=0
step() { echo "== $*"; }
result() {  # NAME RC
  if [ "$2" = 0 ]; then echo "PASS  $1"; else echo "FAIL  $1 (exit $2)"; failures=$((failures + 1)); fi
}

if [ -n "${LIBTEST:-}" ]; then
  step "library GPU tests"
  timeout 120 "$LIBTEST" --ignored --test-threads 1 --skip large_trace_streams > "$out/gputests.txt" 2>&1
  rc=$?; grep -E "^test |test result" "$out/gputests.txt"; result "GPU tests" $rc
fi

budget=64 eager=${EAGER:-100} replays=${REPLAYS:-100} fresh=${FRESH:-10}
step "one GPU: record torch_graphs ($eager eager steps, $replays replays, $fresh fresh graphs)"
CUDA_VISIBLE_DEVICES=${GPU:-0} timeout -k 5 120 "$gapscope" record -o "$out/one" --step-range decode_step \
  -- "$python" "$program" --eager-steps $eager --replays $replays --fresh $fresh > "$out/one.log" 2>&1
result "record exits by itself" $?
"$python" "$here/check_record.py" "$out/one/trace-0.json" --schedule "${SCHEDULE:-windows}" --budget $budget --eager $eager \
  --replays $replays --graphs 2 --external-wait cudaStreamWaitEvent
result "trace checks" $?
"$gapscope" analyze "$out/one/trace-0.json" > "$out/one-analyze.txt" 2>&1
result "analyze" $?
grep -A6 "^Cells" "$out/one-analyze.txt"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ "$gpus" -ge 2 ]; then
  for mixing in 1 0; do
    step "two ranks, NCCL_GRAPH_MIXING_SUPPORT=$mixing"
    NCCL_GRAPH_MIXING_SUPPORT=$mixing timeout -k 5 180 "$gapscope" record -o "$out/mix$mixing" \
      --step-range decode_step -- "$python" -m torch.distributed.run --nproc-per-node 2 "$program" \
      --eager-steps $eager --replays $replays --fresh $fresh > "$out/mix$mixing.log" 2>&1
    result "two-rank record exits by itself (mixing $mixing)" $?
    for rank in 0 1; do
      if [ $mixing = 1 ]; then nodes=(--external-wait cudaStreamWaitEvent --inside ncclAllGather)
      else nodes=(--no-external); fi
      "$python" "$here/check_record.py" "$out/mix$mixing/trace-$rank.json" --schedule "${SCHEDULE:-windows}" --budget $budget \
        --eager $eager --replays $replays "${nodes[@]}"
      result "trace checks, mixing $mixing rank $rank" $?
    done
  done
  "$gapscope" compare "$out/mix0" "$out/mix1" -o "$out/compare" > "$out/compare.txt" 2>&1
  rc=$?
  # Exit 3 is a slowdown beyond the threshold, which mixing may well be: the check is that the
  # compare ran and names NCCL's event-wait node.
  [ $rc = 0 ] || [ $rc = 3 ]; result "compare runs" $?
  grep -q "cudaStreamWaitEvent inside ncclAllGather" "$out/compare/compare.md"
  result "compare names the event-wait node inside ncclAllGather" $?
else
  step "fewer than 2 GPUs: two-rank checks skipped"
fi

echo "== $failures failure(s)"
[ $failures = 0 ]
