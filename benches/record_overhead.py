"""Overhead of `gapscope record`, torch.profiler and Nsight Systems on programs' own step periods.

Runs each program (default: examples/torch_graphs.py, examples/torch_compile_decode.py and
examples/phases.py; `--programs serial_event` runs NCCL's serial-event shape of mode 2) several
ways per round, interleaved so that drift hits every mode alike (the mode order rotates each
round): plain; under `gapscope record` with its default settings; with
--profile (torch.profiler, CPU + CUDA); under `nsys profile --cuda-graph-trace=node` (with
--nsys); `attached` (CUPTI attached, nothing traced); and optional record modes. Each program
writes every step's CUDA-event period per phase to JSON (--json); this script pools them and
prints, per program, phase and mode, median [p10-p90] n and the ratio to plain [per-round
min-max], the mode-2 - mode-1 differences, each process's host speed and the targets as
PASS/FAIL. With --budget the rounds stop when the next would not fit.

  python3 benches/record_overhead.py --gapscope target/release/gapscope --dry-run
  python3 benches/record_overhead.py --gapscope .devrun/gapscope \\
      --python /opt/torch/.venv/bin/python --nsys-libs .devrun/nsyslibs \\
      --nsys /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys \\
      --budget 510 --rounds 8 --work /tmp/overhead --out "$OUT"
  python3 benches/record_overhead.py --gapscope target/release/gapscope --nproc 2 \\
      --programs torch_graphs --variant nodriver=GAPSCOPE_CUPTI_SKIP=DRIVER

Exit status: 0 when the measurement ran (targets may still fail), 1 when a program's plain runs
gave no periods, 2 on usage errors. Standard library only.
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
STEP_RANGE = "decode_step"
# Ceilings on median(record) / median(plain) per kind of phase (record's default settings); each
# must also stay below the COMPARATORS' ratio in the same run.
CEILINGS = {"replay": 1.10, "eager": 1.25}
COMPARATORS = ("profiler", "nsys")
TARGET_MODE = "record"
# A round counts as fast-speed when its process's host_speed_us is within this factor of the
# run's fastest (the H200 host's two speeds are about x1.5-1.9 apart).
SPEED_SLACK = 1.25
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
NSYS_OPTIONS = ["--trace=cuda,nvtx", "--cuda-graph-trace=node", "--sample=none",
                "--cpuctxsw=none"]
NOPROV_MODE = "record-noprov"
NOPROV_MISSING = ("not asked for: --provenance-off GAPSCOPE_CUPTI_NODE_FRAMES=0 adds it (graph "
                  "nodes made without walking the creating thread's frames)")


class Program(NamedTuple):
    """A program the bench runs: its script and arguments, the two phases whose difference it
    measures itself (mode 1, mode 2), whether it runs under torchrun with --nproc > 1, and the
    arguments of an untimed warm-up run (None: none)."""
    name: str
    script: Path
    args: tuple = ()
    diff: tuple = None
    distributed: bool = False
    warmup_args: tuple = None


# The examples run with their own defaults: the shapes of issue 23 (200 eager steps then 200
# replays or compiled steps; 320 eager steps then two graphs), so that what `record` samples of
# them is what it samples of such programs.
PROGRAMS = {
    "torch_graphs": Program("torch_graphs", EXAMPLES / "torch_graphs.py",
                            diff=("replay", "replay_ext"), distributed=True),
    # A cold inductor/Triton cache costs tens of seconds in the first compile: a short run fills
    # it before round 1, so that no timed round pays it.
    "torch_compile_decode": Program("torch_compile_decode", EXAMPLES / "torch_compile_decode.py",
                                    warmup_args=("--steps", "8")),
    "phases": Program("phases", EXAMPLES / "phases.py", diff=("replay_mode1", "replay_mode2")),
    # NCCL's serial-event shape of mode 2: each replay waits on the previous replay's record
    # (--programs serial_event; not among the defaults, which the tests' stand-in torch runs).
    "serial_event": Program("serial_event", EXAMPLES / "serial_event.py",
                            diff=("replay_mode1", "replay_mode2")),
    # A model library's generate(), which marks no step: its token loop is found in the kernel
    # sequence (--programs transformers_generate; needs transformers, so not a default either).
    "transformers_generate": Program("transformers_generate",
                                     EXAMPLES / "transformers_generate.py",
                                     warmup_args=("--rounds", "1", "--new-tokens", "4")),
}
DEFAULT_PROGRAMS = ("torch_graphs", "torch_compile_decode", "phases")

# Seconds per process before a run has measured them (guesses for one H200: torch import, CUDA
# and NCCL start, the program, the tool's start and finish); a round's measured walls replace
# them for the next round's estimate.
GUESS_PLAIN_S = {"torch_graphs": 8, "torch_compile_decode": 12, "phases": 5, "serial_event": 5,
                 "transformers_generate": 40}
GUESS_OTHER_PLAIN_S = 10
GUESS_EXTRA_S = {"plain": 0, "record": 3, "profiler": 4, "nsys": 12}
GUESS_WARMUP_S = 45


class Mode(NamedTuple):
    """How a program runs: `tool` is plain, record, profiler or nsys; record modes add
    `record_args` after `record` and every mode its `env`."""
    name: str
    tool: str
    env: dict = {}
    record_args: tuple = ()


def parse_assignments(text, what):
    """ENV1=V1;ENV2=V2 -> {ENV1: V1, ENV2: V2}; values may hold commas and '='."""
    env = {}
    for item in filter(None, text.split(";")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise argparse.ArgumentTypeError(f"{item!r} in {what} is not ENV=VALUE")
        env[key] = value
    if not env:
        raise argparse.ArgumentTypeError(f"{what} holds no ENV=VALUE")
    return env


def parse_variant(text):
    """NAME=ENV1=V1;ENV2=V2 -> (NAME, {ENV1: V1, ENV2: V2}); values may hold commas."""
    name, sep, assignments = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--variant {text!r} is not NAME=ENV=VALUE[;...]")
    return name, parse_assignments(assignments, f"--variant {text!r}")


def parse_program_args(text):
    """NAME=ARGS -> (NAME, [ARGS split as a shell would])."""
    name, sep, rest = text.partition("=")
    if not sep or name not in PROGRAMS:
        raise argparse.ArgumentTypeError(
            f"--args {text!r} is not NAME=ARGS with NAME one of {', '.join(PROGRAMS)}")
    return name, shlex.split(rest)


def parse_args(argv):
    split = argv.index("--") if "--" in argv else len(argv)
    before, after = argv[:split], argv[split + 1:]
    p = argparse.ArgumentParser(
        usage="%(prog)s --gapscope PATH [options] [-- PROGRAM [ARGS...]]",
        description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gapscope", required=True, type=Path, help="the gapscope executable")
    p.add_argument("--python", default="python3",
                   help="interpreter that runs the programs (default %(default)s)")
    p.add_argument("--programs", default=None,
                   help="comma-separated, of " + ", ".join(PROGRAMS) + " (default: all; with "
                        "`-- PROGRAM ARGS` only that program unless this names others too)")
    p.add_argument("--args", action="append", default=[], type=parse_program_args,
                   metavar="NAME=ARGS", help="arguments for one of the programs (repeatable)")
    p.add_argument("--diff", default=None, metavar="MODE1,MODE2",
                   help="for `-- PROGRAM`: the two phases whose difference it measures")
    p.add_argument("--nproc", type=int, default=1,
                   help="processes of torch_graphs (or PROGRAM): above 1 under PYTHON -m "
                        "torch.distributed.run; the other examples run one")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds at most; each runs every program in every mode once "
                        "(default %(default)s)")
    p.add_argument("--budget", type=float, default=0, metavar="S",
                   help="seconds for the whole bench: a round starts only when its estimate "
                        "fits in what is left, each run's timeout is cut to it (0: no budget)")
    p.add_argument("--timeout", type=float, default=150,
                   help="seconds allowed per run (default %(default)s)")
    p.add_argument("--step-range-mode", action="store_true",
                   help=f"also `record --step-range {STEP_RANGE}` (mode record-step-range)")
    p.add_argument("--nsys", type=Path, default=None,
                   help="Nsight Systems' nsys: adds the mode nsys "
                        f"(nsys profile {' '.join(NSYS_OPTIONS)})")
    p.add_argument("--nsys-libs", type=Path, default=None, metavar="DIR",
                   help="folder put first on nsys's LD_LIBRARY_PATH (libdw.so.1, libelf.so.1)")
    p.add_argument("--provenance-off", default=None, metavar="ENV=V[;ENV=V...]",
                   type=lambda t: parse_assignments(t, f"--provenance-off {t!r}"),
                   help=f"the recorder's switch that turns node provenance off: adds the mode "
                        f"{NOPROV_MODE} and the check that provenance costs nothing on replays")
    p.add_argument("--variant", action="append", default=[], type=parse_variant,
                   metavar="NAME=ENV=V[;ENV=V...]",
                   help="an extra record mode with these environment variables (repeatable)")
    p.add_argument("--out", type=Path, default=Path(f"overhead-{time.strftime('%Y%m%d-%H%M%S')}"),
                   help="folder for summary.json, report.md and runs.tar.gz (logs and period "
                        "JSON) (default overhead-DATE-TIME)")
    p.add_argument("--work", type=Path, default=None,
                   help="folder for each run's JSON periods, logs and traces (default OUT/work)")
    p.add_argument("--split", type=int, default=0, metavar="N",
                   help="also report eager and replay phases split at step N (the first N "
                        "steps and the rest); 0: no split (default)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="skip the untimed warm-up runs (torch_compile_decode's compile cache)")
    p.add_argument("--no-profiler", dest="profiler", action="store_false",
                   help="skip the torch.profiler mode")
    p.add_argument("--no-attached", dest="attached", action="store_false",
                   help="skip the `attached` mode (CUPTI attached, nothing traced: the floor "
                        "of every CUPTI tool, against which `record` is also compared)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the modes, the time plan and round 1's commands, and stop")
    args = p.parse_args(before)
    reserved = {"plain", "record", "record-step-range", "profiler", "nsys", "attached",
                NOPROV_MODE}
    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names) or set(names) & reserved:
        p.error("--variant names must be unique and not " + ", ".join(sorted(reserved)))
    if args.nproc < 1 or args.rounds < 1:
        p.error("--nproc and --rounds must be at least 1")
    args.program_list = programs_of(args, after, p.error)
    args.work = args.work or args.out / "work"
    return args


def programs_of(args, after, error):
    """The Programs to run, in order: --programs' names, then `-- PROGRAM` (named by its file)."""
    overrides = dict(args.args)
    names = (args.programs.split(",") if args.programs
             else ([] if after else list(DEFAULT_PROGRAMS)))
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        error(f"unknown program(s) {', '.join(unknown)}: choose from {', '.join(PROGRAMS)}")
    chosen = [PROGRAMS[n]._replace(args=tuple(overrides.get(n, PROGRAMS[n].args)))
              for n in names]
    if after:
        diff = tuple(args.diff.split(",")) if args.diff else None
        if diff is not None and len(diff) != 2:
            error("--diff is MODE1,MODE2")
        name = Path(after[0]).stem
        if name in names:
            error(f"`-- {after[0]}` has the name of a program already chosen")
        chosen.append(Program(name, Path(after[0]), tuple(after[1:]), diff, distributed=True))
    return chosen


