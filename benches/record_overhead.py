"""Overhead of `gapscope record` and of torch.profiler on a program's own step periods.

Runs PROGRAM (default examples/torch_graphs.py) several ways per round, interleaved so that
drift hits every mode alike: plain, under `gapscope record`, under --profile (torch.profiler),
and under `gapscope record` with each --variant's extra environment. The program writes its
CUDA-event step periods per phase to JSON (--json, {rank} substituted); this script pools them
and prints median/p10/p90 per phase and mode, ratios to plain, and the overhead targets.

  python3 benches/record_overhead.py --gapscope target/release/gapscope
  python3 benches/record_overhead.py --gapscope target/release/gapscope --nproc 2 \\
      --variant nodriver=GAPSCOPE_CUPTI_SKIP=DRIVER -- examples/torch_graphs.py --size 2048

Exit status: 0 when the measurement ran (targets may still fail), 1 when a plain run failed,
2 on usage errors. Standard library only.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROGRAM = REPO / "examples" / "torch_graphs.py"
STEP_RANGE = "decode_step"
# Per-phase ceilings on median(record) / median(plain); phases not listed are reported only.
RECORD_TARGETS = {"replay": 1.05, "replay_ext": 1.05, "eager": 1.15}
# record's overhead (ratio - 1) must stay within this share of the profiler's, per phase.
PROFILER_SHARE = 1 / 5
# A round counts as fast-speed when its process's host_speed_us is within this factor of the
# run's fastest (the H200 host's two speeds are about x1.5-1.9 apart).
SPEED_SLACK = 1.25
BUILTIN_MODES = ("plain", "record", "profiler", "attached")
STDERR_TAIL = 2000
# The floor every CUPTI tool pays: `record` with every activity kind and callback off, so CUPTI
# is attached to the process (activity buffers registered) and traces nothing but the NVTX
# ranges that reach it through NVTX injection (eager steps only). Attaching alone
# slows each graph launch on the host by a cost that grows with the graph's nodes
# (benches/cupti_attach_cost.sh), and only cuptiFinalize gives it back.
ATTACHED_ENV = {
    "GAPSCOPE_CUPTI_SKIP": "CONCURRENT_KERNEL,MEMCPY,MEMSET,RUNTIME,DRIVER,SYNCHRONIZATION,CUDA_EVENT",
    "GAPSCOPE_CUPTI_CALLBACKS": "off",
    "GAPSCOPE_TRACE_BUDGET": "0",
}


def parse_variant(text):
    """NAME=ENV1=V1;ENV2=V2 -> (NAME, {ENV1: V1, ENV2: V2}); values may hold commas."""
    name, sep, assignments = text.partition("=")
    env = {}
    for item in filter(None, assignments.split(";")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise argparse.ArgumentTypeError(f"{item!r} in --variant {text!r} is not ENV=VALUE")
        env[key] = value
    if not sep or not name or not env:
        raise argparse.ArgumentTypeError(f"--variant {text!r} is not NAME=ENV=VALUE[;...]")
    return name, env


def parse_args(argv):
    split = argv.index("--") if "--" in argv else len(argv)
    before, after = argv[:split], argv[split + 1:]
    p = argparse.ArgumentParser(
        usage="%(prog)s --gapscope PATH [options] [-- PROGRAM [ARGS...]]",
        description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gapscope", required=True, type=Path, help="the gapscope executable")
    p.add_argument("--python", default="python3",
                   help="interpreter that runs PROGRAM (default %(default)s)")
    p.add_argument("--nproc", type=int, default=1,
                   help="processes; above 1 PROGRAM runs under PYTHON -m torch.distributed.run")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds; each runs every mode once (default %(default)s)")
    p.add_argument("--variant", action="append", default=[], type=parse_variant,
                   metavar="NAME=ENV=V[;ENV=V...]",
                   help="an extra record mode with these environment variables (repeatable)")
    p.add_argument("--out", type=Path, default=Path(f"overhead-{time.strftime('%Y%m%d-%H%M%S')}"),
                   help="folder for JSON periods, traces, logs and summary.json "
                        "(default overhead-DATE-TIME)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds allowed per run (default %(default)s)")
    p.add_argument("--split", type=int, default=64, metavar="N",
                   help="also report eager and replay phases split at step N (record's default "
                        "--trace-budget: the first N are traced, the rest not); 0: no split")
    p.add_argument("--no-profiler", dest="profiler", action="store_false",
                   help="skip the torch.profiler mode (its targets are then not checked)")
    p.add_argument("--no-attached", dest="attached", action="store_false",
                   help="skip the `attached` mode (CUPTI attached, nothing traced: the floor "
                        "of every CUPTI tool, against which `record` is also compared)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = p.parse_args(before)
    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names) or set(names) & set(BUILTIN_MODES):
        p.error("--variant names must be unique and not " + ", ".join(BUILTIN_MODES))
    if args.nproc < 1 or args.rounds < 1:
        p.error("--nproc and --rounds must be at least 1")
    args.program = after or [str(DEFAULT_PROGRAM)]
    return args


def launcher(args):
    """The command that starts PROGRAM, through torchrun when there are several processes."""
    if args.nproc > 1:
        return [args.python, "-m", "torch.distributed.run", "--nproc-per-node",
                str(args.nproc), *args.program]
    return [args.python, *args.program]


def plan(args):
    """The runs, in order: [(mode, round, argv, extra_env)]; rounds interleave the modes."""
    gapscope = str(args.gapscope.resolve())
    runs = []
    for k in range(1, args.rounds + 1):
        def program(mode, *extra):
            return [*launcher(args), *extra, "--json", str(args.out / f"{mode}-r{k}-{{rank}}.json")]

        def record(mode):
            return [gapscope, "record", "-o", str(args.out / f"{mode}-r{k}"),
                    "--step-range", STEP_RANGE, "--", *program(mode)]

        runs.append(("plain", k, program("plain"), {}))
        runs.append(("record", k, record("record"), {}))
        if args.profiler:
            runs.append(("profiler", k, program("profiler", "--profile"), {}))
        if args.attached:
            runs.append(("attached", k, record("attached"), dict(ATTACHED_ENV)))
        runs.extend((name, k, record(name), env) for name, env in args.variant)
    return runs


def execute(argv, extra_env, log_stem, timeout):
    """Runs argv in its own session (so a hung torchrun and its ranks can all be stopped);
    returns a dict with status, exit code, wall seconds and the stderr tail."""
    out_path, err_path = log_stem.with_suffix(".out"), log_stem.with_suffix(".err")
    start = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env={**os.environ, **extra_env},
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            stop_session(proc)
            rc, status = proc.returncode, "timeout"
    wall = time.monotonic() - start
    tail = err_path.read_bytes()[-STDERR_TAIL:].decode(errors="replace")
    return {"status": status, "rc": rc, "wall_s": round(wall, 3), "stderr_tail": tail,
            "stdout": str(out_path), "stderr": str(err_path)}


def stop_session(proc):
    """SIGTERM to the run's process group, then SIGKILL if it lingers."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# Phases whose steps repeat one thing (one range name, one executable graph): the trace budget
