#!/usr/bin/env bash
# The wheel as a user gets it, without a GPU: pip builds it from this checkout (a release build
# in target/wheel), it is installed into a fresh virtual environment beside pip's
# nvidia-cuda-cupti (as torch installs it), and run from outside the checkout:
#   - the wheel has a manylinux tag, the executable, the injection library and the man pages;
#   - `gapscope run` analyses the bundled traces;
#   - `gapscope record` hands the child the injection library and the CUPTI that pip installed,
#     and says which CUPTI;
#   - the injection library loads into Python and, with no driver here, declines in one line.
# Recording itself needs a GPU: not run here.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel_check: FAIL: $*" >&2; exit 1; }

python3 -m venv "$work/build"
"$work/build/bin/pip" wheel --quiet --no-deps -w "$work/dist" "$src"
wheel="$(ls "$work"/dist/gapscope-*.whl)"
echo "wheel_check: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
case "$(basename "$wheel")" in
  gapscope-*-py3-none-manylinux_*_x86_64.whl) ;;
  *) fail "not a manylinux wheel: $wheel" ;;
esac
"$work/build/bin/python" - "$wheel" <<'PY' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in (".data/scripts/gapscope", ".data/data/lib/gapscope/libgapscope.so",
             ".data/data/share/man/man1/gapscope.1", ".data/data/share/man/man1/gapscope-record.1"):
    if not any(n.endswith(want) for n in names):
        sys.exit(f"missing {want} in {names}")
PY

venv="$work/user"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --no-deps "$wheel" 'nvidia-cuda-cupti==13.0.85'
cd "$work"
unset GAPSCOPE_INJECTION_LIB CUPTI_LIB VIRTUAL_ENV CONDA_PREFIX
"$venv/bin/gapscope" --version

"$venv/bin/gapscope" run -o "$work/out" > "$work/run.out" 2> "$work/run.err" \
  || fail "gapscope run: $(cat "$work/run.err")"
grep -q "analysing the bundled traces" "$work/run.err" || fail "run did not analyse the bundled traces"
[ -s "$work/out/report.md" ] || fail "run wrote no report.md"

child="$("$venv/bin/gapscope" record -o "$work/traces" -- "$venv/bin/python" -c \
  'import os; print(os.environ["CUDA_INJECTION64_PATH"], os.environ["CUPTI_LIB"])' 2> "$work/record.err")" \
  || fail "gapscope record: $(cat "$work/record.err")"
cupti="$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/lib/libcupti.so.13)"
[ "$child" = "$venv/lib/gapscope/libgapscope.so $cupti" ] || fail "the child got: $child"
grep -qF "gapscope: note: using CUPTI from $cupti (API version 130001; found through the Python environment $venv of the command's interpreter $venv/bin/python)" \
  "$work/record.err" || fail "record's note: $(cat "$work/record.err")"
cat "$work/record.err"

if ! "$venv/bin/python" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2> /dev/null; then
  result="$(CUPTI_LIB="$cupti" GAPSCOPE_OUT="$work/traces" "$venv/bin/python" -c \
    "import ctypes; print(ctypes.CDLL('$venv/lib/gapscope/libgapscope.so').InitializeInjection())" \
    2> "$work/inject.err")"
  [ "$result" = 0 ] && [ "$(wc -l < "$work/inject.err")" = 1 ] \
    && grep -q "^gapscope: warning: not tracing this process: cannot load the CUDA driver library libcuda.so.1" "$work/inject.err" \
    || fail "the injection library without a driver: $result $(cat "$work/inject.err")"
fi
echo "wheel_check: ok"