def modes_of(args):
    """([Mode], {mode name: why it is skipped}) in the order of round 1."""
    modes = [Mode("plain", "plain"), Mode("record", "record")]
    skipped = {}
    if args.step_range_mode:
        modes.append(Mode("record-step-range", "record", record_args=("--step-range", STEP_RANGE)))
    if args.profiler:
        modes.append(Mode("profiler", "profiler"))
    if args.nsys:
        libs = {}
        if args.nsys_libs:
            old = os.environ.get("LD_LIBRARY_PATH")
            libs["LD_LIBRARY_PATH"] = str(args.nsys_libs.resolve()) + (f":{old}" if old else "")
        modes.append(Mode("nsys", "nsys", env=libs))
    else:
        skipped["nsys"] = "no --nsys PATH given"
    if args.attached:
        modes.append(Mode("attached", "record", env=dict(ATTACHED_ENV)))
    modes.extend(Mode(name, "record", env=env) for name, env in args.variant)
    if args.provenance_off:
        modes.append(Mode(NOPROV_MODE, "record", env=dict(args.provenance_off)))
    else:
        skipped[NOPROV_MODE] = NOPROV_MISSING
    return modes, skipped


def rotated(items, k):
    """items rotated left by k - 1: round k starts with its (k-1)-th item."""
    shift = (k - 1) % len(items) if items else 0
    return items[shift:] + items[:shift]