# traces their first N steps. First launches are each a new graph, so all traced.
SPLIT_PHASES = ("eager", "replay", "replay_ext")


def split_phases(phases, split):
    """Adds 'PHASE 2-N' and 'PHASE >N' (steps in program order) for the repeated phases, and
    'PHASE/host 1-N' and 'PHASE/host >N' for their host times.

    Period i runs from step i's timing event to step i+1's, so it times step i+1 (1-based:
    step i+2): steps 2..N are the first N-1 periods. Host time i is step i+1's own."""
    out = dict(phases)
    if split <= 1:
        return out
    for phase in SPLIT_PHASES:
        for name, cut, first in ((phase, split - 1, 2), (f"{phase}/host", split, 1)):
            values = phases.get(name) or []
            if len(values) > cut:
                out[f"{name} {first}-{split}"] = values[:cut]
                out[f"{name} >{split}"] = values[cut:]
    return out


def load_run(out_dir, mode, k, split=0):
    """({rank: {phase: [µs...]}}, rank 0's host_speed_us or None) from the JSON files of one
    run (missing files: no entry; files from before host_speed_us: None)."""
    ranks, host_speed = {}, None
    for path in sorted(out_dir.glob(f"{mode}-r{k}-*.json")):
        try:
            data = json.loads(path.read_text())
            rank = int(data["rank"])
            ranks[rank] = split_phases(data["phases"], split)
        except (OSError, ValueError, KeyError) as e:
            print(f"warning: unreadable {path}: {e}", file=sys.stderr)
            continue
        if rank == 0 and isinstance(data.get("host_speed_us"), (int, float)):
            host_speed = float(data["host_speed_us"])
    return ranks, host_speed


