"""Tests of record_overhead.py (no GPU, no torch): the split at a step, pooling and ratios, the
mode-2 - mode-1 differences, the target verdicts, the modes' commands and their rotation, the
time plan, and whole runs over stand-ins (a fake `gapscope`, a fake `nsys`, and the examples
themselves on benches/testdata/fake_torch, so that the JSON they write is the JSON read here).

Run: python3 -m unittest discover -s benches -p 'test_*.py'  (.ci/run does)
"""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record_overhead as bench  # noqa: E402

FAKE_TORCH = HERE / "testdata" / "fake_torch"


class SplitPhases(unittest.TestCase):
    def test_period_i_times_step_i_plus_2_so_steps_2_to_n_are_the_first_n_minus_1(self):
        phases = {"replay": list(range(199)), "fresh": [1.0, 2.0], "eager": [5.0] * 10}
        out = bench.split_phases(phases, 64)
        self.assertEqual(out["replay 2-64"], list(range(63)))
        self.assertEqual(out["replay >64"], list(range(63, 199)))
        self.assertNotIn("fresh 2-64", out, "first launches are all traced: not split")
        self.assertNotIn("eager 2-64", out, "fewer steps than the split: nothing after it")
        self.assertEqual(out["replay"], phases["replay"], "the whole phase stays")

    def test_host_times_are_per_step_so_steps_1_to_n_are_the_first_n(self):
        out = bench.split_phases({"replay/host": list(range(200))}, 64)
        self.assertEqual(out["replay/host 1-64"], list(range(64)))
        self.assertEqual(out["replay/host >64"], list(range(64, 200)))

    def test_no_split(self):
        self.assertEqual(bench.split_phases({"replay": [1.0] * 100}, 0), {"replay": [1.0] * 100})


class PhaseKind(unittest.TestCase):
    def test_the_three_examples_phases(self):
        kinds = {p: bench.phase_kind(p) for p in (
            "eager", "replay", "replay_ext", "fresh", "fresh_ext", "compiled", "replay_mode1",
            "replay_mode2", "eager/host", "replay >64", "mode2_minus_mode1")}
        self.assertEqual(kinds, {
            "eager": "eager", "replay": "replay", "replay_ext": "replay", "fresh": "first",
            "fresh_ext": "first", "compiled": "replay", "replay_mode1": "replay",
            "replay_mode2": "replay", "eager/host": None, "replay >64": None,
            "mode2_minus_mode1": None})


def periods(plain, record, rounds=2):
    """periods[mode][round][rank][phase] with one rank and one phase."""
    return {"plain": {k: {0: {"replay": plain}} for k in range(1, rounds + 1)},
            "record": {k: {0: {"replay": record[k - 1]}} for k in range(1, rounds + 1)}}


class Analyse(unittest.TestCase):
    def test_ratio_is_of_pooled_medians_and_rounds_give_the_spread(self):
        stats = bench.analyse(periods([20.0] * 5, [[21.0] * 5, [40.0] * 5]), ["plain", "record"], 2)
        record = stats["replay"]["record"]
        self.assertEqual(record["n"], 10)
        self.assertAlmostEqual(record["ratio"], (21.0 + 40.0) / 2 / 20.0)
        self.assertAlmostEqual(record["round_ratio_min"], 1.05)
        self.assertAlmostEqual(record["round_ratio_max"], 2.0)
        self.assertEqual(record["per_round_median"], {1: 21.0, 2: 40.0})

    def test_per_round_lines_show_slow_rounds_the_median_hides(self):
        stats = bench.analyse(periods([20.0] * 5, [[20.5] * 5, [31.0] * 5]), ["plain", "record"], 2)
        text = bench.per_round(stats, ["plain", "record"], 64)
        self.assertIn("replay: plain 20.0, 20.0; record 20.5, 31.0", text)

    def test_a_mode_with_no_runs_yet_has_no_cell(self):
        stats = bench.analyse(periods([20.0] * 5, [[21.0] * 5, [21.0] * 5]),
                              ["plain", "record", "nsys"], 2)
        self.assertNotIn("nsys", stats["replay"])


