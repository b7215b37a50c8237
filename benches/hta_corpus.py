"""gapscope against HTA's public test corpus (HolisticTraceAnalysis `tests/data`): for each trace,
gapscope's answer (cells, period or why none, idle share) and, with --hta, HTA's temporal
breakdown (idle % of the rank's time) and idle-time breakdown, as one Markdown table.

    python3 benches/hta_corpus.py HTA_TESTS_DATA GAPSCOPE [--hta PYTHON_WITH_HTA] [--step-range-case FILE NAME]...

HTA_TESTS_DATA: a checkout's tests/data (every *.json and *.json.gz under it is a case).
GAPSCOPE: the binary. --hta: a Python that imports hta (benches/hta_compare.sh makes one).
A benchmark, not a test: CI does not run it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

# HTA, run once per trace in a folder of its own (HTA reads a folder of rank files).
HTA_SCRIPT = r"""
import json, logging, os, shutil, sys, tempfile
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path = sys.argv[1]
d = tempfile.mkdtemp()
name = os.path.basename(path)
if not (name.endswith('.json') or name.endswith('.json.gz')):
    name += '.json'
shutil.copy(path, os.path.join(d, name))
out = {}
try:
    a = TraceAnalysis(trace_dir=d)
    tb = a.get_temporal_breakdown(visualize=False)
    out['idle_pctg'] = float(tb['idle_time_pctg'].iloc[0])
    out['idle_us'] = float(tb['idle_time(us)'].iloc[0])
except Exception as e:
    out['error'] = (type(e).__name__ + ': ' + str(e)).splitlines()[0][:160]
print(json.dumps(out))
shutil.rmtree(d)
"""


def gapscope(binary, path, args):
    """gapscope's answer for one trace: cells with period or reason and idle share, or its error."""
    run = subprocess.run(
        [binary, "analyze", path, "--json", *args], capture_output=True, text=True
    )
    if run.returncode != 0:
        line = run.stderr.strip().splitlines()[-1].removeprefix("gapscope: error: ")
        return {"error": line.removeprefix(path + ": ")}
    report = json.loads(run.stdout)
    cells = []
    for c in report["cells"]:
        period = c.get("period")
        busy, idle = c.get("busy"), c.get("idle")
        share = None
        if busy and idle and busy["median"] + idle["median"] > 0:
            share = idle["median"] / (busy["median"] + idle["median"])
        cells.append(
            {
                "label": c["label"],
                "steps": c["step_count"],
                "period": period,
                "no_period": c.get("no_period"),
                "idle_share": share,
                "left_out": c["observed"].get("left_out"),
            }
        )
    hint = report["inputs"][0]["steps"].get("step_range_hint")
    return {"cells": cells, "hint": hint, "remedies": len(report["remedies"])}


def hta(python, path):
    run = subprocess.run(
        [python, "-c", HTA_SCRIPT, path], capture_output=True, text=True, timeout=900
    )
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        return {"error": (run.stderr.strip().splitlines() or ["failed"])[-1][:160]}
    return json.loads(lines[-1])


def describe(g):
    if "error" in g:
        return "refused: " + g["error"], "—"
    parts, shares = [], []
    for c in g["cells"]:
        if c["period"]:
            p = c["period"]
            text = f"{c['label']}: {p['median'] / 1e3:.2f} µs n={p['n']}"
        else:
            text = f"{c['label']}: no period ({c['no_period']})"
        if c["left_out"]:
            text += f" ⚠ leaves out {c['left_out']['share'] * 100:.1f} %"
        parts.append(text)
        if c["idle_share"] is not None:
            shares.append(f"{c['idle_share'] * 100:.1f} %")
    if g["hint"]:
        parts.append(f"hint: `--step-range {g['hint']['name']}` ({g['hint']['ranges']} ranges)")
    return "; ".join(parts), ", ".join(shares) or "—"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("gapscope")
    ap.add_argument("--hta")
    # One more row: FILE analysed with `--step-range NAME`.
    ap.add_argument("--step-range-case", nargs=2, action="append", default=[])
    a = ap.parse_args()
    cases = []
    for root, _, files in os.walk(a.data):
        for f in files:
            if f.endswith(".json") or f.endswith(".json.gz"):
                cases.append((os.path.join(root, f), []))
    cases.sort()
    cases += [(f, ["--step-range", name]) for f, name in a.step_range_case]
    print("| trace (tests/data/…) | gapscope: cells, period or why none | gapscope idle share | HTA idle % (temporal breakdown) |")
    print("|---|---|--:|--:|")
    for path, args in cases:
        g = gapscope(a.gapscope, path, args)
        answer, share = describe(g)
        theirs = "not run"
        if a.hta:
            h = hta(a.hta, path)
            theirs = f"{h['idle_pctg']:.2f} %" if "idle_pctg" in h else "error: " + h["error"]
        name = os.path.relpath(path, a.data) + (f" --step-range '{args[1]}'" if args else "")
        print(f"| `{name}` | {answer} | {share} | {theirs} |".replace("\n", " "))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
