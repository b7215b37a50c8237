"""Tests of check_record.py on traces recorded on the H200 (traces/), no GPU needed.

Run: python3 -m unittest discover -s benches -p 'test_*.py'  (.ci/run does)
"""
import io
import sys
import unittest
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_record  # noqa: E402

TRACES = Path(__file__).resolve().parent.parent / "traces"
SAMPLED = str(TRACES / "torch-graphs-sampling-h200.json")
TWO_RANK = TRACES / "torch-graphs-2rank-budget-h200"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = check_record.main(list(argv))
    return rc, out.getvalue() + err.getvalue()


class RealTraces(unittest.TestCase):
    def test_a_budgeted_recording_passes_with_its_own_counts(self):
        rc, text = run(SAMPLED, "--schedule", "first", "--budget", "64", "--eager", "200", "--replays", "200",
                       "--graphs", "2", "--external-wait", "cudaStreamWaitEvent")
        self.assertEqual(rc, 0, text)
        self.assertIn("PASS  replayed graphs traced up to the budget: exec 2: 64 of 200, "
                      "exec 125: 64 of 200", text)

    def test_wrong_counts_fail(self):
        rc, text = run(SAMPLED, "--schedule", "first", "--budget", "16", "--eager", "100", "--replays", "200")
        self.assertEqual(rc, 1)
        self.assertIn("FAIL  sampling budget: 64 (expected 16)", text)
        self.assertIn("FAIL  eager steps traced: 64 of 200 (expected 16 of 100)", text)
        self.assertIn("FAIL  replayed graphs traced up to the budget", text)

    def test_ncclallgather_tags_and_their_absence_without_mixing(self):
        common = ["--schedule", "first", "--budget", "64", "--eager", "200", "--replays", "200"]
        _, text = run(str(TWO_RANK / "mixing-1" / "trace-0.json"), *common,
                      "--external-wait", "cudaStreamWaitEvent", "--inside", "ncclAllGather")
        self.assertIn("PASS  external event-wait nodes created by cudaStreamWaitEvent inside "
                      "ncclAllGather", text)
        self.assertIn("FAIL  metadata.sampling written: absent", text,
                      "recorded before the field existed")
        _, text = run(str(TWO_RANK / "mixing-0" / "trace-0.json"), *common, "--no-external")
        self.assertIn("PASS  no external event nodes", text)
        _, text = run(str(TWO_RANK / "mixing-0" / "trace-0.json"), *common,
                      "--external-wait", "cudaStreamWaitEvent")
        self.assertIn("FAIL  external event-wait nodes", text)

    def test_an_unreadable_trace_is_one_error_line(self):
        rc, text = run("/nonexistent/trace.json", "--budget", "1", "--eager", "1",
                       "--replays", "1")
        self.assertEqual(rc, 2)
        self.assertEqual(len(text.strip().splitlines()), 1, text)


FAKE_GAPSCOPE = """#!/bin/bash
# `record -o DIR ...` copies recorded traces into DIR; everything else is the real gapscope.
if [ "$1" = record ]; then
  mkdir -p "$3"
  case "$3" in
    *one) cp "{traces}/torch-graphs-sampling-h200.json" "$3/trace-0.json";;
    *mix1) cp "{traces}"/torch-graphs-2rank-budget-h200/mixing-1/trace-*.json "$3/";;
    *mix0) cp "{traces}"/torch-graphs-2rank-budget-h200/mixing-0/trace-*.json "$3/";;
  esac
  exit 0
fi
exec "{gapscope}" "$@"
"""


class GpuCheckScript(unittest.TestCase):
    """benches/gpu_check.sh's flow, with recorded traces standing in for fresh recordings and
    a stand-in nvidia-smi naming two GPUs."""

    def test_every_check_runs_and_only_the_missing_sampling_record_fails(self):
        import os
        import subprocess
        import tempfile
        repo = TRACES.parent
        gapscope = repo / "target" / "debug" / "gapscope"
        self.assertTrue(gapscope.is_file(), "needs `cargo build` (target/debug/gapscope)")
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            fake = d / "gapscope"
            fake.write_text(FAKE_GAPSCOPE.format(traces=TRACES, gapscope=gapscope))
            smi = d / "nvidia-smi"
            smi.write_text("#!/bin/sh\necho 'GPU 0: stand-in'\necho 'GPU 1: stand-in'\n")
            for f in (fake, smi):
                os.chmod(f, 0o755)
            env = {**os.environ, "PATH": f"{d}:{os.environ['PATH']}", "EAGER": "200", "SCHEDULE": "first",
                   "REPLAYS": "200", "PYTHON": sys.executable}
            run = subprocess.run(["bash", str(repo / "benches" / "gpu_check.sh"), str(fake),
                                  str(d / "out")], env=env, capture_output=True, text=True,
                                 timeout=120)
        text = run.stdout + run.stderr
        self.assertEqual(run.returncode, 1, text)
        fails = [line for line in text.splitlines() if line.startswith("FAIL")]
        # The two-rank traces were recorded before traces carried metadata.sampling.
        self.assertEqual(len([f for f in fails if "metadata.sampling written: absent" in f]), 4,
                         text)
        self.assertEqual(len([f for f in fails if f.startswith("FAIL  trace checks, mixing")]),
                         4, text)
        self.assertEqual(len(fails), 8, text)
        for line in ["PASS  trace checks", "PASS  analyze", "PASS  compare runs",
                     "PASS  compare names the event-wait node inside ncclAllGather",
                     "== 4 failure(s)"]:
            self.assertIn(line, text)


if __name__ == "__main__":
    unittest.main()


class Schedule(unittest.TestCase):
    def test_the_windows_schedule_matches_the_recorders(self):
        import check_record
        # budget::tests: a 200-step phase keeps 120 at 64; 4 keeps 5 of the first 6.
        self.assertEqual(sum(check_record.sampled(n, 64) for n in range(200)), 120)
        self.assertEqual([check_record.sampled(n, 4) for n in range(6)], [True] * 5 + [False])