def two_phase_stats(medians):
    """stats with phases m1 and m2 from {mode: {phase: [per-round median, ...]}}."""
    p = {mode: {k + 1: {0: {phase: [values[k]] * 3 for phase, values in by_phase.items()}}
                for k in range(len(next(iter(by_phase.values()))))}
         for mode, by_phase in medians.items()}
    return bench.analyse(p, list(medians), len(next(iter(next(iter(medians.values())).values()))))


class Differences(unittest.TestCase):
    def test_per_round_difference_and_its_spread(self):
        stats = two_phase_stats({"plain": {"m1": [20.0, 21.0, 20.0], "m2": [22.8, 23.9, 22.9]},
                                 "record": {"m1": [21.0, 22.0, 23.0], "m2": [26.9, 28.0, 29.0]}})
        diffs = bench.differences(stats, ("m1", "m2"), ["plain", "record"])
        self.assertAlmostEqual(diffs["plain"]["median"], 2.9)
        self.assertAlmostEqual(diffs["plain"]["min"], 2.8)
        self.assertAlmostEqual(diffs["plain"]["max"], 2.9)
        self.assertAlmostEqual(diffs["record"]["median"], 6.0)
        name, verdict, detail = bench.difference_target("p", ("m1", "m2"), diffs)
        self.assertEqual((name, verdict), ("p/m2 − m1: record within plain's spread", "FAIL"))
        self.assertIn("record +6.00 µs, plain +2.90 [+2.80–+2.90]", detail)
        lines = bench.difference_lines("p", ("m1", "m2"), diffs)
        self.assertIn("    record: +6.00 [+5.90–+6.00] n=3; pooled +6.00", lines)

    def test_within_the_spread_passes(self):
        stats = two_phase_stats({"plain": {"m1": [20.0, 20.0], "m2": [22.0, 24.0]},
                                 "record": {"m1": [21.0, 21.0], "m2": [24.0, 24.0]}})
        diffs = bench.differences(stats, ("m1", "m2"), ["plain", "record"])
        self.assertEqual(bench.difference_target("p", ("m1", "m2"), diffs)[1], "PASS")

    def test_no_record_periods_skips(self):
        stats = two_phase_stats({"plain": {"m1": [20.0], "m2": [22.0]}})
        diffs = bench.differences(stats, ("m1", "m2"), ["plain", "record"])
        self.assertEqual(bench.difference_target("p", ("m1", "m2"), diffs)[1], "SKIP")


class Targets(unittest.TestCase):
    def test_ceiling_per_kind_and_below_each_comparator(self):
        row = {"record": {"ratio": 1.08}, "profiler": {"ratio": 1.5}, "nsys": {"ratio": 1.07}}
        got = {n: (v, d) for n, v, d in bench.row_targets("tg", "replay", row, {})}
        self.assertEqual(got["tg/replay: record <= 1.10"], ("PASS", "ratio 1.080"))
        self.assertEqual(got["tg/replay: record < profiler"][0], "PASS")
        self.assertEqual(got["tg/replay: record < nsys"], ("FAIL", "record 1.080, nsys 1.070"))
        eager = {n: v for n, v, _ in bench.row_targets("tg", "eager", row, {})}
        self.assertEqual(eager["tg/eager: record <= 1.25"], "PASS")
        row["record"]["ratio"] = 1.3
        eager = {n: v for n, v, _ in bench.row_targets("tg", "eager", row, {})}
        self.assertEqual(eager["tg/eager: record <= 1.25"], "FAIL")

    def test_a_comparator_not_run_is_skipped_with_its_reason(self):
        row = {"record": {"ratio": 1.02}, "profiler": {"ratio": 1.5}}
        got = {n: (v, d) for n, v, d in
               bench.row_targets("tg", "replay", row, {"nsys": "no --nsys PATH given"})}
        self.assertEqual(got["tg/replay: record < nsys"], ("SKIP", "no --nsys PATH given"))

    def test_host_times_and_first_launches_have_no_targets(self):
        row = {"record": {"ratio": 3.0}, "profiler": {"ratio": 1.5}}
        self.assertEqual(bench.row_targets("tg", "replay/host", row, {}), [])
        self.assertEqual(bench.row_targets("tg", "fresh", row, {}), [])

    def test_failed_record_runs_fail_their_program(self):
        fails = [{"mode": "record", "round": 2, "status": "timeout", "rc": -15},
                 {"mode": "nsys", "round": 1, "status": "failed", "rc": 1}]
        self.assertEqual(bench.failure_target("tg", fails),
                         ("tg: record runs exit cleanly", "FAIL", "round 2: timeout (exit -15)"))
        self.assertEqual(bench.failure_target("tg", fails[1:])[1], "PASS")


