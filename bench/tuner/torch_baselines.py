#!/usr/bin/env python3
"""PyTorch eager, torch.compile and copy bandwidth at every tuning shape of the given problems.

Timing follows bench/harness/torch_eager.py (CUDA events, rotated input sets > 2x L2, median; CUDA-graph replay
as a second figure without host launch overhead). Writes
{problem: {shape_label: {"eager_us", "eager_graph_us", "compile_us", "compile_graph_us", "bytes", "copy_us"}},
 "_meta": {..., "copy_bytes_per_s"}}.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from torch_eager import label, time_graph, time_op  # noqa: E402


def ops(name, d, dev):
    if name == "rmsnorm":
        T, H = d["T"], d["H"]
        mk = lambda: (torch.randn(T, H, device=dev, dtype=torch.bfloat16),
                      torch.randn(H, device=dev, dtype=torch.bfloat16))
        return mk, (lambda x, w: F.rms_norm(x, (H,), w, 1e-6)), "F.rms_norm"
    if name == "softmax":
        R, C = d["R"], d["C"]
        mk = lambda: (torch.randn(R, C, device=dev, dtype=torch.float16) * 4,)
        return mk, (lambda x: torch.softmax(x, dim=-1)), "torch.softmax"
    if name == "silu_and_mul":
        T, I = d["T"], d["I"]
        mk = lambda: (torch.randn(T, 2 * I, device=dev, dtype=torch.bfloat16),)
        return mk, (lambda x: F.silu(x[:, :I]) * x[:, I:]), "F.silu(x[:, :I]) * x[:, I:]"
    if name == "gemm_bf16":
        M, N, K = d["M"], d["N"], d["K"]
        mk = lambda: (torch.randn(M, K, device=dev, dtype=torch.bfloat16),
                      torch.randn(N, K, device=dev, dtype=torch.bfloat16))
        return mk, (lambda a, b: a @ b.t()), "a @ b.t() (cuBLAS)"
    raise ValueError(name)


def copy_bandwidth(dev, l2):
    """Device-to-device copy of 1 GiB: bytes read + written per second (the roofline for these kernels)."""
    n = 1 << 29  # bf16 elements = 1 GiB
    src = torch.empty(n, device=dev, dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    us = time_op(lambda: (src,), lambda s: dst.copy_(s), l2, reps=30)
    return 2 * n * 2 / (us * 1e-6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_baselines: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 60 << 20)
    torch.manual_seed(0)
    bw = copy_bandwidth(dev, l2)
    out = {"_meta": {"torch": torch.__version__, "gpu": props.name, "cuda": torch.version.cuda,
                     "copy_bytes_per_s": bw}}
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    for name in args.names:
        with open(os.path.join(args.problems, name, "problem.json")) as f:
            prob = json.load(f)
        res = out.setdefault(name, {})
        for shape in prob["tuning_shapes"]:
            d = shape["dims"]
            mk, op, opname = ops(name, d, dev)
            nbytes = float(eval(prob["bytes"], {"__builtins__": {}}, dict(d)))
            entry = {"op": opname, "bytes": nbytes, "copy_us": nbytes / bw * 1e6,
                     "flops": float(eval(prob["flops"], {"__builtins__": {}}, dict(d))),
                     "eager_us": time_op(mk, op, l2), "eager_graph_us": time_graph(mk, op, l2)}
            try:
                compiled = torch.compile(op, dynamic=False)
                entry["compile_us"] = time_op(mk, compiled, l2)
                entry["compile_graph_us"] = time_graph(mk, compiled, l2)
            except Exception as e:  # torch.compile needs Triton and a C compiler; report, do not fail
                entry["compile_error"] = str(e)[:300]
            res[label(d)] = entry
            print(f"{name} {label(d)} {entry}", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
