#!/usr/bin/env python3
"""Loads a pipeline bundle's PyTorch op (torch.ops.kl_<pipeline>) and checks it on fresh random inputs at the
bundle's self-test shapes against the torch reference: the stages' torch references (check_torch.py) chained along
the manifest's wiring, each intermediate rounded to its dtype as the pipeline stores it; also against the
all-fallback pipeline (run_fallback), and replayed from a CUDA graph (torch.cuda.graph). Each output within the
manifest's end-to-end tolerance.

    check_pipeline_torch.py BUNDLE_DIR --library build/libkl_<pipeline>_torch.so [--out results.json]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_torch import DTYPES, errors, eval_dim_expr, torch_reference  # noqa: E402


def parse_label(label):
    return {k: int(v) for k, v in (kv.split("=") for kv in label.split(","))}


def chained_reference(man, inputs, dims):
    """Every stage's torch reference in order on the wired tensors; None when a stage's problem has none."""
    env = dict(dims, **man["constants"])
    tensors = dict(inputs)  # "x" for a pipeline input, "norm.y" for a stage output
    dtypes = {t["name"]: t["dtype"] for t in man["intermediates"]}
    for t in man["tensors"]:
        if t["role"] == "output":
            dtypes[t["from"]] = t["dtype"]
    for st in man["stages"]:
        sdims = {d: eval_dim_expr(e, env) for d, e in st["dims"].items()}
        scalars = {k: (v if isinstance(v, (int, float)) else float(eval_dim_expr(v, sdims)))
                   for k, v in st["scalars"].items()}
        out = torch_reference({"name": st["problem"]}, {k: tensors[src] for k, src in st["inputs"].items()},
                              scalars, sdims)
        if out is None:
            return None, st["problem"]
        for name, value in out.items():
            key = st["name"] + "." + name
            tensors[key] = value.to(DTYPES[dtypes[key]]) if key in dtypes else value
    return {t["name"]: tensors[t["from"]].float() for t in man["tensors"] if t["role"] == "output"}, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--library", required=True)
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    man = json.load(open(os.path.join(args.bundle, "manifest.json")))
    torch.ops.load_library(args.library)
    ops = getattr(torch.ops, man["prefix"])
    torch.manual_seed(args.seed)
    print(f"loaded torch.ops.{man['prefix']} (pipeline {man['pipeline']}), seed {args.seed}")
    results, failures = [], 0
    for shape in man["self_test_shapes"]:
        label = shape["label"]
        dims = parse_label(label)
        ins = [t for t in man["tensors"] if t["role"] != "output"]
        if any(DTYPES[t["dtype"]] in (torch.int32, torch.int64, torch.uint8) for t in ins):
            print(f"skip {label}: integer inputs need their problem's value rules (the C self-test draws them)")
            continue
        inputs = {t["name"]: (torch.randn(shape["extents"][t["name"]], device="cuda") * t["scale"])
                  .to(DTYPES[t["dtype"]]) for t in ins}
        dim_args = [dims[d["name"]] for d in man["dims"]]
        call = [inputs[t["name"]] for t in ins] + dim_args
        got = ops.run(*call)
        fb = ops.run_fallback(*call)
        outs = [t["name"] for t in man["tensors"] if t["role"] == "output"]
        if len(outs) == 1:
            got, fb = [got], [fb]
        ref, missing = chained_reference(man, inputs, dims)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            graphed = ops.run(*call)
        g.replay()
        torch.cuda.synchronize()
        if len(outs) == 1:
            graphed = [graphed]
        for i, name in enumerate(outs):
            tol = man["end_to_end_tolerance"][name]
            checks = [("torch", ref[name] if ref else None), ("all-fallback", fb[i].float())]
            for what, r in checks:
                if r is None:
                    print(f"note {label} {name}: no torch reference for problem {missing}")
                    continue
                for kind, value in (("op", got[i]), ("graph", graphed[i])):
                    rel, mx, finite = errors(value.float(), r)
                    ok = finite and rel <= tol["rel_l2"] and mx <= tol["max_abs"]
                    failures += 0 if ok else 1
                    print(f"{'ok  ' if ok else 'FAIL'} {label} {name} {kind} vs {what}: rel_l2 {rel:.3e} max_err "
                          f"{mx:.3e} (tolerance {tol['rel_l2']:.3g} / {tol['max_abs']:.3g})")
                    results.append({"shape": label, "output": name, "run": kind, "against": what, "rel_l2": rel,
                                    "max_err": mx, "ok": ok})
    print(f"TORCH PIPELINE CHECK {'PASSED' if failures == 0 and results else 'FAILED'}")
    if args.out:
        json.dump({"pipeline": man["pipeline"], "checks": results, "failures": failures}, open(args.out, "w"),
                  indent=2)
    return 0 if failures == 0 and results else 1


if __name__ == "__main__":
    sys.exit(main())
