"""The protobuf Perfetto trace (trace.perfetto-trace) checked with Perfetto's own generated
classes (pip package `perfetto`, perfetto/protos/perfetto/trace/perfetto_trace_pb2.py): the
bundled traces analysed together, and a 2-rank merge. Tracks and flows are counted and held
against the input traces' streams, host threads and launch calls, and against the Chrome JSON
of the same run.

Run from the repository root after `cargo build`:
    python3 -m unittest discover -s tests/python -p 'test_*.py'
(GAPSCOPE_BIN names another binary.)
"""

import collections
import json
import os
import re
import subprocess
import tempfile
import unittest

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("GAPSCOPE_BIN", os.path.join(ROOT, "target", "debug", "gapscope"))
BUNDLED = [
    "traces/emu-h200.json",
    "traces/ht-decode-h200.json",
    "traces/ht-decode-2rank-h200/mode1-rank0.json",
    "traces/ht-decode-2rank-h200/mode2-rank0.json",
]
MERGE = [
    "traces/ht-decode-2rank-h200/mode2-rank0.json",
    "traces/ht-decode-2rank-h200/mode2-rank1.json",
]
OP_CATEGORIES = {"kernel", "memcpy", "memset"}
TRACK_NAME = re.compile(
    r"^(steps|gaps|idle per step|host thread (\d+)|(?:device (\d+) )?stream (\d+))"
    r"( \(overflow \d+\))?$"
)
PROCESS_TRACE = re.compile(r" — trace \d+: (.+?) rank (\d+)(?: \(synthetic[^)]*\))?$")


