"""multi_fidelity_sessions.py on fabricated session folders in the recorded format (CPU only)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def write_session(root, name, evals):
    for i, (ms, objective, screen) in enumerate(evals):
        d = os.path.join(root, name, "candidates", "c%04d" % (i + 1))
        os.makedirs(d)
        e = {"device_ms": ms, "objective": objective, "verdict": "correct", "finished_ms": 1000 + i}
        if screen:
            e["fidelity"] = {"screen_samples": 5, "screen_shapes": 1}
        json.dump(e, open(os.path.join(d, "evaluation.json"), "w"))


class MultiFidelitySessions(unittest.TestCase):
    def test_device_time_to_the_sweeps_best(self):
        with tempfile.TemporaryDirectory() as t:
            db = os.path.join(t, "db.jsonl")
            with open(db, "w") as f:
                for i, obj in enumerate([1.0, 2.0, 3.0]):
                    key = {"problem": "p", "source": "s", "shapes": [], "device": "d", "params": {"A": i}}
                    f.write(json.dumps({"key": key, "evaluation": {"objective": obj, "verdict": "correct"}}) + "\n")
                key = {"problem": "p", "source": "s", "shapes": [], "device": "d", "params": {"A": 9},
                       "protocol": "screen:5x1"}
                f.write(json.dumps({"key": key, "evaluation": {"objective": 9.0, "verdict": "correct"}}) + "\n")
            s = os.path.join(t, "sessions")
            # alone: reaches 3.0 at its third full evaluation (300 ms); halving: a screen of 9.0 never counts, the
            # full 2.95 does (within 3% of 3.0) after 100 + 10 + 10 + 100 ms; a second seed never gets there.
            write_session(s, "random-alone-1", [(100, 1.0, False), (100, 2.0, False), (100, 3.0, False)])
            write_session(s, "random-halving-1", [(100, 1.0, False), (10, 9.0, True), (10, 2.0, True),
                                                  (100, 2.95, False)])
            write_session(s, "random-halving-2", [(100, 1.0, False), (10, 9.0, True)])
            write_session(s, "random-alone-2", [(100, 3.0, False)])
            os.makedirs(os.path.join(s, "random-alone-3.err"))  # not a session: ignored
            out = subprocess.run([sys.executable, os.path.join(HERE, "multi_fidelity_sessions.py"), "--db", db,
                                  "--sessions", s], check=True, capture_output=True, text=True).stdout
            row = [l for l in out.splitlines() if l.startswith("| random")][0]
            cells = [c.strip() for c in row.strip("|").split("|")]
            self.assertEqual(cells[1], "0.200")  # median of 0.3 and 0.1 s
            self.assertEqual(cells[3], "2/2")
            self.assertEqual(cells[4], "0.165")  # median of 0.22 and 0.11 s (never reached: all of it)
            self.assertEqual(cells[6], "1/2")
            self.assertIn("(3.000, 3 configurations)", out)


if __name__ == "__main__":
    unittest.main()
