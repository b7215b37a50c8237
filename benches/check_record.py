"""Checks a trace that `gapscope record` wrote of examples/torch_graphs.py against what the run
should hold: the device named, no dropped records, the trace budget's own record
(`metadata.sampling`) matching the program's step counts, the external event nodes tagged with
their creating call (and library call), host synchronisations, and the budget's switch note.

  python3 benches/check_record.py TRACE --budget 64 --eager 100 --replays 100 --graphs 2 \\
      --external-wait cudaStreamWaitEvent [--inside ncclAllGather]

Prints one PASS/FAIL line per check; exit 0 when all pass, 1 otherwise, 2 on usage errors or
an unreadable trace. benches/gpu_check.sh runs it on fresh recordings. Standard library only.
"""
import argparse
import json
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--budget", type=int, required=True, help="the --trace-budget of the run")
    p.add_argument("--eager", type=int, required=True, help="eager steps (step ranges) run")
    p.add_argument("--replays", type=int, required=True,
                   help="launches of each replayed graph")
    p.add_argument("--graphs", type=int, default=1,
                   help="replayed graphs expected to go over the budget (default %(default)s)")
    p.add_argument("--external-wait", metavar="API",
                   help="an external event-wait node must exist, created by this API call")
    p.add_argument("--inside", metavar="LIBRARY_CALL",
                   help="... and tagged with this library call (e.g. ncclAllGather)")
    p.add_argument("--no-external", action="store_true",
                   help="no external event node may exist (e.g. NCCL_GRAPH_MIXING_SUPPORT=0)")
    p.add_argument("--schedule", choices=("windows", "first"), default="windows",
                   help="the recorder's sampling: the first N then windows spread over the run "
                        "(from 2026-12-01), or only the first N (traces recorded before)")
    args = p.parse_args(argv)
    global SCHEDULE
    SCHEDULE = args.schedule
    return args


SCHEDULE = "windows"


def sampled(n, first):
    """budget::sampled in src/record/cupti/budget.rs: the n-th occurrence (0-based) is traced."""
    if first == 0 or n < first:
        return True
    window = max(first // 4, 1)
    i, first_windows = n // window, -(-first // window)
    level_start = first_windows << ((i // first_windows).bit_length() - 1)
    spacing = -(-level_start // 2)
    return (i - level_start) % spacing == 0


def traced_of(budget, count):
    if budget == 0:
        return count
    if SCHEDULE == "first":
        return min(budget, count)
    return sum(1 for n in range(count) if sampled(n, budget))


def checks(trace, args):
    """[(name, ok, detail)] for one trace."""
    out = []
    meta = trace.get("metadata", {})
    device = (meta.get("device") or {}).get("name")
    out.append(("device named", bool(device), device or "metadata.device is null"))
    driver = (meta.get("versions") or {}).get("driver")
    out.append(("driver version filled", bool(driver), driver or "metadata.versions.driver is null"))
    dropped = trace.get("dropped_records", 0)
    out.append(("no dropped records", dropped == 0, f"{dropped} dropped"))

    sampling = meta.get("sampling")
    if sampling is None:
        out.append(("metadata.sampling written", False, "absent"))
    else:
        out.append(("metadata.sampling written", True, json.dumps(sampling)))
        out.append(("sampling budget", sampling.get("budget") == args.budget,
                    f"{sampling.get('budget')} (expected {args.budget})"))
        want_steps = (args.eager, traced_of(args.budget, args.eager))
        got_steps = (sampling.get("steps"), sampling.get("steps_traced"))
        out.append(("eager steps traced", got_steps == want_steps,
                    f"{got_steps[1]} of {got_steps[0]} (expected {want_steps[1]} of "
                    f"{want_steps[0]})"))
        replayed = [g for g in sampling.get("graphs", []) if g.get("launches") == args.replays]
        want = traced_of(args.budget, args.replays)
        ok = len(replayed) == args.graphs and all(g.get("traced") == want for g in replayed)
        out.append(("replayed graphs traced up to the budget", ok,
                    ", ".join(f"exec {g.get('exec')}: {g.get('traced')} of {g.get('launches')}"
                              for g in replayed)
                    + f" (expected {args.graphs} graph(s) at {want} of {args.replays})"))

    strings = trace.get("strings", [])

    def name(i):
        return strings[i] if isinstance(i, int) and 0 <= i < len(strings) else None

    external = [n for n in (trace.get("graph") or {}).get("nodes", []) if n.get("external")]
    kinds = sorted({(n.get("type"), name(n.get("created_by")), name(n.get("library_call")))
                    for n in external}, key=str)
    if args.no_external:
        out.append(("no external event nodes", not external, f"{len(external)}: {kinds}"))
    if args.external_wait:
        waits = [n for n in external if n.get("type") == "event_wait"
                 and name(n.get("created_by")) == args.external_wait
                 and (args.inside is None or name(n.get("library_call")) == args.inside)]
        where = f" inside {args.inside}" if args.inside else ""
        out.append((f"external event-wait nodes created by {args.external_wait}{where}",
                    bool(waits), f"{len(waits)} of {len(external)} external nodes; {kinds}"))

    # Host synchronisations: SYNCHRONIZATION records, or (record's default) the API records of
    # the *Synchronize calls, which the analysis reads instead.
    sync_calls = [a for a in trace.get("api_calls", [])
                  if isinstance(a, list) and len(a) > 4 and "Synchronize" in (name(a[4]) or "")]
    syncs = trace.get("syncs", [])
    out.append(("host synchronisations recorded", bool(syncs or sync_calls),
                f"{len(syncs)} SYNCHRONIZATION records, {len(sync_calls)} *Synchronize API records"))

    if args.budget > 0 and args.replays > args.budget:
        notes = meta.get("notes", [])
        switch = [n for n in notes if "longest pause or resume" in n]
        out.append(("budget switch noted", bool(switch), switch[0] if switch else "no note"))
    return out


def main(argv):
    args = parse_args(argv)
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        print(f"error: {args.trace}: {e}", file=sys.stderr)
        return 2
    results = checks(trace, args)
    for check, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'}  {check}: {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
