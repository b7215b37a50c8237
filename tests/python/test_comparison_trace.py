"""The Perfetto traces of `compare -o` (compare.perfetto-trace) and `try -o` (one
try-VARIANT.perfetto-trace per judged variant), read with Perfetto's own generated classes (pip
package `perfetto`): BASE and HEAD (or the variant) as two processes, one flow between each pair
of matched ops, the gap slices named by cause with their base → head medians, and the gap that
changed most marked.

Run from the repository root after `cargo build`:
    python3 -m unittest discover -s tests/python -p 'test_*.py'
(GAPSCOPE_BIN names another binary.)
"""

import collections
import glob
import os
import tempfile
import unittest

from test_perfetto_trace import OP_CATEGORIES, Decoded, gapscope

LARGEST = "largest change: "


class ComparisonTraceTest(unittest.TestCase):
    def check(self, path, sides):
        d = Decoded(path)
        processes = d.processes()
        self.assertEqual([p.split(" — ")[0] for p in processes], sides, path)
        sides = sorted(sides)
        slices = d.slices()  # also checks that slices nest on every track
        flows = collections.defaultdict(list)  # id -> [(process, op name)]
        gaps, marked = 0, []
        for begin, _end in slices:
            process = d.process_of(begin["track"]).split(" — ")[0]
            (cat,) = begin["cat"]
            if cat in OP_CATEGORIES:
                for f in begin["flows"]:
                    flows[f].append((process, begin["name"]))
            if cat == "gap" and "base_to_head" in begin["args"]:
                gaps += 1
                self.assertIn(" → ", begin["args"]["base_to_head"])
                if begin["name"].startswith(LARGEST):
                    self.assertTrue(begin["args"]["largest_change"])
                    marked.append((process, begin))
        self.assertGreater(len(flows), 0, "matched ops are joined")
        for f, ends in flows.items():
            self.assertEqual(sorted(p for p, _ in ends), sides, f"flow {f}: {ends}")
            self.assertEqual(ends[0][1], ends[1][1], "a flow joins ops of one name")
        self.assertGreater(gaps, 0)
        self.assertGreater(len(marked), 0, "the largest change is marked")
        return marked

    def test_compare_mode_2_against_mode_1(self):
        with tempfile.TemporaryDirectory() as out:
            gapscope(
                "compare",
                "traces/ht-decode-h200.json",
                "traces/ht-decode-h200.json",
                "--base-select",
                "graph_usage_mode=2",
                "--head-select",
                "graph_usage_mode=1",
                "-o",
                out,
            )
            marked = self.check(os.path.join(out, "compare.perfetto-trace"), ["BASE", "HEAD"])
            # The T=512 fresh pair: the external event wait, ≈ 44 µs in BASE, gone in HEAD.
            waits = [
                b
                for p, b in marked
                if p == "BASE" and "external event-wait" in b["name"]
                and b["args"]["base_median_ns"] > 40_000
            ]
            self.assertTrue(waits, marked)
            self.assertLess(waits[0]["args"]["head_median_ns"], 1_000)

    def test_try_variants(self):
        with tempfile.TemporaryDirectory() as out:
            gapscope("try", "--from", "traces/try-serial-event-h200", "-o", out)
            traces = sorted(glob.glob(os.path.join(out, "try-*.perfetto-trace")))
            self.assertTrue(traces, os.listdir(out))
            for path in traces:
                variant = os.path.basename(path)[len("try-") : -len(".perfetto-trace")]
                self.check(path, ["BASE", variant])


if __name__ == "__main__":
    unittest.main()