def gapscope(*args):
    done = subprocess.run([BIN, *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"gapscope {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done


class Decoded:
    """A trace read as Perfetto reads it: tracks by uuid, track events with interned names
    resolved (per packet sequence, reset when a packet clears the incremental state)."""

    def __init__(self, path):
        trace = pb.Trace()
        with open(path, "rb") as f:
            trace.ParseFromString(f.read())
        self.tracks = {}
        self.events = []
        tables = collections.defaultdict(dict)  # sequence -> {(kind, iid): str}
        for packet in trace.packet:
            seq = packet.trusted_packet_sequence_id
            if packet.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                tables[seq] = {}
            if packet.HasField("interned_data"):
                d = packet.interned_data
                for kind, entries, attr in [
                    ("name", d.event_names, "name"),
                    ("cat", d.event_categories, "name"),
                    ("key", d.debug_annotation_names, "name"),
                    ("value", d.debug_annotation_string_values, "str"),
                ]:
                    for e in entries:
                        value = getattr(e, attr)
                        tables[seq][(kind, e.iid)] = (
                            value.decode() if isinstance(value, bytes) else value
                        )
            if packet.HasField("track_descriptor"):
                t = packet.track_descriptor
                assert t.uuid not in self.tracks, f"track {t.uuid} declared twice"
                self.tracks[t.uuid] = t
            if packet.HasField("track_event"):
                self.events.append(self._event(packet, tables[seq]))

    @staticmethod
    def _event(packet, table):
        e = packet.track_event
        args = {}
        for a in e.debug_annotations:
            key = table[("key", a.name_iid)]
            kind = a.WhichOneof("value")
            if kind == "string_value_iid":
                args[key] = table[("value", a.string_value_iid)]
            else:
                args[key] = getattr(a, kind)
        return {
            "ts": packet.timestamp,
            "type": e.type,
            "track": e.track_uuid,
            "name": table[("name", e.name_iid)] if e.name_iid else e.name,
            "cat": [table[("cat", c)] for c in e.category_iids],
            "args": args,
            "flows": list(e.flow_ids),
            "ends_flows": list(e.terminating_flow_ids),
            "counter": e.counter_value,
        }

    def process_of(self, uuid):
        t = self.tracks[uuid]
        while t.HasField("parent_uuid"):
            t = self.tracks[t.parent_uuid]
        assert t.HasField("process"), f"track {uuid} is under no process"
        return t.process.process_name

    def processes(self):
        return [t.process.process_name for t in self.tracks.values() if t.HasField("process")]

    def slices(self):
        """(begin event, end ts), after checking that slices nest on every track: events in
        time order (file order on ties, as Perfetto's sorter keeps it), a stack per track."""
        order = sorted(range(len(self.events)), key=lambda i: (self.events[i]["ts"], i))
        open_ = collections.defaultdict(list)
        out = []
        for i in order:
            e = self.events[i]
            if e["type"] == pb.TrackEvent.TYPE_SLICE_BEGIN:
                assert not open_[e["track"]], f"overlapping slices on track {e['track']}: {e}"
                open_[e["track"]].append(e)
            elif e["type"] == pb.TrackEvent.TYPE_SLICE_END:
                assert open_[e["track"]], f"an end without a begin: {e}"
                out.append((open_[e["track"]].pop(), e["ts"]))
        assert not any(open_.values()), "slices left open"
        return out


def load_input(path):
    """A gapscope trace file: its op records by correlation id, streams, launch calls."""
    with open(os.path.join(ROOT, path)) as f:
        t = json.load(f)
    ops = collections.defaultdict(list)  # corr -> [(name, device, stream, duration)]
    for k in t["kernels"]:
        start, end, device, stream, corr, name = k[:6]
        ops[corr].append((t["strings"][name], device, stream, end - start))
    for m in t["memcpys"] + t["memsets"]:
        start, end, device, stream, corr, _bytes, kind = m[:7]
        ops[corr].append((t["strings"][kind], device, stream, end - start))
    calls = {}  # corr -> thread of the call
    for a in t["api_calls"]:
        calls.setdefault(a[2], a[3])
    return {"ops": ops, "calls": calls, "threads": {a[3] for a in t["api_calls"]}}


class PerfettoTraceTest(unittest.TestCase):
    def check(self, decoded, inputs, cells, json_trace):
        # A process per cell, each named after its trace.
        processes = decoded.processes()
        self.assertEqual(len(processes), cells)
        self.assertEqual(len(set(processes)), cells, "process names are unique")
        tracks_per_process = collections.defaultdict(list)
        for uuid, t in decoded.tracks.items():
            if t.HasField("parent_uuid"):
                tracks_per_process[decoded.process_of(uuid)].append(t)
        streams_seen, hosts_seen = 0, 0
        for name in processes:
            source = inputs[PROCESS_TRACE.search(name).group(1)]
            record_streams = {s for recs in source["ops"].values() for (_, _, s, _) in recs}
            names = [t.name for t in tracks_per_process[name]]
            self.assertIn("idle per step", names, name)
            for track in names:
                m = TRACK_NAME.match(track)
                self.assertIsNotNone(m, f"{name}: track {track!r}")
                if m.group(2):
                    self.assertIn(int(m.group(2)), source["threads"], track)
                    hosts_seen += 1
                if m.group(4):
                    self.assertIn(int(m.group(4)), record_streams, track)
                    streams_seen += 1
        self.assertGreater(streams_seen, 0)
        self.assertGreater(hosts_seen, 0)

        slices = decoded.slices()
        by_cat = collections.Counter()
        steps = collections.Counter()
        launched = 0
        calls_with_ops = set()
        flow_starts, flow_ends = {}, {}
        for begin, end in slices:
            process = decoded.process_of(begin["track"])
            source = inputs[PROCESS_TRACE.search(process).group(1)]
            track = decoded.tracks[begin["track"]].name
            (cat,) = begin["cat"]
            by_cat[(process, cat)] += 1
            args = begin["args"]
            if cat in OP_CATEGORIES:
                # The op is a record of its trace: same name, device, stream and duration.
                want = (begin["name"], args["device"], args["stream"], end - begin["ts"])
                self.assertIn(want, source["ops"][args["corr"]], begin)
                self.assertIn(f"stream {args['stream']}", track)
                if args["corr"] in source["calls"]:
                    launched += 1
                    calls_with_ops.add((process, args["corr"]))
                    self.assertEqual(len(begin["ends_flows"]), 1, begin)
                    flow_ends[begin["ends_flows"][0]] = (process, args["corr"])
                else:
                    self.assertEqual(begin["ends_flows"], [], begin)
                if "gap_before_cause" in args:
                    self.assertTrue(args["gap_before"])
            elif cat == "api":
                self.assertEqual(track.split(" (")[0], f"host thread {source['calls'][args['corr']]}")
                for f in begin["flows"]:
                    self.assertNotIn(f, flow_starts, "a flow starts once")
                    flow_starts[f] = (process, args["corr"])
            elif cat == "gap":
                self.assertTrue(args["cause"])
                self.assertEqual(args["length_ns"], end - begin["ts"])
            elif cat == "step":
                steps[process] += 1
        # A flow per launched op, from its own launch call in its own process.
        self.assertGreater(launched, 0)
        self.assertEqual(len(flow_ends), launched)
        self.assertEqual(flow_starts, flow_ends)
        api_slices = sum(n for (_, cat), n in by_cat.items() if cat == "api")
        self.assertEqual(api_slices, len(calls_with_ops), "one slice per launch call")
        # Graph launches fan out: some call starts several flows.
        fan_out = collections.Counter(flow_starts.values())
        self.assertGreater(max(fan_out.values()), 1)
        # The idle counter has a value per step.
        counters = collections.Counter(
            decoded.process_of(e["track"])
            for e in decoded.events
            if e["type"] == pb.TrackEvent.TYPE_COUNTER
        )
        self.assertEqual(counters, steps)
        # The Chrome JSON of the same input has the same slices per process and category.
        with open(json_trace) as f:
            events = json.load(f)["traceEvents"]
        pid_name = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
        json_cat = collections.Counter(
            (pid_name[e["pid"]], e["cat"]) for e in events if e["ph"] == "X"
        )
        self.assertEqual(by_cat, json_cat)
        return steps

    def test_bundled_traces(self):
        with tempfile.TemporaryDirectory() as out:
            pb_dir, json_dir = os.path.join(out, "pb"), os.path.join(out, "json")
            gapscope("analyze", *BUNDLED, "-o", pb_dir)
            gapscope("analyze", *BUNDLED, "-o", json_dir, "--perfetto-json")
            self.assertFalse(os.path.exists(os.path.join(pb_dir, "trace.perfetto.json")))
            decoded = Decoded(os.path.join(pb_dir, "trace.perfetto-trace"))
            with open(os.path.join(pb_dir, "report.json")) as f:
                report = json.load(f)
            inputs = {p: load_input(p) for p in BUNDLED}
            steps = self.check(
                decoded,
                inputs,
                len(report["cells"]),
                os.path.join(json_dir, "trace.perfetto.json"),
            )
            self.assertEqual(
                sorted(steps.values()),
                sorted(c["step_count"] for c in report["cells"] if c["step_count"]),
            )

    def test_two_rank_merge(self):
        with tempfile.TemporaryDirectory() as out:
            pb_dir, json_dir = os.path.join(out, "pb"), os.path.join(out, "json")
            gapscope("merge", *MERGE, "-o", pb_dir)
            gapscope("merge", *MERGE, "-o", json_dir, "--perfetto-json")
            decoded = Decoded(os.path.join(pb_dir, "trace.perfetto-trace"))
            with open(os.path.join(pb_dir, "report.json")) as f:
                report = json.load(f)
            cells = sum(len(r["cells"]) for r in report["ranks"])
            inputs = {p: load_input(p) for p in MERGE}
            self.check(decoded, inputs, cells, os.path.join(json_dir, "trace.perfetto.json"))
            ranks = {PROCESS_TRACE.search(p).group(2) for p in decoded.processes()}
            self.assertEqual(ranks, {"0", "1"})
            for p in decoded.processes():
                self.assertRegex(p, r"^rank [01]: ")


if __name__ == "__main__":
    unittest.main()
