"""Tests of record_overhead.py's arithmetic (no GPU, no torch): the split at the trace budget,
pooling and ratios, the per-round lines and the target verdicts.

Run: python3 -m unittest discover -s benches -p 'test_*.py'  (.ci/run does)
"""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record_overhead as bench  # noqa: E402


class SplitPhases(unittest.TestCase):
    def test_period_i_times_step_i_plus_2_so_steps_2_to_n_are_the_first_n_minus_1(self):
        phases = {"replay": list(range(199)), "fresh": [1.0, 2.0], "eager": [5.0] * 10}
        out = bench.split_phases(phases, 64)
        self.assertEqual(out["replay 2-64"], list(range(63)))
        self.assertEqual(out["replay >64"], list(range(63, 199)))
        self.assertNotIn("fresh 2-64", out, "first launches are all traced: not split")
        self.assertNotIn("eager 2-64", out, "fewer steps than the budget: nothing untraced")
        self.assertEqual(out["replay"], phases["replay"], "the whole phase stays")

    def test_host_times_are_per_step_so_steps_1_to_n_are_the_first_n(self):
        out = bench.split_phases({"replay/host": list(range(200))}, 64)
        self.assertEqual(out["replay/host 1-64"], list(range(64)))
        self.assertEqual(out["replay/host >64"], list(range(64, 200)))

    def test_no_split(self):
        self.assertEqual(bench.split_phases({"replay": [1.0] * 100}, 0), {"replay": [1.0] * 100})


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

    def test_attached_runs_record_with_every_kind_and_callback_off(self):
        args = bench.parse_args(["--gapscope", "g", "--rounds", "1", "--out", "o"])
        attached = [(mode, env) for mode, _, _, env in bench.plan(args) if mode == "attached"]
        self.assertEqual(len(attached), 1)
        env = attached[0][1]
        self.assertEqual(env["GAPSCOPE_TRACE_BUDGET"], "0")
        self.assertEqual(env["GAPSCOPE_CUPTI_CALLBACKS"], "off")
        self.assertIn("CONCURRENT_KERNEL", env["GAPSCOPE_CUPTI_SKIP"].split(","))
        none = bench.parse_args(["--gapscope", "g", "--no-attached", "--out", "o"])
        self.assertNotIn("attached", [mode for mode, *_ in bench.plan(none)])


class HostSpeed(unittest.TestCase):
    def test_reads_rank_0s_speed_and_tolerates_older_files(self):
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            (out / "plain-r1-0.json").write_text(
                json.dumps({"rank": 0, "phases": {}, "host_speed_us": 812.5}))
            (out / "plain-r2-0.json").write_text(json.dumps({"rank": 0, "phases": {}}))
            self.assertEqual(bench.load_run(out, "plain", 1)[1], 812.5)
            self.assertIsNone(bench.load_run(out, "plain", 2)[1], "written before the field")
            self.assertIsNone(bench.load_run(out, "plain", 3)[1], "no file")

    def test_line_lists_rounds_in_order_per_mode(self):
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


FAKE_GAPSCOPE = """#!/bin/sh
# Stands in for `gapscope record ... -- PROGRAM...`: runs PROGRAM.
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""

FAKE_PROGRAM = """import json, sys
path = sys.argv[sys.argv.index("--json") + 1].replace("{rank}", "0")
mode = path.rsplit("/", 1)[-1].split("-r")[0]
period = {"plain": 20.0, "record": 22.0, "attached": 20.2}[mode]
phases = {"replay": [period] * 199, "replay/host": [period - 5] * 200}
json.dump({"rank": 0, "phases": phases, "host_speed_us": 800.0}, open(path, "w"))
"""


class EndToEnd(unittest.TestCase):
    def test_modes_run_interleaved_and_the_summary_holds_ratios_and_host_speed(self):
        import io
        import json
        import os
        import tempfile
        from contextlib import redirect_stderr, redirect_stdout
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            gapscope, program = d / "gapscope", d / "program.py"
            gapscope.write_text(FAKE_GAPSCOPE)
            os.chmod(gapscope, 0o755)
            program.write_text(FAKE_PROGRAM)
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                rc = bench.main(["--gapscope", str(gapscope), "--python", sys.executable,
                                 "--rounds", "2", "--no-profiler", "--out", str(d / "o"),
                                 "--", str(program)])
            self.assertEqual(rc, 0, err.getvalue())
            summary = json.loads((d / "o" / "summary.json").read_text())
            replay = summary["stats"]["replay"]
            self.assertAlmostEqual(replay["record"]["ratio"], 1.1)
            self.assertAlmostEqual(replay["attached"]["ratio"], 1.01)
            self.assertNotIn("profiler", replay)
            self.assertEqual(summary["host_speed_us"]["record"], {"1": 800.0, "2": 800.0})
            text = out.getvalue()
            self.assertIn("FAIL  record/replay <= 1.05: ratio 1.100", text)
            self.assertIn("over attached: record 1.089", text)
            self.assertIn("host speed, µs per fixed Python loop (rank 0; lower is faster): "
                          "plain 800, 800; record 800, 800; attached 800, 800", text)
            self.assertIn("  info    replay: record 1.100, attached 1.010", text)
            self.assertAlmostEqual(summary["speed_matched_stats"]["replay"]["record"]["ratio"], 1.1)


class Targets(unittest.TestCase):
    def test_verdicts(self):
        stats = {"replay": {"record": {"ratio": 1.04}, "profiler": {"ratio": 1.5}},
                 "eager": {"record": {"ratio": 1.3}, "profiler": {"ratio": 1.2}}}
        verdicts = {name: v for name, v, _ in bench.check_targets(stats, {})}
        self.assertEqual(verdicts["record runs exit cleanly"], "PASS")
        self.assertEqual(verdicts["record/replay <= 1.05"], "PASS")
        self.assertEqual(verdicts["record/eager <= 1.15"], "FAIL")
        share = f"{bench.PROFILER_SHARE:.2f}"
        self.assertEqual(verdicts[f"record/replay overhead <= {share} x profiler's"], "PASS")
        self.assertEqual(verdicts[f"record/eager overhead <= {share} x profiler's"], "FAIL")
        # Phases without a target get info lines, not verdicts.
        stats["replay/host"] = {"record": {"ratio": 1.5}, "profiler": {"ratio": 1.6}}
        names = [name for name, _, _ in bench.check_targets(stats, {})]
        self.assertFalse(any("replay/host" in n for n in names), names)
        self.assertEqual(bench.profiler_share_info(stats),
                         ["  info  replay/host: overhead record +50.0%, profiler +60.0%"])
        failed = {name: v for name, v, _ in bench.check_targets(stats, {"record": "hung"})}
        self.assertEqual(failed["record runs exit cleanly"], "FAIL")


if __name__ == "__main__":
    unittest.main()