class Run(NamedTuple):
    program: str
    mode: str
    round: int
    argv: list
    env: dict
    cleanup: list  # globs (relative to the program's work folder) deleted after the run
    ranks: int  # JSON files expected


def program_dir(args, program):
    return args.work / program


def json_path(args, program, mode, k):
    return program_dir(args, program) / f"{mode}-r{k}-{{rank}}.json"


def launcher(args, program, extra=()):
    """The command that starts a program, through torchrun when there are several processes."""
    argv = [str(program.script), *program.args, *extra]
    if program.distributed and args.nproc > 1:
        return [args.python, "-m", "torch.distributed.run", "--nproc-per-node",
                str(args.nproc), *argv]
    return [args.python, *argv]


def command(args, program, mode, k):
    """One Run of `program` in `mode` in round k."""
    folder = program_dir(args, program.name)
    profile = ["--profile"] if mode.tool == "profiler" else []
    run = launcher(args, program,
                   [*profile, "--json", str(json_path(args, program.name, mode.name, k))])
    cleanup = []
    if mode.tool == "record":
        run = [str(args.gapscope.resolve()), "record", "-o", str(folder / f"{mode.name}-r{k}"),
               *mode.record_args, "--", *run]
    elif mode.tool == "nsys":
        stem = f"{mode.name}-r{k}"
        run = [str(args.nsys), "profile", *NSYS_OPTIONS, "-o", str(folder / stem),
               "--force-overwrite", "true", *run]
        cleanup = [f"{stem}.*"]  # .nsys-rep (large), .qdstrm, .sqlite
    ranks = args.nproc if program.distributed else 1
    return Run(program.name, mode.name, k, run, dict(mode.env), cleanup, ranks)


