#!/usr/bin/env python3
"""Checks a regime dispatcher export on the GPU against the single-configuration export of the same problem:
the dispatcher (its generated C, compiled here) picks each shape's regime and that regime's kernel, every pick
matches torch, and each regime winner beats the single export at its regime's extreme tuning shape.

    check_regimes.py REGIMES_DIR SINGLE_DIR [--out results.json] [--reps 50]
"""
import argparse
import ctypes
import importlib
import json
import os
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))
from check_torch import DTYPES, errors, eval_dim_expr, torch_reference, valid  # noqa: E402


def load_op(bundle, prefix):
    sys.path.insert(0, os.path.join(bundle, "torch"))
    return importlib.import_module(prefix).load(library=None, build_directory=None)


def condition_holds(text, dims):
    return bool(eval(text.replace("&&", " and ").replace("||", " or "), {"__builtins__": {}}, dict(dims)))


def graph_us(fn, reps):
    """Median microseconds of one call under CUDA-graph replay (20 calls per graph), L2 not flushed: both sides alike."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                fn()
    torch.cuda.current_stream().wait_stream(s)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / 20)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("regimes")
    ap.add_argument("single")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()

    manifest = json.load(open(os.path.join(args.regimes, "manifest.json")))
    single_manifest = json.load(open(os.path.join(args.single, "manifest.json")))
    problem = single_manifest["problem"]
    prefix = "kl_" + problem["name"].lower()
    single = load_op(args.single, prefix)
    regimes = manifest["regimes"]
    ops = {r["name"]: load_op(os.path.join(args.regimes, r["bundle"]), prefix + "_" + r["name"])
           for r in regimes if r["candidate"]}

    # The generated C dispatcher, built as a shared object from its plain-C sources.
    sources = [os.path.join(args.regimes, "src", prefix + "_regimes.c")]
    includes = ["-I" + os.path.join(args.regimes, "include"), "-I" + os.path.join(args.regimes, "src")]
    for r in regimes:
        if r["candidate"]:
            sources.append(os.path.join(args.regimes, r["name"], "src", f"{prefix}_{r['name']}_dispatch.c"))
            includes.append("-I" + os.path.join(args.regimes, r["name"], "include"))
    lib_path = os.path.join(args.regimes, "libregimes_select.so")
    subprocess.check_call(["cc", "-std=c99", "-O2", "-shared", "-fPIC", *includes, *sources, "-lm", "-o", lib_path])
    lib = ctypes.CDLL(lib_path)
    order = [d["name"] for d in problem["dims"]]
    Dims = type("Dims", (ctypes.Structure,), {"_fields_": [(d, ctypes.c_longlong) for d in order]})
    regime_of = getattr(lib, prefix + "_regimes_of")
    select = getattr(lib, prefix + "_regimes_select")
    for f in (regime_of, select):
        f.argtypes = [ctypes.POINTER(Dims)]
        f.restype = ctypes.c_int

    tensors = problem["tensors"]
    scalars = {s["name"]: s["value"] for s in problem.get("scalars", [])}
    tolerance = problem.get("tolerances", {})
    gen = torch.Generator(device="cuda")
    gen.manual_seed(20)

    def inputs_for(dims):
        out = {}
        for t in tensors:
            if t["role"] == "input":
                shape = [eval_dim_expr(e, dims) for e in t["shape"]]
                out[t["name"]] = (torch.randn(shape, device="cuda", generator=gen) * t.get("scale", 1.0)).to(
                    DTYPES[t["dtype"]])
        return out

    shapes = [s["dims"] for s in problem["tuning_shapes"]] + [s["dims"] for s in problem.get("verify_shapes", [])]
    results = {"problem": problem["name"], "shapes": [], "extremes": []}
    failures = 0
    for dims in shapes:
        dims = {d: dims[d] for d in order}
        if not valid(problem, dims):
            continue
        c = Dims(*[dims[d] for d in order])
        want = [i for i, r in enumerate(regimes) if condition_holds(r["condition"], dims)]
        got_regime = regime_of(ctypes.byref(c))
        pick = select(ctypes.byref(c))
        inputs = inputs_for(dims)
        call = [inputs[t["name"]] for t in tensors if t["role"] == "input"] + [
            scalars[s["name"]] for s in problem.get("scalars", [])]
        if pick >= 0:
            op = ops[regimes[pick]["name"]]
            picked_candidate = op.select([dims[d] for d in order]) == 1
            out = op.run(*call)
        else:
            picked_candidate = True  # the fallback: nothing to pick
            out = single.run_fallback(*call)
        outs = out if isinstance(out, (list, tuple)) else [out]
        ref = torch_reference(problem, inputs, scalars, dims)
        ok = want == [got_regime] and (pick in (-1, got_regime)) and picked_candidate
        errs = []
        for t, o in zip([t for t in tensors if t["role"] == "output"], outs):
            tol = tolerance.get(t["dtype"], {"rel_l2": 1e-2, "max_abs": 1e-1})
            rel, mx, finite = errors(o.float(), ref[t["name"]]) if ref else (0.0, 0.0, True)
            ok = ok and finite and rel <= tol["rel_l2"] and mx <= tol["max_abs"]
            errs.append(f"{t['name']} rel_l2 {rel:.2e} max_err {mx:.2e}")
        failures += 0 if ok else 1
        kernel = regimes[pick]["name"] + " winner " + regimes[pick]["candidate"] if pick >= 0 else "fallback"
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        print(f"{'ok  ' if ok else 'FAIL'} {label:28s} regime {regimes[got_regime]['name'] if got_regime >= 0 else '-'}"
              f" -> {kernel}; {'; '.join(errs)}")
        results["shapes"].append({"dims": dims, "regime": got_regime, "pick": pick, "ok": ok})

    # Each regime winner against the single export at its regime's extreme tuning shape (fewest / most of the first
    # dim), both measured here in one process.
    first = order[0]
    for r in regimes:
        if not r["candidate"]:
            continue
        inside = [s["dims"] for s in problem["tuning_shapes"] if condition_holds(r["condition"], s["dims"])]
        if not inside:
            continue
        pick = min if r is regimes[0] else max
        dims = pick(inside, key=lambda d: d[first])
        dims = {d: dims[d] for d in order}
        inputs = inputs_for(dims)
        call = [inputs[t["name"]] for t in tensors if t["role"] == "input"] + [
            scalars[s["name"]] for s in problem.get("scalars", [])]
        us_regime = graph_us(lambda: ops[r["name"]].run(*call), args.reps)
        us_single = graph_us(lambda: single.run(*call), args.reps)
        ratio = us_single / us_regime
        ok = ratio > 1.0
        failures += 0 if ok else 1
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        print(f"{'ok  ' if ok else 'FAIL'} extreme {label:24s} {r['name']} winner {r['candidate']} {us_regime:.2f} us, "
              f"single export {us_single:.2f} us: {ratio:.3f}x")
        results["extremes"].append({"regime": r["name"], "dims": dims, "regime_us": us_regime,
                                    "single_us": us_single, "ratio": ratio, "ok": ok})
    results["failures"] = failures
    if args.out:
        json.dump(results, open(args.out, "w"), indent=2)
    print(f"REGIMES CHECK: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