class Provenance(unittest.TestCase):
    def stats(self, record, noprov):
        p = {"plain": {1: {0: {"replay": [20.0] * 5}}, 2: {0: {"replay": [20.4] * 5}}},
             "record": {1: {0: {"replay": [record] * 5}}},
             bench.NOPROV_MODE: {1: {0: {"replay": [noprov] * 5}}}}
        return bench.analyse(p, ["plain", "record", bench.NOPROV_MODE], 2)

    def test_difference_within_plains_spread_over_rounds_passes(self):
        got = bench.provenance_targets("tg", self.stats(20.9, 20.6), {})
        self.assertEqual(len(got), 1)
        name, verdict, detail = got[0]
        self.assertEqual(name, "tg/replay: provenance costs nothing measurable")
        self.assertEqual(verdict, "PASS")
        self.assertIn("record − record-noprov +0.30 µs, plain's per-round spread 0.40 µs", detail)
        self.assertEqual(bench.provenance_targets("tg", self.stats(21.5, 20.6), {})[0][1], "FAIL")

    def test_without_the_mode_it_is_skipped(self):
        skipped = {bench.NOPROV_MODE: bench.NOPROV_MISSING}
        got = bench.provenance_targets("tg", self.stats(20.9, 20.6), skipped)
        self.assertEqual(got[0][1], "SKIP")


class AboveAttached(unittest.TestCase):
    def test_floor_ratio_and_what_each_mode_adds_above_it(self):
        p = periods([20.0] * 5, [[26.0] * 5, [26.0] * 5])
        p["attached"] = {k: {0: {"replay": [25.0] * 5}} for k in (1, 2)}
        stats = bench.analyse(p, ["plain", "record", "attached"], 2)
        lines = bench.above_attached(stats)
        self.assertEqual(lines, ["  info  replay: CUPTI attached, nothing traced 1.250 x plain; "
                                 "over attached: record 1.040"])

    def test_no_line_without_the_attached_mode(self):
        stats = bench.analyse(periods([20.0] * 5, [[26.0] * 5, [26.0] * 5]), ["plain", "record"], 2)
        self.assertEqual(bench.above_attached(stats), [])


def args_of(*extra):
    return bench.parse_args(["--gapscope", "g", "--out", "o", *extra])