def host_speed_line(speeds, modes):
    """One line with each round's host speed per mode: processes on one host can run host code
    at different speeds, which decides whether a near-GPU-bound replay turns host-bound."""
    cells = []
    for mode in modes:
        values = [v for _, v in sorted(speeds.get(mode, {}).items()) if v is not None]
        if values:
            cells.append(f"{mode} " + ", ".join(f"{v:.0f}" for v in values))
    if not cells:
        return ""
    return ("  host speed, µs per fixed Python loop (rank 0; lower is faster): "
            + "; ".join(cells))


def fast_rounds(speeds, slack=SPEED_SLACK):
    """{mode: {round, ...}} of the rounds whose process ran at the host's faster speed: rank 0's
    host_speed_us at most `slack` x the fastest of the whole run (None: no rounds kept)."""
    known = [v for by_round in speeds.values() for v in by_round.values() if v is not None]
    if not known:
        return None
    limit = slack * min(known)
    return {mode: {k for k, v in by_round.items() if v is not None and v <= limit}
            for mode, by_round in speeds.items()}


def speed_matched(periods, speeds, modes, rounds, phases):
    """Info lines and stats: each target phase's ratios over the fast-speed rounds only, so that a
    mode is not judged by which host speed its processes drew (the plain program's replay host
    time differs about x1.7 between the two speeds on the H200 host)."""
    fast = fast_rounds(speeds)
    if fast is None:
        return [], {}
    kept = {mode: {k: r for k, r in periods.get(mode, {}).items() if k in fast.get(mode, ())}
            for mode in modes}
    stats = analyse(kept, modes, rounds)
    counts = ", ".join(f"{m} {len(fast.get(m, ()))}" for m in modes)
    lines = [f"  info  speed-matched (rounds with host speed <= {SPEED_SLACK} x the fastest; "
             f"{counts} of {rounds}):"]
    for phase in phases:
        row = stats.get(phase, {})
        ratios = [f"{m} {row[m]['ratio']:.3f}" for m in modes if "ratio" in row.get(m, {})]
        if ratios:
            lines.append(f"  info    {phase}: " + ", ".join(ratios))
    return lines, stats


def percentile(sorted_values, q):
    """Linear-interpolated percentile (q in [0, 1]) of a sorted, non-empty list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def describe(values):
    s = sorted(values)
    return {"n": len(s), "median": statistics.median(s), "p10": percentile(s, 0.1),
            "p90": percentile(s, 0.9)}


def analyse(periods, modes, rounds):
    """periods[mode][round][rank][phase] -> per phase and mode: rank-0 pooled stats, the max
    over ranks of each rank's pooled median, and (mode != plain) the ratio to plain."""
    phases = []
    for by_round in periods.values():
        for by_rank in by_round.values():
            for by_phase in by_rank.values():
                phases += [ph for ph in by_phase if ph not in phases]
    stats = {}
    for phase in phases:
        row = stats[phase] = {}
        for mode in modes:
            pooled = {}  # rank -> values over rounds
            per_round = {}  # round -> rank-0 median
            for k in range(1, rounds + 1):
                for rank, by_phase in periods[mode].get(k, {}).items():
                    values = by_phase.get(phase) or []
                    pooled.setdefault(rank, []).extend(values)
                    if rank == 0 and values:
                        per_round[k] = statistics.median(values)
            if not pooled.get(0):
                continue
            row[mode] = {**describe(pooled[0]), "per_round_median": per_round,
                         "max_rank_median": max(statistics.median(v) for v in pooled.values() if v)}
        base = row.get("plain")
        for mode, entry in row.items():
            if mode == "plain" or not base:
                continue
            entry["ratio"] = entry["median"] / base["median"]
            ratios = [entry["per_round_median"][k] / base["per_round_median"][k]
                      for k in entry["per_round_median"] if k in base["per_round_median"]]
            entry["round_ratio_min"] = min(ratios, default=None)
            entry["round_ratio_max"] = max(ratios, default=None)
    return stats


