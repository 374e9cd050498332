"""Writes a copy of gemm_bf16 whose tuning shapes are issue 15's targets: 4096^3, 8192^3 and the decode shapes
M = 16 and 128 with N, K in {4096, 8192, 14336}; dims, regimes and verification shapes stay the problem's own.
Usage: issue_problem.py ROOT DEST (ROOT the repository, DEST the folder to create)."""
import json
import os
import shutil
import sys

root, dest = sys.argv[1], sys.argv[2]
shutil.rmtree(dest, ignore_errors=True)
shutil.copytree(os.path.join(root, "kernels", "problems", "gemm_bf16"), dest)
path = os.path.join(dest, "problem.json")
p = json.load(open(path))
shapes = [{"dims": {"M": 4096, "N": 4096, "K": 4096}, "weight": 1}, {"dims": {"M": 8192, "N": 8192, "K": 8192}, "weight": 1}]
for m in (16, 128):
    for n in (4096, 8192, 14336):
        for k in (4096, 8192, 14336):
            shapes.append({"dims": {"M": m, "N": n, "K": k}, "weight": 1})
p["tuning_shapes"] = shapes
json.dump(p, open(path, "w"), indent=1)