class Modes(unittest.TestCase):
    def runs(self, *extra, k=1):
        args = args_of(*extra)
        modes, skipped = bench.modes_of(args)
        return {(r.program, r.mode): r for r in bench.plan_round(args, modes, k)}, skipped

    def test_record_runs_with_defaults_and_the_step_range_mode_is_opt_in(self):
        runs, _ = self.runs()
        argv = runs[("phases", "record")].argv
        self.assertEqual(argv[1:4], ["record", "-o", str(Path("o/work/phases/record-r1"))])
        self.assertEqual(argv[4], "--", "no --step-range, no --trace-budget: the defaults")
        self.assertNotIn(("phases", "record-step-range"), runs)
        runs, _ = self.runs("--step-range-mode")
        argv = runs[("phases", "record-step-range")].argv
        self.assertEqual(argv[4:7], ["--step-range", "decode_step", "--"])

    def test_attached_runs_record_with_every_kind_and_callback_off(self):
        runs, _ = self.runs()
        env = runs[("torch_graphs", "attached")].env
        self.assertEqual(env["GAPSCOPE_TRACE_BUDGET"], "0")
        self.assertEqual(env["GAPSCOPE_CUPTI_CALLBACKS"], "off")
        self.assertIn("CONCURRENT_KERNEL", env["GAPSCOPE_CUPTI_SKIP"].split(","))
        runs, _ = self.runs("--no-attached")
        self.assertNotIn("attached", {mode for _, mode in runs})

    def test_profiler_mode_passes_profile_to_the_program(self):
        runs, _ = self.runs()
        argv = runs[("torch_compile_decode", "profiler")].argv
        self.assertEqual(argv[0], "python3")
        self.assertTrue(argv[1].endswith("examples/torch_compile_decode.py"))
        self.assertEqual(argv[2:4], ["--profile", "--json"])

    def test_nsys_is_skipped_with_a_reason_unless_given(self):
        runs, skipped = self.runs()
        self.assertNotIn("nsys", {mode for _, mode in runs})
        self.assertEqual(skipped["nsys"], "no --nsys PATH given")
        self.assertIn(bench.NOPROV_MODE, skipped)
        runs, skipped = self.runs("--nsys", "/x/nsys", "--nsys-libs", "/libs")
        run = runs[("phases", "nsys")]
        self.assertNotIn("nsys", skipped)
        self.assertEqual(run.argv[:8], ["/x/nsys", "profile", "--trace=cuda,nvtx",
                                        "--cuda-graph-trace=node", "--sample=none",
                                        "--cpuctxsw=none", "-o",
                                        str(Path("o/work/phases/nsys-r1"))])
        self.assertEqual(run.argv[8:11], ["--force-overwrite", "true", "python3"])
        self.assertTrue(run.env["LD_LIBRARY_PATH"].startswith("/libs"))
        self.assertEqual(run.cleanup, ["nsys-r1.*"])

    def test_provenance_off_adds_its_record_mode(self):
        runs, skipped = self.runs("--provenance-off", "GAPSCOPE_X=0;GAPSCOPE_Y=a=b")
        self.assertNotIn(bench.NOPROV_MODE, skipped)
        run = runs[("phases", bench.NOPROV_MODE)]
        self.assertEqual(run.env, {"GAPSCOPE_X": "0", "GAPSCOPE_Y": "a=b"})
        self.assertEqual(run.argv[1], "record")

    def test_every_program_in_every_mode_once_a_round_rotated_by_the_round(self):
        args = args_of("--nsys", "n")
        modes, _ = bench.modes_of(args)
        names = [m.name for m in modes]
        self.assertEqual(names, ["plain", "record", "profiler", "nsys", "attached"])
        for k in (1, 2, 3):
            runs = bench.plan_round(args, modes, k)
            self.assertEqual(len(runs), 15)
            self.assertEqual(len({(r.program, r.mode) for r in runs}), 15)
            self.assertTrue(all(r.round == k for r in runs))
        second = bench.plan_round(args, modes, 2)
        self.assertEqual((second[0].program, second[0].mode), ("torch_compile_decode", "record"))
        self.assertEqual([r.mode for r in second[:5]],
                         ["record", "profiler", "nsys", "attached", "plain"])

    def test_programs_and_their_arguments(self):
        args = args_of("--programs", "phases,torch_graphs", "--args", "phases=--size 256")
        self.assertEqual([p.name for p in args.program_list], ["phases", "torch_graphs"])
        self.assertEqual(args.program_list[0].args, ("--size", "256"))
        self.assertEqual(args.program_list[1].diff, ("replay", "replay_ext"))
        custom = args_of("--diff", "a,b", "--", "my/prog.py", "--n", "3")
        self.assertEqual([(p.name, p.args, p.diff) for p in custom.program_list],
                         [("prog", ("--n", "3"), ("a", "b"))])
        with redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                args_of("--programs", "nope")

    def test_torchrun_only_for_torch_graphs(self):
        runs, _ = self.runs("--nproc", "2")
        tg, ph = runs[("torch_graphs", "plain")], runs[("phases", "plain")]
        self.assertEqual(tg.argv[1:5], ["-m", "torch.distributed.run", "--nproc-per-node", "2"])
        self.assertEqual((tg.ranks, ph.ranks), (2, 1))
        self.assertTrue(ph.argv[1].endswith("examples/phases.py"))