def check_targets(stats, failed_modes):
    """[(name, PASS|FAIL|SKIP, detail)] for the record targets."""
    results = [("record runs exit cleanly", "FAIL" if "record" in failed_modes else "PASS",
                failed_modes.get("record", "all runs exited 0"))]
    for phase, ceiling in RECORD_TARGETS.items():
        record = stats.get(phase, {}).get("record", {})
        if "ratio" not in record:
            if phase in stats:
                results.append((f"record/{phase} <= {ceiling}", "SKIP", "no record or plain data"))
            continue
        ok = record["ratio"] <= ceiling
        results.append((f"record/{phase} <= {ceiling}", "PASS" if ok else "FAIL",
                        f"ratio {record['ratio']:.3f}"))
    for phase, row in stats.items():
        if "ratio" not in row.get("record", {}) or "ratio" not in row.get("profiler", {}):
            continue
        if phase not in RECORD_TARGETS:
            continue  # host times, split rows, first launches: see profiler_share_info
        name = f"record/{phase} overhead <= {PROFILER_SHARE:.2f} x profiler's"
        rec, prof = row["record"]["ratio"] - 1, row["profiler"]["ratio"] - 1
        detail = f"record {rec:+.1%}, profiler {prof:+.1%}"
        if prof <= 0:
            results.append((name, "SKIP", detail + " (profiler shows no overhead)"))
        else:
            results.append((name, "PASS" if rec <= PROFILER_SHARE * prof else "FAIL", detail))
    return results


def profiler_share_info(stats):
    """Info lines: record's overhead against the profiler's for the phases without a target
    (host times, the split rows, first launches), which the targets leave out."""
    lines = []
    for phase, row in stats.items():
        if phase in RECORD_TARGETS or "ratio" not in row.get("record", {}) \
                or "ratio" not in row.get("profiler", {}):
            continue
        rec, prof = row["record"]["ratio"] - 1, row["profiler"]["ratio"] - 1
        lines.append(f"  info  {phase}: overhead record {rec:+.1%}, profiler {prof:+.1%}")
    return lines


def above_attached(stats):
    """Info lines: per phase, the attach floor's ratio to plain and what each CUPTI mode adds
    above it, median(mode) / median(attached)."""
    lines = []
    for phase, row in stats.items():
        floor = row.get("attached")
        if not floor or "ratio" not in floor:
            continue
        others = [f"{mode} {entry['median'] / floor['median']:.3f}"
                  for mode, entry in row.items() if mode not in ("plain", "attached")]
        lines.append(f"  info  {phase}: CUPTI attached, nothing traced {floor['ratio']:.3f} x plain; "
                     f"over attached: {', '.join(others) or '—'}")
    return lines


def per_round(stats, modes, split):
    """Rank-0 medians of each round for the replay phases: processes of the host's slower speed
    show as whole rounds several µs slower, which the pooled median hides."""
    lines = ["\nper-round medians, µs (rank 0):"]
    phases = ["replay"] + ([f"replay >{split}", f"replay/host >{split}"] if split > 1 else [])
    for phase in phases:
        row = stats.get(phase, {})
        cells = [f"{m} " + ", ".join(f"{v:.1f}" for v in row[m]["per_round_median"].values())
                 for m in modes if m in row]
        if cells:
            lines.append(f"  {phase}: " + "; ".join(cells))
    return "\n".join(lines)


