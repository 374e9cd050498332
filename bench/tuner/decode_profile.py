#!/usr/bin/env python3
"""One decode shape's op from one side (PyTorch eager, torch.compile, Liger-Kernel, or KernelLoop's exported bundle),
launched a few times, for ncu to profile one launch of it with L2 flushed: bench/tuner/decode-profile.sh runs it.

    decode_profile.py --problems kernels/problems --bundles DIR --dims T=16,H=8192 rmsnorm kernelloop
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baselines as tb  # noqa: E402


def side_op(side, name, prob, d, dev, bundles):
    if side == "eager":
        mk, op, _ = tb.ops(name, d, dev)
        return mk, op
    if side == "compile":
        mk, op, _ = tb.ops(name, d, dev)
        return mk, torch.compile(op, dynamic=False)
    if side == "liger":
        return tb.liger_op(name, d, dev)
    bundle = os.path.join(bundles, name)
    with open(os.path.join(bundle, "manifest.json")) as f:
        chosen, _, suffix = tb.regime_of(bundle, json.load(f), d)
    return tb.kernelloop_op(chosen, prob, d, dev, suffix)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", required=True)
    ap.add_argument("--bundles", help="DIR/<problem>: the kloop export bundle (side kernelloop)")
    ap.add_argument("--dims", required=True, help="the shape, as T=16,H=8192")
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("name")
    ap.add_argument("side", choices=["eager", "compile", "liger", "kernelloop"])
    args = ap.parse_args()
    with open(os.path.join(args.problems, args.name, "problem.json")) as f:
        prob = json.load(f)
    d = {k: int(v) for k, v in (part.split("=") for part in args.dims.split(","))}
    dev = torch.device("cuda")
    mk, op = side_op(args.side, args.name, prob, d, dev, args.bundles)
    inputs = mk()
    torch.cuda.synchronize()
    for _ in range(args.launches):
        op(*inputs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