def plan_round(args, modes, k):
    """Round k's runs: programs and modes both rotated by the round, so that no mode always
    runs first or right after another program."""
    return [command(args, program, mode, k)
            for program in rotated(args.program_list, k) for mode in rotated(modes, k)]


def warmup_runs(args):
    return [Run(p.name, "warmup", 0, launcher(args, p, p.warmup_args), {}, [], 0)
            for p in args.program_list if args.warmup and p.warmup_args is not None]


def guess_wall(program, mode_tool):
    return GUESS_PLAIN_S.get(program, GUESS_OTHER_PLAIN_S) + GUESS_EXTRA_S[mode_tool]


class TimePlan:
    """Each run's expected wall: the last measured one of its program and mode, else a guess."""

    def __init__(self, modes):
        self.tools = {m.name: m.tool for m in modes}
        self.measured = {}

    def run_s(self, run):
        if run.mode == "warmup":
            return GUESS_WARMUP_S
        return self.measured.get((run.program, run.mode),
                                 guess_wall(run.program, self.tools[run.mode]))

    def round_s(self, runs):
        return sum(self.run_s(r) for r in runs)

    def learn(self, run, wall_s):
        self.measured[(run.program, run.mode)] = wall_s


def plan_lines(args, modes, skipped, tplan):
    """The dry run's time plan: per program and mode the expected seconds, a round's total, the
    warm-up, and how many rounds fit in --budget."""
    lines = [f"programs: {', '.join(p.name for p in args.program_list)}",
             f"modes: {', '.join(m.name for m in modes)}"]
    lines += [f"  skipped mode {name}: {why}" for name, why in skipped.items()]
    lines.append("time plan (seconds per process; guesses until round 1 has measured them):")
    for program in args.program_list:
        cells = [f"{m.name} {guess_wall(program.name, m.tool)}" for m in modes]
        lines.append(f"  {program.name}: " + ", ".join(cells))
    round_s = tplan.round_s(plan_round(args, modes, 1))
    per_mode = [f"{m.name} {sum(guess_wall(p.name, m.tool) for p in args.program_list)}"
                for m in modes]
    lines.append("  a round's seconds per mode: " + ", ".join(per_mode))
    warm = sum(tplan.run_s(r) for r in warmup_runs(args))
    lines.append(f"  one round: {len(args.program_list) * len(modes)} runs, about {round_s:.0f} s; "
                 f"warm-up about {warm:.0f} s")
    fit = rounds_that_fit(args.budget, warm, round_s, args.rounds)
    total = warm + fit * round_s
    budget = f"budget {args.budget:.0f} s" if args.budget else "no budget"
    lines.append(f"  {budget}, at most {args.rounds} rounds: {fit} round(s) expected, about "
                 f"{total:.0f} s ({total / 60:.1f} min); each run's timeout {args.timeout:.0f} s "
                 f"or what is left of the budget")
    return lines