def table(stats, modes, nproc):
    """Markdown table: one row per phase; per mode the median cell and (not plain) the ratio."""
    header = ["phase"]
    for mode in modes:
        header.append(f"{mode} median µs [p10–p90] n")
        if mode != "plain":
            header.append(f"{mode} ratio [round min–max]")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for phase, row in stats.items():
        cells = [phase]
        for mode in modes:
            e = row.get(mode)
            if e is None:
                cells.append("—")
            else:
                cell = f"{e['median']:.1f} [{e['p10']:.1f}–{e['p90']:.1f}] {e['n']}"
                if nproc > 1:
                    cell += f" (max rank {e['max_rank_median']:.1f})"
                cells.append(cell)
            if mode == "plain":
                continue
            if e is None or "ratio" not in e:
                cells.append("—")
            elif e["round_ratio_min"] is None:
                cells.append(f"{e['ratio']:.3f}")
            else:
                cells.append(f"{e['ratio']:.3f} [{e['round_ratio_min']:.3f}–"
                             f"{e['round_ratio_max']:.3f}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv):
    args = parse_args(argv)
    runs = plan(args)
    if args.dry_run:
        for mode, k, cmd, env in runs:
            prefix = " ".join(f"{key}={shlex.quote(v)}" for key, v in env.items())
            print(f"# {mode} round {k}\n{prefix + ' ' if prefix else ''}{shlex.join(cmd)}")
        return 0
    if not args.gapscope.is_file():
        print(f"error: --gapscope {args.gapscope} is not a file", file=sys.stderr)
        return 2
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    modes = ["plain", "record", *(["profiler"] if args.profiler else []),
             *(["attached"] if args.attached else []),
             *(name for name, _ in args.variant)]
    periods = {mode: {} for mode in modes}
    host_speed = {}  # mode -> round -> rank 0's host_speed_us
    records = []
    for mode, k, cmd, env in runs:
        print(f"[round {k}/{args.rounds}] {mode}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        result = execute(cmd, env, logs / f"{mode}-r{k}", args.timeout)
        ranks, host_speed.setdefault(mode, {})[k] = load_run(args.out, mode, k, args.split)
        if result["status"] == "ok" and len(ranks) != args.nproc:
            result["status"] = "failed"  # exited 0 but some rank wrote no periods
        if result["status"] != "ok":
            print(f"  {result['status']} (exit {result['rc']}, {result['wall_s']:.1f} s, "
                  f"{len(ranks)}/{args.nproc} JSON); stderr tail:\n"
                  + "\n".join("    " + line for line in result["stderr_tail"].splitlines()[-15:]),
                  file=sys.stderr)
        else:
            print(f"  ok ({result['wall_s']:.1f} s)", file=sys.stderr)
        # Periods a failed run still wrote (e.g. it hung at exit after the phases) are used;
        # the mode is flagged as failed all the same.
        if ranks:
            periods[mode][k] = ranks
        records.append({"mode": mode, "round": k, "argv": cmd, "env": env,
                        "json_ranks": sorted(ranks), **result})

    failed_modes = {}
    for r in records:
        if r["status"] != "ok":
            failed_modes.setdefault(r["mode"], []).append(f"round {r['round']}: {r['status']} "
                                                          f"(exit {r['rc']})")
    failed_modes = {m: "; ".join(v) for m, v in failed_modes.items()}
    stats = analyse(periods, modes, args.rounds)
    targets = check_targets(stats, failed_modes)

    print(f"\n{args.rounds} rounds, {args.nproc} process(es), program: {shlex.join(args.program)}")
    print("periods in µs, rank 0 pooled over rounds; ratio = median(mode) / median(plain)\n")
    print(table(stats, modes, args.nproc))
    print(per_round(stats, modes, args.split))
    speed_line = host_speed_line(host_speed, modes)
    if speed_line:
        print(speed_line)
    print("\nruns (wall s): " + ", ".join(
        f"{m} " + "/".join(f"{r['wall_s']:.1f}" for r in records if r["mode"] == m)
        for m in modes))
    for mode, why in failed_modes.items():
        print(f"FAILED mode {mode}: {why}")
    print("\ntargets:")
    for name, verdict, detail in targets:
        print(f"  {verdict:4}  {name}: {detail}")
    for phase, row in stats.items():
        if phase.startswith("fresh") and "ratio" in row.get("record", {}):
            print(f"  info  record/{phase}: ratio {row['record']['ratio']:.3f} (no target)")
    for line in profiler_share_info(stats):
        print(line)
    for line in above_attached(stats):
        print(line)
    split_phases_shown = [f"replay >{args.split}"] if args.split > 1 else []
    matched_lines, matched = speed_matched(periods, host_speed, modes, args.rounds,
                                           [*RECORD_TARGETS, *split_phases_shown])
    for line in matched_lines:
        print(line)

    summary = {"args": {"gapscope": str(args.gapscope), "python": args.python,
                        "nproc": args.nproc, "rounds": args.rounds, "program": args.program,
                        "variants": dict(args.variant), "timeout_s": args.timeout},
               "runs": records, "failed_modes": failed_modes, "stats": stats,
               "host_speed_us": host_speed, "speed_matched_stats": matched,
               "targets": [{"name": n, "verdict": v, "detail": d} for n, v, d in targets]}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nsummary: {args.out / 'summary.json'}")
    return 1 if "plain" in failed_modes or "plain" not in next(iter(stats.values()), {}) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
