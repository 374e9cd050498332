#!/usr/bin/env python3
"""Peers for the attention decode problems on the GPU, at each problem's tuning shapes: PyTorch's
scaled_dot_product_attention (flash and cuDNN backends; efficient for MLA's 576-wide heads) on the same sizes laid
out contiguously (SDPA cannot read pages), and the copy-bandwidth time of the problem's fewest bytes. Timed as the
harness times decode: K/V sets rotated so their total exceeds 2x L2, 20 calls captured in a CUDA graph and replayed,
median (bench/harness/torch_eager.py's time_graph); eager per-call events where capture fails (<backend>_timer says
which). triton.testing.do_bench's figure is kept as <backend>_do_bench: its flush is a 256 MB write whose dirty lines
the timed kernel then writes back (10% of cuDNN's time at B=16 on an H100), which the harness no longer makes its
candidates pay (Engine::evictDirtyL2), and at small sizes its per-call events time the host. Writes JSON:
{problem: {shape label: {...}}, _meta}."""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from torch_eager import time_graph, time_op  # noqa: E402  (the harness's protocol, written once)


def label(dims):
    return ",".join(f"{k}={v}" for k, v in sorted(dims.items()))


def evaluate(expr, dims):
    return eval(expr, {"__builtins__": {}}, {**dims, "sqrt": math.sqrt, "ceil_div": lambda a, b: -(-a // b)})


def copy_bandwidth():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), rep=200)
    return 2 * n / (ms * 1e-3)


def sdpa_times(make_qkv, backends, **kw):
    out = {}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    q, k, v = make_qkv()
    for name, backend in backends:
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, k, v, **kw)
                torch.cuda.synchronize()
                op = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
                try:
                    out[name], out[name + "_timer"] = time_graph(make_qkv, op, l2), "graph"
                except RuntimeError as e:
                    torch.cuda.synchronize()
                    out[name], out[name + "_timer"] = time_op(make_qkv, op, l2), "events: " + str(e)[:120]
                out[name + "_do_bench"] = do_bench(lambda: op(q, k, v), rep=100) * 1e3
        except Exception as e:  # a backend that does not take these shapes says why
            out[name + "_error"] = str(e).split("\n")[0][:160]
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", action="append", choices=("decode_attention", "mla_decode"),
                    help="measure this problem's peers only (repeatable; default both)")
    args = ap.parse_args()
    bw = copy_bandwidth()
    res = {"_meta": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                     "copy_bytes_per_s": bw}}
    bf16 = torch.bfloat16
    for name in args.only or ("decode_attention", "mla_decode"):
        with open(os.path.join(args.problems, name, "problem.json")) as f:
            p = json.load(f)
        rows = {}
        for s in p["tuning_shapes"]:
            dims = {**s["dims"], **p.get("constants", {})}
            row = {"bytes": evaluate(p["bytes"], dims), "flops": evaluate(p["flops"], dims)}
            row["copy_us"] = row["bytes"] / bw * 1e6
            if name == "decode_attention":
                B, HQ, HKV, D, L = dims["B"], dims["HQ"], dims["HKV"], dims["D"], dims["MAXP"] * dims["PS"]

                def make_qkv():
                    k = torch.randn(B, HKV, L, D, dtype=bf16, device="cuda")
                    return torch.randn(B, HQ, 1, D, dtype=bf16, device="cuda"), k, torch.randn_like(k)

                row.update(sdpa_times(make_qkv, [("flash", SDPBackend.FLASH_ATTENTION),
                                                ("cudnn", SDPBackend.CUDNN_ATTENTION),
                                                ("efficient", SDPBackend.EFFICIENT_ATTENTION)], enable_gqa=True))
            else:
                B, SQ, HQ, L = dims["B"], dims["SQ"], dims["HQ"], dims["MAXP"] * dims["PS"]

                def make_qkv():
                    k = torch.randn(B, 1, L, dims["DK"], dtype=bf16, device="cuda")
                    return torch.randn(B, HQ, SQ, dims["DK"], dtype=bf16, device="cuda"), k, k[..., : dims["DV"]]

                row.update(sdpa_times(make_qkv, [("efficient", SDPBackend.EFFICIENT_ATTENTION),
                                                ("math", SDPBackend.MATH)],
                                      enable_gqa=True, scale=1 / math.sqrt(dims["DNOPE"] + dims["DROPE"])))
            rows[label(dims)] = row
            torch.cuda.empty_cache()
        res[name] = rows
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res["_meta"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