def rounds_that_fit(budget, warmup_s, round_s, most):
    """How many whole rounds fit in budget after the warm-up (at least 1: a round that does not
    fit still runs, its runs cut at the budget)."""
    if not budget:
        return most
    return max(1, min(most, int((budget - warmup_s) // max(round_s, 1e-9))))


def execute(argv, extra_env, log_stem, timeout):
    """Runs argv in its own session (so a hung torchrun and its ranks can all be stopped);
    returns a dict with status, exit code, wall seconds and the stderr tail."""
    out_path, err_path = log_stem.with_suffix(".out"), log_stem.with_suffix(".err")
    start = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=err,
                                    env={**os.environ, **extra_env}, start_new_session=True)
        except OSError as e:
            err.write(f"cannot start {argv[0]}: {e}\n".encode())
            proc = None
        if proc is None:
            rc, status = None, "failed"
        else:
            try:
                rc = proc.wait(timeout=max(timeout, 1))
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


# Phases whose steps repeat one thing (one range name, one executable graph).
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


def phase_kind(phase):
    """'eager', 'replay' (graph replays, torch.compile's compiled steps), 'first' (first
    launches of new graphs) or None (host times, split rows, anything else): the kinds that
    CEILINGS and the tables know."""
    if "/" in phase or " " in phase:
        return None
    if phase.startswith("eager"):
        return "eager"
    if phase.startswith(("replay", "compiled")):
        return "replay"
    if phase.startswith("fresh"):
        return "first"
    return None


def load_run(out_dir, mode, k, split=0):
    """({rank: {phase: [µs...]}}, rank 0's host_speed_us or None) from the JSON files of one
    run (missing files: no entry; files from before host_speed_us: None)."""
    ranks, host_speed = {}, None
    for path in sorted(out_dir.glob(f"{mode}-r{k}-*.json")):
        try:
            data = json.loads(path.read_text())
            rank = int(data["rank"])
            phases = data["phases"]
            if not isinstance(phases, dict) or not all(
                    isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)
                    for v in phases.values()):
                raise ValueError("'phases' is not {PHASE: [µs, ...]}")
            ranks[rank] = split_phases(phases, split)
        except (OSError, ValueError, KeyError, TypeError) as e:
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
                for rank, by_phase in periods.get(mode, {}).get(k, {}).items():
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


def differences(stats, pair, modes):
    """The program's own mode 2 - mode 1 difference per mode: per round, rank 0's median of
    phase pair[1] minus that of pair[0]; {mode: {per_round, median, min, max, pooled}}."""
    first, second = pair
    out = {}
    for mode in modes:
        a, b = stats.get(first, {}).get(mode), stats.get(second, {}).get(mode)
        if not a or not b:
            continue
        per_round = {k: b["per_round_median"][k] - v for k, v in a["per_round_median"].items()
                     if k in b["per_round_median"]}
        if not per_round:
            continue
        values = list(per_round.values())
        out[mode] = {"per_round": per_round, "median": statistics.median(values),
                     "min": min(values), "max": max(values), "pooled": b["median"] - a["median"]}
    return out


def difference_lines(program, pair, diffs):
    """One line per mode: the difference's median over rounds [min-max] and the pooled one."""
    lines = [f"  {program}: {pair[1]} − {pair[0]}, µs (median over rounds [min–max], n rounds; "
             f"pooled medians' difference)"]
    for mode, d in diffs.items():
        lines.append(f"    {mode}: {d['median']:+.2f} [{d['min']:+.2f}–{d['max']:+.2f}] "
                     f"n={len(d['per_round'])}; pooled {d['pooled']:+.2f}")
    return lines


def ratio_text(entry):
    if entry is None or "ratio" not in entry:
        return "—"
    if entry.get("round_ratio_min") is None:
        return f"{entry['ratio']:.3f}"
    return f"{entry['ratio']:.3f} [{entry['round_ratio_min']:.3f}–{entry['round_ratio_max']:.3f}]"


def row_targets(program, phase, row, skipped):
    """[(name, PASS|FAIL|SKIP, detail)] for one program's phase: record's ratio under the
    ceiling of the phase's kind, and below each comparator's ratio in the same run."""
    kind = phase_kind(phase)
    if kind not in CEILINGS:
        return []
    where = f"{program}/{phase}"
    record = row.get(TARGET_MODE, {})
    if "ratio" not in record:
        return [(f"{where}: {TARGET_MODE} <= {CEILINGS[kind]:.2f}", "SKIP",
                 f"no {TARGET_MODE} or plain periods")]
    ratio = record["ratio"]
    results = [(f"{where}: {TARGET_MODE} <= {CEILINGS[kind]:.2f}",
                "PASS" if ratio <= CEILINGS[kind] else "FAIL", f"ratio {ratio:.3f}")]
    for other in COMPARATORS:
        name = f"{where}: {TARGET_MODE} < {other}"
        if "ratio" in row.get(other, {}):
            theirs = row[other]["ratio"]
            results.append((name, "PASS" if ratio < theirs else "FAIL",
                            f"{TARGET_MODE} {ratio:.3f}, {other} {theirs:.3f}"))
        else:
            results.append((name, "SKIP", skipped.get(other, f"no {other} periods")))
    return results


def difference_target(program, pair, diffs):
    """The traced mode 2 - mode 1 difference (median over rounds) within the untraced one's
    spread over rounds [min, max]."""
    name = f"{program}/{pair[1]} − {pair[0]}: {TARGET_MODE} within plain's spread"
    plain, record = diffs.get("plain"), diffs.get(TARGET_MODE)
    if not plain or not record:
        return (name, "SKIP", f"no plain or {TARGET_MODE} periods of both phases")
    ok = plain["min"] <= record["median"] <= plain["max"]
    return (name, "PASS" if ok else "FAIL",
            f"{TARGET_MODE} {record['median']:+.2f} µs, plain {plain['median']:+.2f} "
            f"[{plain['min']:+.2f}–{plain['max']:+.2f}]")


def provenance_targets(program, stats, skipped):
    """Issue 26: node provenance costs nothing measurable on replays: per replay phase,
    |median(record) - median(record-noprov)| within the spread of plain's per-round medians."""
    results = []
    for phase, row in stats.items():
        if phase_kind(phase) != "replay":
            continue
        name = f"{program}/{phase}: provenance costs nothing measurable"
        if NOPROV_MODE in skipped:
            results.append((name, "SKIP", f"no {NOPROV_MODE} mode"))
            continue
        record, noprov, plain = row.get(TARGET_MODE), row.get(NOPROV_MODE), row.get("plain")
        if not record or not noprov or not plain:
            results.append((name, "SKIP", f"no {TARGET_MODE}, {NOPROV_MODE} or plain periods"))
            continue
        rounds = list(plain["per_round_median"].values())
        noise = max(rounds) - min(rounds)
        delta = record["median"] - noprov["median"]
        results.append((name, "PASS" if abs(delta) <= noise else "FAIL",
                        f"{TARGET_MODE} − {NOPROV_MODE} {delta:+.2f} µs, plain's per-round "
                        f"spread {noise:.2f} µs ({len(rounds)} rounds)"))
    return results


def failure_target(program, failures):
    bad = [f for f in failures if f["mode"] == TARGET_MODE]
    return (f"{program}: {TARGET_MODE} runs exit cleanly", "FAIL" if bad else "PASS",
            "; ".join(f"round {f['round']}: {f['status']} (exit {f['rc']})" for f in bad)
            or "all runs exited 0")


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
        lines.append(f"  info  {phase}: CUPTI attached, nothing traced {floor['ratio']:.3f} x "
                     f"plain; over attached: {', '.join(others) or '—'}")
    return lines


def per_round(stats, modes, split, phases=("replay",)):
    """Rank-0 medians of each round for the replay phases: processes of the host's slower speed
    show as whole rounds several µs slower, which the pooled median hides."""
    lines = ["\nper-round medians, µs (rank 0):"]
    shown = [p for phase in phases
             for p in [phase] + ([f"{phase} >{split}", f"{phase}/host >{split}"]
                                 if split > 1 else [])]
    for phase in shown:
        row = stats.get(phase, {})
        cells = [f"{m} " + ", ".join(f"{v:.1f}" for v in row[m]["per_round_median"].values())
                 for m in modes if m in row]
        if cells:
            lines.append(f"  {phase}: " + "; ".join(cells))
    return "\n".join(lines)


def long_table(stats_by_program, modes, nproc, verdicts):
    """Markdown, one row per program, phase (eager, replay and first-launch kinds) and mode:
    median [p10-p90] n, ratio to plain [per-round min-max] and record's target verdicts."""
    lines = ["| program | phase | mode | median µs [p10–p90] n | ratio [round min–max] | targets |",
             "|---|---|---|---|---|---|"]
    for program, stats in stats_by_program.items():
        for phase, row in stats.items():
            if phase_kind(phase) is None:
                continue
            for mode in modes:
                e = row.get(mode)
                if e is None:
                    continue
                cell = f"{e['median']:.1f} [{e['p10']:.1f}–{e['p90']:.1f}] {e['n']}"
                if nproc > 1:
                    cell += f" (max rank {e['max_rank_median']:.1f})"
                marks = " ".join(f"{v} {name.split(': ', 1)[1]}"
                                 for name, v, _ in verdicts.get((program, phase), [])
                                 if mode == TARGET_MODE)
                lines.append(f"| {program} | {phase} | {mode} | {cell} | "
                             f"{ratio_text(e) if mode != 'plain' else '—'} | {marks} |")
    return "\n".join(lines)


def ratio_table(stats_by_program, modes):
    """Markdown, one row per program and phase (host times too): each mode's ratio to plain."""
    others = [m for m in modes if m != "plain"]
    lines = ["| program/phase | plain median µs | " + " | ".join(others) + " |",
             "|---|---|" + "---|" * len(others)]
    for program, stats in stats_by_program.items():
        for phase, row in stats.items():
            if "plain" not in row:
                continue
            cells = [ratio_text(row.get(m)) for m in others]
            lines.append(f"| {program}/{phase} | {row['plain']['median']:.1f} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


def failure_lines(records):
    """Each failed, timed-out or skipped run with the last lines of its stderr."""
    lines = []
    for r in records:
        if r["status"] == "ok":
            continue
        lines.append(f"FAILED {r['program']} {r['mode']} round {r['round']}: {r['status']} "
                     f"(exit {r['rc']}, {r['wall_s']:.1f} s, {len(r['json_ranks'])} JSON)")
        lines += ["    " + line for line in r["stderr_tail"].splitlines()[-15:]]
    return lines


def summarise(args, modes, skipped, periods, host_speed, records, rounds_done, versions,
              stopped=""):
    """(report text, summary dict) from everything measured so far; `stopped` says why fewer
    rounds than --rounds ran."""
    names = [m.name for m in modes]
    stats_by_program, verdicts, targets, diff_lines, info, summary_programs = {}, {}, [], [], [], {}
    for program in args.program_list:
        stats = analyse(periods.get(program.name, {}), names, rounds_done)
        stats_by_program[program.name] = stats
        failures = [r for r in records if r["program"] == program.name and r["status"] != "ok"]
        targets.append(failure_target(program.name, failures))
        for phase, row in stats.items():
            found = row_targets(program.name, phase, row, skipped)
            verdicts[(program.name, phase)] = found
            targets += found
        diffs = {}
        if program.diff:
            diffs = differences(stats, program.diff, names)
            if diffs:
                diff_lines += difference_lines(program.name, program.diff, diffs)
            targets.append(difference_target(program.name, program.diff, diffs))
        targets += provenance_targets(program.name, stats, skipped)
        target_phases = [p for p in stats if phase_kind(p) in CEILINGS]
        matched_lines, matched = speed_matched(periods.get(program.name, {}),
                                               host_speed.get(program.name, {}), names,
                                               rounds_done, target_phases)
        info += [f"  {program.name}:"] + [f"  {line}" for line in
                                          above_attached(stats) + matched_lines]
        summary_programs[program.name] = {
            "script": str(program.script), "args": list(program.args), "diff": program.diff,
            "stats": stats, "differences": diffs, "speed_matched_stats": matched,
            "host_speed_us": host_speed.get(program.name, {})}

    why = f" ({stopped})" if stopped else ""
    out = [f"{rounds_done} of at most {args.rounds} round(s){why}; programs: "
           + ", ".join(f"{p.name} ({shlex.join([str(p.script.name), *p.args])})"
                       for p in args.program_list)
           + f"; {args.nproc} process(es) for torchrun programs",
           "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
           "modes: " + ", ".join(names)]
    out += [f"skipped mode {name}: {why}" for name, why in skipped.items()]
    out += ["periods: the programs' own CUDA events, every step, rank 0 pooled over rounds; "
            "ratio = median(mode) / median(plain) [min–max of the per-round ratios]", "",
            long_table(stats_by_program, names, args.nproc, verdicts), "",
            "ratios to plain, every phase (PHASE/host: each step's host time):", "",
            ratio_table(stats_by_program, names)]
    if diff_lines:
        out += ["", "mode 2 − mode 1 differences (the program's own periods):", *diff_lines]
    for program in args.program_list:
        stats = stats_by_program[program.name]
        replay_phases = [p for p in stats if phase_kind(p) == "replay"]
        out.append(f"\n{program.name}" + per_round(stats, names, args.split, replay_phases))
        speed = host_speed_line(host_speed.get(program.name, {}), names)
        if speed:
            out.append(speed)
        out.append("  runs (wall s): " + ", ".join(
            f"{m} " + "/".join(f"{r['wall_s']:.1f}" for r in records
                               if r["program"] == program.name and r["mode"] == m)
            for m in names))
    out += ["", *failure_lines(records), "targets:"]
    out += [f"  {verdict:4}  {name}: {detail}" for name, verdict, detail in targets]
    out += ["", "info:", *info]
    summary = {"args": {"gapscope": str(args.gapscope), "python": args.python,
                        "nproc": args.nproc, "rounds": args.rounds, "budget_s": args.budget,
                        "timeout_s": args.timeout, "nsys": str(args.nsys) if args.nsys else None,
                        "variants": dict(args.variant), "provenance_off": args.provenance_off},
               "rounds_done": rounds_done, "stopped": stopped, "versions": versions, "modes": names,
               "skipped_modes": skipped, "programs": summary_programs, "runs": records,
               "targets": [{"name": n, "verdict": v, "detail": d} for n, v, d in targets]}
    return "\n".join(out), summary


def tool_versions(args, modes):
    """The versions the report names: gapscope's and nsys's own --version lines."""
    versions = {}
    probes = [("gapscope", [str(args.gapscope), "--version"], {})]
    nsys = next((m for m in modes if m.tool == "nsys"), None)
    if nsys:
        probes.append(("nsys", [str(args.nsys), "--version"], nsys.env))
    for name, argv, env in probes:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, **env})
            versions[name] = (done.stdout.strip().splitlines() or ["?"])[-1]
        except (OSError, subprocess.TimeoutExpired) as e:
            versions[name] = f"unknown ({e})"
    return versions


