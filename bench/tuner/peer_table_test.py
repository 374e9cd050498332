"""peer_table.py on a recorded-format fixture (testdata/peers-recorded.json, the shape torch_baselines.py writes):
runs on a CPU, no torch needed."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_table  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "peers-recorded.json")


class PeerTableTest(unittest.TestCase):
    def setUp(self):
        with open(FIXTURE) as f:
            self.results = json.load(f)
        self.rows = {line.split(" | ")[1] + " " + line.split(" | ")[2]: line
                     for line in peer_table.table(self.results, ["rmsnorm", "softmax"]).splitlines()
                     if line.startswith("| rmsnorm |")}

    def test_large_shapes_compare_event_medians_against_the_fastest_peer(self):
        row = self.rows["H=4096,T=65536 events"]
        self.assertIn("| 252.00 | 402.10 | 281.30 | 260.70 |", row)
        self.assertIn("liger (liger-kernel 0.8.5)", row)
        self.assertIn(f"{260.7 / 252.0:.3f}x", row)
        self.assertIn("meets (>= 1.03)", row)

    def test_decode_shapes_compare_graph_replays_on_every_side(self):
        row = self.rows["H=8192,T=16 graph"]
        self.assertIn("| 2.84 | 3.10 | 2.60 | 2.06 |", row)
        self.assertIn(f"{2.06 / 2.84:.3f}x", row)
        self.assertIn("below (>= 1.0)", row)

    def test_decode_shapes_measured_with_l2_cold_get_a_second_row_of_their_own(self):
        self.assertFalse(any("L2 cold" in key for key in self.rows))
        e = self.results["rmsnorm"]["H=8192,T=16"]
        e.update({"kernelloop_cold_graph_us": 3.10, "eager_cold_graph_us": 8.0, "compile_cold_graph_us": 3.30,
                  "liger_cold_graph_us": 3.40})
        lines = peer_table.table(self.results, ["rmsnorm"]).splitlines()
        warm = next(i for i, line in enumerate(lines) if "| H=8192,T=16 | graph |" in line)
        cold = lines[warm + 1]
        self.assertIn("| H=8192,T=16 | graph, L2 cold | 3.10 | 8.00 | 3.30 | 3.40 |", cold)
        self.assertIn("torch.compile", cold)
        self.assertIn(f"{3.30 / 3.10:.3f}x | meets (>= 1.0)", cold)
        self.assertIn(f"{2.06 / 2.84:.3f}x", lines[warm])

    def test_each_shape_names_the_kernel_and_parameters_that_ran_there(self):
        e = self.results["rmsnorm"]["H=8192,T=16"]
        e.update({"kernelloop_candidate": "c0030 decode", "kernelloop_params": {"THREADS": 1024, "PRELOAD_W": 1}})
        text = peer_table.table(self.results, ["rmsnorm"])
        self.assertIn("- rmsnorm H=8192,T=16: c0030 decode (PRELOAD_W=1 THREADS=1024)", text)

    def test_a_peer_that_did_not_run_is_named_and_the_others_still_compared(self):
        row = self.rows["H=8192,T=16384 events"]
        self.assertIn("torch.compile (torch 2.9.0, triton 3.5.0)", row)
        self.assertIn(f"{150.0 / 140.5:.3f}x", row)
        self.assertIn("liger: ImportError: no liger_kernel", self.rows["H=8192,T=16384 not timed"])

    def test_decode_rows_come_first_and_an_unmeasured_problem_says_so(self):
        text = peer_table.table(self.results, ["rmsnorm", "softmax"])
        self.assertLess(text.index("T=16 "), text.index("T=65536"))
        self.assertIn("| softmax | (not measured) |", text)
        self.assertIn("liger = liger-kernel 0.8.5", text)


if __name__ == "__main__":
    unittest.main()
