"""indexer_table.py on a fabricated evaluation and read-at-size file (CPU only)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBLEM = os.path.join(HERE, "..", "..", "kernels", "problems", "dsa_indexer")


def table(*args):
    return subprocess.run([sys.executable, os.path.join(HERE, "indexer_table.py"), "--problem", PROBLEM, *args],
                          check=True, capture_output=True, text=True).stdout


class IndexerTable(unittest.TestCase):
    def test_sizes_name_each_tuning_shape_by_its_free_dims(self):
        sizes = dict(line.rsplit("=", 1) for line in table("--sizes").split())
        problem = json.load(open(os.path.join(PROBLEM, "problem.json")))
        self.assertEqual(len(sizes), len(problem["tuning_shapes"]))
        for name, nbytes in sizes.items():
            self.assertGreater(int(nbytes), 0)
            for k in problem.get("constants", {}):
                self.assertNotIn(k + "=", name)

    def test_the_read_at_size_column_is_the_reads_time_over_the_indexers(self):
        name, nbytes = table("--sizes").split()[0].rsplit("=", 1)
        dims = {k: int(v) for k, v in (d.split("=") for d in name.split(","))}
        us = int(nbytes) / 4.24e12 * 1e6 / 0.80  # 80% of the copy bandwidth
        with tempfile.TemporaryDirectory() as t:
            ev = os.path.join(t, "e.json")
            json.dump({"verdict": "correct", "shapes": [{"shape": {"dims": dims}, "timing": {"median_us": us}}]},
                      open(ev, "w"))
            reads = os.path.join(t, "r.json")
            json.dump({name: {"bytes": int(nbytes), "copy_us": us, "read_us": 0.9 * us}}, open(reads, "w"))
            row = [l for l in table("--read-at-size", reads, "sm90=" + ev).splitlines() if l.startswith("| sm90")][0]
            cells = [c.strip() for c in row.strip("|").split("|")]
            self.assertEqual(cells[3:6], ["80%", "below", "90%"])
            row = [l for l in table("sm90=" + ev).splitlines() if l.startswith("| sm90")][0]
            self.assertEqual([c.strip() for c in row.strip("|").split("|")][5], "-")


if __name__ == "__main__":
    unittest.main()