class TimePlanning(unittest.TestCase):
    def test_guesses_until_measured_then_the_last_measured_wall(self):
        args = args_of("--programs", "phases", "--no-profiler", "--no-attached")
        modes, _ = bench.modes_of(args)
        tplan = bench.TimePlan(modes)
        runs = bench.plan_round(args, modes, 1)
        guess = bench.GUESS_PLAIN_S["phases"]
        self.assertEqual(tplan.round_s(runs), guess + guess + bench.GUESS_EXTRA_S["record"])
        tplan.learn(runs[0], 7.5)
        tplan.learn(runs[1], 11.0)
        self.assertEqual(tplan.round_s(bench.plan_round(args, modes, 2)), 18.5)

    def test_rounds_that_fit(self):
        self.assertEqual(bench.rounds_that_fit(500, 45, 150, 8), 3)
        self.assertEqual(bench.rounds_that_fit(500, 45, 600, 8), 1, "round 1 always runs")
        self.assertEqual(bench.rounds_that_fit(0, 45, 600, 4), 4, "no budget: --rounds")
        self.assertEqual(bench.rounds_that_fit(10_000, 45, 10, 8), 8)

    def test_dry_run_prints_the_plan_and_round_1(self):
        out = io.StringIO()
        with redirect_stdout(out):
            rc = bench.main(["--gapscope", "g", "--out", "o", "--budget", "500", "--rounds", "8",
                             "--dry-run"])
        text = out.getvalue()
        self.assertEqual(rc, 0)
        self.assertIn("modes: plain, record, profiler, attached", text)
        self.assertIn("skipped mode nsys: no --nsys PATH given", text)
        self.assertIn("one round: 12 runs, about", text)
        self.assertIn("budget 500 s, at most 8 rounds:", text)
        self.assertIn("# torch_compile_decode warmup round 0", text)
        self.assertIn("# phases attached round 1", text)
        self.assertFalse(Path("o").exists(), "a dry run writes nothing")


