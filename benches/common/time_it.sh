# Shared by benches/scale.sh and benches/hta_compare.sh (sourced; uses $WORK and $LIMIT).

# time_it OUT CMD...: appends "seconds kbytes" of one run to OUT, or "dnf" when it ran past
# $LIMIT seconds; stderr goes to OUT.log (benches/common/time_run.py measures).
time_it() {
    local out=$1 rc=0
    shift
    python3 "$(dirname "${BASH_SOURCE[0]}")/time_run.py" "$LIMIT" "$out" "$@" || rc=$?
    if [ "$rc" -eq 124 ]; then
        return
    fi
    if [ "$rc" -ne 0 ]; then
        echo "failed (exit $rc): $*; see $out.log" >&2
        exit 1
    fi
}
