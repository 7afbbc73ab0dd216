"""The engine's timeline files are valid Chrome trace JSON with the phases.

Runs timeline_demo (three loopback ranks, fused allreduces in two buckets, a
broadcast, an allgather) and parses every rank's file with the json module.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    "timeline_demo")


class TimelineTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        subprocess.run([DEMO, cls.dir], check=True, timeout=120)
        cls.traces = {}
        for rank in range(3):
            path = os.path.join(cls.dir, "timeline_%d.json" % rank)
            with open(path) as f:
                cls.traces[rank] = json.load(f)  # Must be complete JSON.

    def test_every_rank_wrote_a_trace_array(self):
        for rank, events in self.traces.items():
            self.assertIsInstance(events, list)
            names = [e["args"]["name"] for e in events
                     if e.get("ph") == "M" and e["name"] == "process_name"]
            self.assertEqual(names, ["terse rank %d" % rank])

    def test_bucket_phases(self):
        events = self.traces[0]
        tracks = {e["tid"]: e["args"]["name"] for e in events
                  if e.get("ph") == "M" and e["name"] == "thread_name"}
        buckets = {tid for tid, name in tracks.items()
                   if name.startswith("bucket ")}
        self.assertGreaterEqual(len(buckets), 2)  # 7200 bytes > 4000.
        phases = {}
        for e in events:
            if e.get("ph") != "X":
                continue
            self.assertEqual(e["pid"], 0)
            self.assertGreaterEqual(e["ts"], 0)
            self.assertGreaterEqual(e["dur"], 0)
            if e["tid"] in buckets:
                phases.setdefault(e["tid"], []).append(e["name"])
        for tid in buckets:
            seen = phases[tid]
            for phase in ("NEGOTIATE", "QUEUE", "FUSE", "COMMUNICATE",
                          "UNFUSE"):
                # Three steps: each phase once per run of the bucket.
                self.assertEqual(seen.count(phase), 3, (tracks[tid], seen))
        negotiate = [e for e in events
                     if e.get("ph") == "X" and e["name"] == "NEGOTIATE"
                     and e["tid"] in buckets]
        args = negotiate[0]["args"]
        self.assertIn("bucket", args)
        self.assertEqual(args["dtype"], "f32")
        self.assertEqual(args["op"], "average")
        self.assertIn('layer', args["names"])
        self.assertIn('"w"', args["names"])  # Escaped and parsed back.

    def test_unfused_ops_have_their_own_tracks(self):
        names = {e["args"]["name"] for e in self.traces[0]
                 if e.get("ph") == "M" and e["name"] == "thread_name"}
        self.assertIn("broadcast bcast", names)
        self.assertIn("allgather gather", names)

    def test_phases_are_ordered_within_a_bucket_run(self):
        events = [e for e in self.traces[1] if e.get("ph") == "X"]
        by_tid = {}
        for e in events:
            by_tid.setdefault(e["tid"], []).append(e)
        for run in by_tid.values():
            fuse = [e for e in run if e["name"] == "FUSE"]
            comm = [e for e in run if e["name"] == "COMMUNICATE"]
            for f, c in zip(sorted(fuse, key=lambda e: e["ts"]),
                            sorted(comm, key=lambda e: e["ts"])):
                self.assertLessEqual(f["ts"] + f["dur"], c["ts"] + 1e-3)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
