"""The hostile-programs suite (issue 25 f): each program below under `gapscope record` with
default settings, on a GPU, one command:

  python benches/hostile/run.py --gapscope target/release/gapscope --out /tmp/hostile \
      [--python python3] [--only NAME,NAME] [--launches 10000000]

For every case it prints one row: the program's own counts (its `hostile: {...}` line), what
the trace kept (kernels eager/replayed, markers, dropped records), the exit codes (the
program's, as `gapscope record` returns it, against the expected one), the trace's size and
what the `wrote` line said was lost. Writes OUT/results.json and OUT/table.md.
"""
import argparse
import glob
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cases(py, launches_bin, n_launches):
    s = lambda name: os.path.join(HERE, name)  # noqa: E731
    out = [
        # name, command, extra args to record, expected exit code, signal to send to gapscope
        ("threads_capture", [py, s("threads_capture.py")], ["--trace-budget", "0"], 0, None),
        ("threads_capture_default", [py, s("threads_capture.py")], [], 0, None),
        ("threads_capture_in_thread", [py, s("threads_capture.py"), "--where", "thread"],
         ["--trace-budget", "0"], 0, None),
        ("threads_capture_thread_local",
         [py, s("threads_capture.py"), "--capture-mode", "thread_local"],
         ["--trace-budget", "0"], 0, None),
        ("threads_no_graphs", [py, s("threads_capture.py"), "--no-graphs"], [], 0, None),
        ("device_assert", [py, s("device_assert.py")], [], 1, None),
        ("segv", [py, s("segv.py")], [], 128 + signal.SIGSEGV, None),
        ("fork_after_init", [py, s("fork_after_init.py")], [], 0, None),
        ("device_reset", [py, s("device_reset.py")], [], 0, None),
        ("exit_from_thread", [py, s("exit_from_thread.py")], [], 7, None),
        ("sigint_to_record", [py, s("signal_loop.py")], [], 128 + signal.SIGINT,
         (signal.SIGINT, 3.0)),
        ("sigterm_to_record", [py, s("signal_loop.py")], [], 128 + signal.SIGTERM,
         (signal.SIGTERM, 3.0)),
    ]
    for extra in ("long_loop.py", "sigkill.py"):  # the bounded-trace and SIGKILL cases
        if os.path.exists(s(extra)):
            name = extra[:-3]
            out.append((name, [py, s(extra)], [], 128 + signal.SIGKILL if name == "sigkill" else 0,
                        None))
    if launches_bin:
        out.append(("launches", [launches_bin, str(n_launches)], [], 0, None))
    return out


# "wrote PATH (K kernels, M markers, D dropped records[; not adding up: …])[; how it was written]"
WROTE = re.compile(
    r"wrote (\S+) \((\d+) kernels, (\d+) markers, (\d+) dropped records(.*?)\)(;.*)?$")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def run_case(gapscope, out_dir, name, cmd, record_args, expected_rc, send):
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    full = [gapscope, "record", "-o", folder, *record_args, "--", *cmd]
    start = time.time()
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    early = ""
    if send:
        # The signal goes to gapscope only, --after seconds after the program said it runs
        # (its `hostile:` line: CUDA is initialised by then).
        sig, after = send
        for line in proc.stdout:
            early += line
            if line.startswith("hostile: "):
                break
        time.sleep(after)
        proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=400)
        stdout = early + stdout
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    wall = time.time() - start
    rc = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    own = {}
    for line in stdout.splitlines():
        if line.startswith("hostile: "):
            own = json.loads(line[len("hostile: "):])
    row = {"case": name, "command": " ".join(full), "rc": rc, "expected_rc": expected_rc,
           "wall_s": round(wall, 1), "program": own, "stderr_tail": stderr.splitlines()[-8:],
           "traces": []}
    for line in stderr.splitlines():
        m = WROTE.search(line)
        if m:
            row.setdefault("wrote", []).append(
                {"kernels": int(m[2]), "markers": int(m[3]), "dropped": int(m[4]),
                 "not_adding_up": m[5].lstrip("; "), "how": (m[6] or "").lstrip("; ")})
    for path in sorted(glob.glob(os.path.join(folder, "trace-*.json*"))):
        try:
            t = load(path)
        except (OSError, ValueError) as e:
            row["traces"].append({"file": os.path.basename(path), "error": str(e)})
            continue
        # Kernels are rows [start, end, device, stream, corr, name, graph, node] (schema.rs).
        kernels = t.get("kernels", [])
        row["traces"].append({
            "file": os.path.basename(path), "bytes": os.path.getsize(path),
            "eager_kernels": sum(1 for k in kernels if not k[6]),
            "replayed_kernels": sum(1 for k in kernels if k[6]),
            "api_calls": len(t.get("api_calls", [])), "markers": len(t.get("markers", [])),
            "graph_nodes": len(t.get("graph", {}).get("nodes", [])),
            "dropped": t.get("dropped_records", 0),
            "notes": t.get("metadata", {}).get("notes", [])[:12],
        })
    with open(os.path.join(folder, "row.json"), "w") as f:
        json.dump(row, f, indent=1)
    return row


def table(rows):
    lines = ["| case | program's counts | trace kept (eager / replayed kernels, markers, dropped) "
             "| exit (expected) | trace size | lost, as the wrote line says |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        own = {k: v for k, v in r["program"].items() if k != "program"}
        kept = "; ".join(f"{t.get('eager_kernels')} / {t.get('replayed_kernels')}, "
                         f"{t.get('markers')}, {t.get('dropped')}" for t in r["traces"]) or "no trace"
        size = "; ".join(f"{t.get('bytes', 0) / 1e6:.2f} MB" for t in r["traces"]) or "-"
        lost = "; ".join((w["not_adding_up"] or "nothing")
                         + (" (from the records handed over)" if "handed over" in w.get("how", "")
                            else "")
                         for w in r.get("wrote", [])) or "-"
        lines.append(f"| {r['case']} | {json.dumps(own)} | {kept} | {r['rc']} ({r['expected_rc']}) "
                     f"| {size} | {lost} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gapscope", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--only", default="")
    p.add_argument("--launches", type=int, default=10_000_000)
    p.add_argument("--launches-bin", default="", help="the built benches/hostile/launches.cu")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    rows = []
    for name, cmd, rec, rc, send in cases(args.python, args.launches_bin, args.launches):
        if only and name not in only:
            continue
        row = run_case(args.gapscope, args.out, name, cmd, rec, rc, send)
        rows.append(row)
        print(f"{name}: rc {row['rc']} (expected {rc}), {row['wall_s']} s, traces "
              f"{[(t.get('eager_kernels'), t.get('replayed_kernels'), t.get('markers')) for t in row['traces']]}, "
              f"program {row['program']}", flush=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(rows, f, indent=1)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
