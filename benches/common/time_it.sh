# Shared by benches/scale.sh and benches/hta_compare.sh (sourced; uses $WORK and $LIMIT).

# time_it OUT CMD...: appends "seconds kbytes" of one run to OUT, or "dnf" when it ran past
# $LIMIT seconds; stderr goes to OUT.log.
time_it() {
    local out=$1 rc=0
    shift
    /usr/bin/time -v -o "$WORK/time.txt" timeout "$LIMIT" "$@" > /dev/null 2>> "$out.log" || rc=$?
    if [ "$rc" -eq 124 ]; then
        echo dnf >> "$out"
        return
    fi
    if [ "$rc" -ne 0 ]; then
        echo "failed (exit $rc): $*; see $out.log" >&2
        exit 1
    fi
    awk -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i] }
        /Maximum resident set size/ { kb = $2 }
        END { print s, kb }' "$WORK/time.txt" >> "$out"
}