class LoadRun(unittest.TestCase):
    def test_reads_rank_0s_speed_and_tolerates_older_files(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            (out / "plain-r1-0.json").write_text(
                json.dumps({"rank": 0, "phases": {}, "host_speed_us": 812.5}))
            (out / "plain-r2-0.json").write_text(json.dumps({"rank": 0, "phases": {}}))
            self.assertEqual(bench.load_run(out, "plain", 1)[1], 812.5)
            self.assertIsNone(bench.load_run(out, "plain", 2)[1], "written before the field")
            self.assertIsNone(bench.load_run(out, "plain", 3)[1], "no file")

    def test_a_file_of_another_shape_is_left_out_with_a_warning(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            (out / "plain-r1-0.json").write_text(json.dumps({"rank": 0, "phases": [1.0]}))
            (out / "plain-r1-1.json").write_text(
                json.dumps({"rank": 1, "phases": {"eager": ["x"]}}))
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(bench.load_run(out, "plain", 1), ({}, None))
            self.assertEqual(err.getvalue().count("warning: unreadable"), 2)

    def test_host_speed_line_lists_rounds_in_order_per_mode(self):
        line = bench.host_speed_line({"plain": {2: 1617.0, 1: 830.4}, "record": {1: None}},
                                     ["plain", "record"])
        self.assertEqual(line, "  host speed, µs per fixed Python loop (rank 0; lower is "
                               "faster): plain 830, 1617")
        self.assertEqual(bench.host_speed_line({}, ["plain"]), "")


class SpeedMatched(unittest.TestCase):
    @staticmethod
    def run_of(period):
        return {0: {"replay": [period] * 10}}

    def test_ratios_over_the_fast_speed_rounds_only(self):
        # Round 2 of record drew the slow speed (and ran host-bound); round 1 of plain too.
        periods = {"plain": {1: self.run_of(21.0), 2: self.run_of(20.0)},
                   "record": {1: self.run_of(20.2), 2: self.run_of(28.0)}}
        speeds = {"plain": {1: 1500.0, 2: 800.0}, "record": {1: 850.0, 2: 1600.0}}
        self.assertEqual(bench.fast_rounds(speeds), {"plain": {2}, "record": {1}})
        lines, stats = bench.speed_matched(periods, speeds, ["plain", "record"], 2, ["replay"])
        self.assertAlmostEqual(stats["replay"]["record"]["ratio"], 20.2 / 20.0)
        self.assertIn("plain 1, record 1 of 2", lines[0])
        self.assertEqual(lines[1], "  info    replay: record 1.010")
        # Over the whole run the slow round decides: 24.1 / 20.5.
        whole = bench.analyse(periods, ["plain", "record"], 2)
        self.assertAlmostEqual(whole["replay"]["record"]["ratio"], 24.1 / 20.5)

    def test_nothing_without_host_speeds(self):
        periods = {"plain": {1: self.run_of(20.0)}, "record": {1: self.run_of(21.0)}}
        speeds = {"plain": {1: None}, "record": {1: None}}
        self.assertIsNone(bench.fast_rounds(speeds))
        self.assertEqual(bench.speed_matched(periods, speeds, ["plain", "record"], 1,
                                             ["replay"]), ([], {}))


# Stands in for `gapscope record ... -- PROGRAM...`: runs PROGRAM, its fake CUDA events 21 µs
# apart (20.5 with every callback off, as `attached` runs).
FAKE_GAPSCOPE = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "gapscope 0.0-fake"; exit 0; fi
while [ "$1" != "--" ]; do shift; done
shift
FAKE_TORCH_EVENT_US=21
[ "$GAPSCOPE_CUPTI_CALLBACKS" = off ] && FAKE_TORCH_EVENT_US=20.5
export FAKE_TORCH_EVENT_US
exec "$@"
"""

# Stands in for `nsys profile ... -o STEM --force-overwrite true PROGRAM...`: writes STEM.nsys-rep,
# runs PROGRAM with events 30 µs apart, and fails when its libraries folder is not on the path.
FAKE_NSYS = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 0.0-fake"; exit 0; fi
case "$LD_LIBRARY_PATH" in *nsyslibs*) ;; *) echo "libdw.so.1 not found" >&2; exit 3;; esac
while [ "$1" != "-o" ]; do shift; done
echo report > "$2.nsys-rep"
shift 4
FAKE_TORCH_EVENT_US=30 exec "$@"
"""


def executable(path, text):
    path.write_text(text)
    os.chmod(path, 0o755)
    return str(path)


class EndToEnd(unittest.TestCase):
    """The three examples, on the stand-in torch, through the whole bench."""

    def run_bench(self, d, *extra):
        gapscope = executable(d / "gapscope", FAKE_GAPSCOPE)
        nsys = executable(d / "nsys", FAKE_NSYS)
        (d / "nsyslibs").mkdir()
        out, err = io.StringIO(), io.StringIO()
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(FAKE_TORCH)
        try:
            with redirect_stdout(out), redirect_stderr(err):
                rc = bench.main(["--gapscope", gapscope, "--python", sys.executable,
                                 "--nsys", nsys, "--nsys-libs", str(d / "nsyslibs"),
                                 "--rounds", "2", "--out", str(d / "o"), "--work",
                                 str(d / "w"), *extra])
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
        return rc, out.getvalue(), err.getvalue()

    def test_every_program_and_mode_with_ratios_differences_and_verdicts(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            rc, text, err = self.run_bench(d)
            self.assertEqual(rc, 0, err)
            summary = json.loads((d / "o" / "summary.json").read_text())
            self.assertEqual(summary["rounds_done"], 2)
            self.assertEqual(summary["versions"]["nsys"], "NVIDIA Nsight Systems version 0.0-fake")
            self.assertEqual([r["status"] for r in summary["runs"]], ["ok"] * 30, err)
            programs = summary["programs"]
            self.assertEqual(set(programs), {"torch_graphs", "torch_compile_decode", "phases"})
            self.assertEqual(set(programs["phases"]["stats"]),
                             {"eager", "eager/host", "replay_mode1", "replay_mode1/host",
                              "replay_mode2", "replay_mode2/host"})
            self.assertIn("compiled", programs["torch_compile_decode"]["stats"])
            self.assertIn("fresh_ext", programs["torch_graphs"]["stats"])
            replay = programs["torch_graphs"]["stats"]["replay"]
            self.assertEqual(replay["plain"]["n"], 2 * 199, "every step of both rounds")
            expected = {"record": 21 / 20, "attached": 20.5 / 20, "profiler": 25 / 20,
                        "nsys": 30 / 20}
            for mode, ratio in expected.items():
                self.assertAlmostEqual(replay[mode]["ratio"], ratio, msg=mode)
            diff = programs["phases"]["differences"]
            self.assertEqual(set(diff), {"plain", "record", "profiler", "nsys", "attached"})
            self.assertAlmostEqual(diff["record"]["median"], 0.0)
            self.assertEqual(list(d.glob("w/*/nsys-r*.nsys-rep")), [], "nsys reports deleted")
            self.assertEqual(len(list(d.glob("w/*/nsys-r*-0.json"))), 6)
            verdicts = {t["name"]: t["verdict"] for t in summary["targets"]}
            self.assertEqual(verdicts["phases/replay_mode2: record <= 1.10"], "PASS")
            self.assertEqual(verdicts["torch_compile_decode/compiled: record < nsys"], "PASS")
            self.assertEqual(verdicts["torch_graphs/replay_ext − replay: record within plain's "
                                      "spread"], "PASS")
            self.assertEqual(verdicts["phases/replay_mode1: provenance costs nothing "
                                      "measurable"], "SKIP")
            self.assertNotIn("FAIL", verdicts.values())
            self.assertIn("| phases | replay_mode1 | record | 21.0 [21.0–21.0] 400 | "
                          "1.050 [1.050–1.050] | PASS record <= 1.10 PASS record < profiler "
                          "PASS record < nsys |", text)
            self.assertIn("    nsys: +0.00 [+0.00–+0.00] n=2; pooled +0.00", text)
            self.assertIn("skipped mode record-noprov: not asked for", text)
            self.assertIn("\nphases\nper-round medians, µs (rank 0):\n  replay_mode1: plain 20.0, "
                          "20.0; record 21.0, 21.0;", text)
            self.assertEqual((d / "o" / "report.md").read_text().strip(), text.split(
                "\nelapsed ")[0].strip())
            import tarfile
            with tarfile.open(d / "o" / "runs.tar.gz") as tar:
                names = tar.getnames()
            self.assertIn("phases/nsys-r2-0.json", names)
            self.assertIn("phases/logs/record-r1.err", names)
            self.assertIn("torch_compile_decode/logs/warmup.out", names)

    def test_a_failing_mode_is_listed_with_its_stderr_and_the_budget_stops_rounds(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            # nsys fails without its libraries; round 2, expected to take longer than the
            # budget leaves, is not started.
            with mock.patch.object(bench.TimePlan, "round_s", return_value=1e6):
                rc, text, err = self.run_bench(d, "--programs", "phases", "--no-profiler",
                                               "--no-attached", "--no-warmup", "--budget", "600",
                                               "--nsys-libs", str(d))
            self.assertEqual(rc, 0, err)
            self.assertIn("FAILED phases nsys round 1: failed (exit 3", text)
            self.assertIn("    libdw.so.1 not found", text)
            self.assertIn("round 2 not started", err)
            self.assertIn("1 of at most 2 round(s) (round 2 not started: it needs about 1000000 s",
                          text)
            summary = json.loads((d / "o" / "summary.json").read_text())
            self.assertEqual(summary["rounds_done"], 1)
            verdicts = {t["name"]: t["verdict"] for t in summary["targets"]}
            self.assertEqual(verdicts["phases/eager: record < nsys"], "SKIP")


if __name__ == "__main__":
    unittest.main()