def write_outputs(args, report, summary):
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    (args.out / "report.md").write_text(report + "\n")


def archive(args):
    """OUT/runs.tar.gz: every run's log and period JSON (not the traces: they are large)."""
    with tarfile.open(args.out / "runs.tar.gz", "w:gz") as tar:
        for program in args.program_list:
            folder = program_dir(args, program.name)
            for path in sorted(folder.glob("*.json")) + sorted((folder / "logs").glob("*")):
                tar.add(path, arcname=str(path.relative_to(args.work)))


def main(argv):
    args = parse_args(argv)
    modes, skipped = modes_of(args)
    tplan = TimePlan(modes)
    if args.dry_run:
        for line in plan_lines(args, modes, skipped, tplan):
            print(line)
        for run in warmup_runs(args) + plan_round(args, modes, 1):
            prefix = " ".join(f"{key}={shlex.quote(v)}" for key, v in run.env.items())
            print(f"# {run.program} {run.mode} round {run.round}\n"
                  f"{prefix + ' ' if prefix else ''}{shlex.join(run.argv)}")
        order = [f"{r.program}/{r.mode}" for r in plan_round(args, modes, 2)]
        print(f"# round 2 order: {', '.join(order)}")
        return 0
    for path, what in ((args.gapscope, "--gapscope"), (args.nsys, "--nsys")):
        if path is not None and not path.is_file():
            print(f"error: {what} {path} is not a file", file=sys.stderr)
            return 2
    if args.nsys_libs is not None and not args.nsys_libs.is_dir():
        print(f"error: --nsys-libs {args.nsys_libs} is not a folder", file=sys.stderr)
        return 2
    started = time.monotonic()
    deadline = started + args.budget if args.budget else float("inf")
    for program in args.program_list:
        (program_dir(args, program.name) / "logs").mkdir(parents=True, exist_ok=True)
    versions = tool_versions(args, modes)
    for line in plan_lines(args, modes, skipped, tplan):
        print(line, file=sys.stderr)

    for run in warmup_runs(args):
        print(f"[warm-up] {run.program}: {shlex.join(run.argv)}", file=sys.stderr, flush=True)
        result = execute(run.argv, run.env, program_dir(args, run.program) / "logs" / "warmup",
                         min(args.timeout, deadline - time.monotonic()))
        print(f"  {result['status']} ({result['wall_s']:.1f} s)", file=sys.stderr)

    periods, host_speed, records = {}, {}, []  # periods[program][mode][round][rank][phase]
    rounds_done, stopped = 0, ""
    for k in range(1, args.rounds + 1):
        runs = plan_round(args, modes, k)
        need = tplan.round_s(runs)
        left = deadline - time.monotonic()
        if k > 1 and need > left:
            stopped = (f"round {k} not started: it needs about {need:.0f} s, {left:.0f} s of "
                       f"the budget were left")
            print(stopped, file=sys.stderr)
            break
        for run in runs:
            folder = program_dir(args, run.program)
            left = deadline - time.monotonic()
            print(f"[round {k}/{args.rounds}] {run.program} {run.mode}: {shlex.join(run.argv)}",
                  file=sys.stderr, flush=True)
            if left < 1:
                result = {"status": "skipped", "rc": None, "wall_s": 0.0,
                          "stderr_tail": "not started: the budget was spent", "stdout": None,
                          "stderr": None}
            else:
                result = execute(run.argv, run.env, folder / "logs" / f"{run.mode}-r{k}",
                                 min(args.timeout, left))
                tplan.learn(run, result["wall_s"])
            for pattern in run.cleanup:
                for path in folder.glob(pattern):
                    path.unlink()
            ranks, speed = load_run(folder, run.mode, k, args.split)
            host_speed.setdefault(run.program, {}).setdefault(run.mode, {})[k] = speed
            if result["status"] == "ok" and len(ranks) != run.ranks:
                result["status"] = "failed"  # exited 0 but some rank wrote no periods
            print(f"  {result['status']} ({result['wall_s']:.1f} s, {len(ranks)}/{run.ranks} "
                  f"JSON)", file=sys.stderr)
            # Periods a failed run still wrote (e.g. it hung at exit after the phases) are used;
            # the run is listed as failed all the same.
            if ranks:
                periods.setdefault(run.program, {}).setdefault(run.mode, {})[k] = ranks
            records.append({"program": run.program, "mode": run.mode, "round": k,
                            "argv": run.argv, "env": run.env, "json_ranks": sorted(ranks),
                            **result})
        rounds_done = k
        # After every round, so that a run stopped from outside still leaves its figures.
        report, summary = summarise(args, modes, skipped, periods, host_speed, records,
                                    rounds_done, versions)
        summary["elapsed_s"] = round(time.monotonic() - started, 1)
        write_outputs(args, report, summary)

    report, summary = summarise(args, modes, skipped, periods, host_speed, records,
                                rounds_done, versions, stopped)
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    write_outputs(args, report, summary)
    print(report)
    archive(args)
    print(f"\nelapsed {time.monotonic() - started:.0f} s; summary: {args.out / 'summary.json'}, "
          f"report: {args.out / 'report.md'}, logs: {args.out / 'runs.tar.gz'}")
    no_plain = [p.name for p in args.program_list
                if not any("plain" in row for row in
                           summary["programs"][p.name]["stats"].values())]
    for name in no_plain:
        print(f"error: no plain periods of {name}", file=sys.stderr)
    return 1 if no_plain else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
