#!/usr/bin/env python3
"""Loads an exported bundle's PyTorch op and checks it against torch on fresh random inputs, checks the
dispatcher's choice inside and outside the verified-and-faster regions, and captures the op in a CUDA graph.

    check_torch.py BUNDLE_DIR [--out results.json] [--library lib.so]
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
          "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}


def torch_reference(problem, inputs, scalars, dims):
    """The problem's math in torch (fp32), or None when this script does not know the problem."""
    name = problem["name"]
    if name == "rmsnorm":
        x, w = inputs["x"].float(), inputs["w"].float()
        return {"y": (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + scalars["eps"]) * w)}
    if name == "softmax":
        return {"y": torch.softmax(inputs["x"].float(), dim=-1)}
    if name == "silu_and_mul":
        x = inputs["x"].float()
        i = dims["I"]
        return {"y": F.silu(x[:, :i]) * x[:, i:]}
    if name == "gemm_bf16":
        return {"C": inputs["A"].float() @ inputs["B"].float().t()}
    if name == "fused_add_rmsnorm":  # in place: x becomes the norm, residual the rounded sum
        r = (inputs["x"].float() + inputs["residual"].float()).to(torch.bfloat16).float()
        return {"x": r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + scalars["eps"]) * inputs["w"].float(),
                "residual": r}
    return None


def eval_dim_expr(text, dims):
    return int(eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(dims)))


def errors(got, ref):
    got, ref = got.double(), ref.double()
    d = got - ref
    den = ref.pow(2).sum().item()
    rel = math.sqrt(d.pow(2).sum().item() / den) if den > 0 else math.sqrt(d.pow(2).sum().item())
    # The harness's error measure: |c - r| / max(|r|, rms(r), 1).
    floor = max(1.0, math.sqrt(den / max(1, ref.numel())))
    mx = (d.abs() / ref.abs().clamp(min=floor)).max().item() if d.numel() else 0.0
    finite = bool(torch.isfinite(got).all().item() or not torch.isfinite(ref).all().item())
    return rel, mx, finite


def in_region(region, dims):
    return all(lo <= dims[d] <= hi for d, (lo, hi) in region["ranges"].items())


def valid(problem, dims):
    for d in problem["dims"]:
        v = dims[d["name"]]
        if v < d["min"] or v > d["max"] or v % max(1, d.get("multiple_of", 1)):
            return False
    for c in problem.get("dim_constraints", []):
        if not eval(c.replace("&&", " and ").replace("||", " or "), {"__builtins__": {}}, dict(dims)):
            return False
    return True


def random_shape(problem, rng):
    dims = {}
    for d in problem["dims"]:
        m = max(1, d.get("multiple_of", 1))
        v = int(math.exp(rng.uniform(math.log(max(1, d["min"])), math.log(d["max"] + 1))))
        dims[d["name"]] = min(max((v // m) * m, d["min"] + (-d["min"]) % m), d["max"] // m * m)
    return dims


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--out", default=None)
    ap.add_argument("--library", default=None)
    ap.add_argument("--max-elements", type=float, default=2.0e8)
    args = ap.parse_args()

    manifest = json.load(open(os.path.join(args.bundle, "manifest.json")))
    problem = manifest["problem"]
    prefix = "kl_" + problem["name"].lower()
    sys.path.insert(0, os.path.join(args.bundle, "torch"))
    loader = __import__(prefix)
    t0 = time.time()
    ops = loader.load(library=args.library, build_directory=None)
    load_s = time.time() - t0
    print(f"loaded torch.ops.{prefix} in {load_s:.1f} s")

    tensors = problem["tensors"]
    scalars = {s["name"]: s["value"] for s in problem.get("scalars", [])}
    tolerance = problem.get("tolerances", {})
    regions = manifest["dispatch"]["candidate_regions"]
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(rng.getrandbits(63))

    shapes = []
    for r in regions:  # inside each region: its corners
        shapes.append({d: lo for d, (lo, hi) in r["ranges"].items()})
        shapes.append({d: hi for d, (lo, hi) in r["ranges"].items()})
    for _ in range(6):  # fresh shapes from the whole validity range
        shapes.append(random_shape(problem, rng))
    for d in problem["dims"]:  # extremes
        s = {e["name"]: e["min"] + (-e["min"]) % max(1, e.get("multiple_of", 1)) for e in problem["dims"]}
        s[d["name"]] = d["max"] // max(1, d.get("multiple_of", 1)) * max(1, d.get("multiple_of", 1))
        shapes.append(s)

    results = {"problem": problem["name"], "candidate": manifest["candidate"]["id"], "session": manifest["session_id"],
               "forced": manifest["exported"]["forced"], "load_seconds": load_s, "shapes": [], "dispatch_checks": []}
    failures = 0
    for dims in shapes:
        if not valid(problem, dims):
            continue
        numel = sum(math.prod(eval_dim_expr(e, dims) for e in t["shape"]) for t in tensors)
        if numel > args.max_elements:
            continue
        inputs = {}
        for t in tensors:
            if t["role"] == "output":
                continue
            shape = [eval_dim_expr(e, dims) for e in t["shape"]]
            inputs[t["name"]] = (torch.randn(shape, device="cuda", generator=gen) * t.get("scale", 1.0)).to(DTYPES[t["dtype"]])
        # In-place tensors ("inout") are arguments the op mutates: each call gets fresh copies of the pristine values,
        # and its results are the returned outputs followed by the mutated in-place tensors.
        in_place = [t for t in tensors if t["role"] == "inout"]
        out_specs = [t for t in tensors if t["role"] == "output"] + in_place

        def fresh_args():
            args_ = {t["name"]: inputs[t["name"]].clone() if t["role"] == "inout" else inputs[t["name"]]
                     for t in tensors if t["role"] != "output"}
            return args_, [args_[t["name"]] for t in tensors if t["role"] != "output"] + [
                scalars[s["name"]] for s in problem.get("scalars", [])]

        def results_of(ret, args_):
            ret = [] if ret is None else list(ret) if isinstance(ret, (list, tuple)) else [ret]
            return ret + [args_[t["name"]] for t in in_place]

        def invoke(fn):
            args_, call_args = fresh_args()
            return results_of(fn(*call_args), args_)

        order = [d["name"] for d in problem["dims"]]
        sel = ops.select([dims[d] for d in order])
        expected_candidate = any(in_region(r, dims) for r in regions)
        outs = invoke(ops.run)
        ref = torch_reference(problem, inputs, scalars, dims)
        if ref is None:  # unknown problem: the bundle's own fallback is the reference
            ref = {t["name"]: r.float() for t, r in zip(out_specs, invoke(ops.run_fallback))}
        entry = {"dims": dims, "dispatch": "candidate" if sel == 1 else "fallback", "outputs": []}
        ok = True
        for t, o in zip(out_specs, outs):
            tol = tolerance.get(t["dtype"], {"rel_l2": 1e-2, "max_abs": 1e-1})
            rel, mx, finite = errors(o.float(), ref[t["name"]])
            good = finite and rel <= tol["rel_l2"] and mx <= tol["max_abs"]
            ok = ok and good
            entry["outputs"].append({"name": t["name"], "rel_l2": rel, "max_err": mx, "ok": good})
        # The candidate itself wherever the dispatcher uses it, and the op under CUDA-graph capture.
        if sel == 1:
            for t, o in zip(out_specs, invoke(ops.run_candidate)):
                tol = tolerance.get(t["dtype"], {"rel_l2": 1e-2, "max_abs": 1e-1})
                rel, mx, finite = errors(o.float(), ref[t["name"]])
                ok = ok and finite and rel <= tol["rel_l2"] and mx <= tol["max_abs"]
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            gargs, gcall = fresh_args()
            with torch.cuda.stream(s):
                ops.run(*gcall)  # warm-up outside capture
                with torch.cuda.graph(g):
                    gret = ops.run(*gcall)
            torch.cuda.current_stream().wait_stream(s)
            for t in in_place:  # the warm-up updated them: replay from the pristine values
                gargs[t["name"]].copy_(inputs[t["name"]])
            g.replay()
            torch.cuda.synchronize()
            gout = results_of(gret, gargs)
            same = all(torch.equal(a, b) for a, b in zip(gout, outs)) or all(
                errors(a.float(), ref[t["name"]])[0] <= tolerance.get(t["dtype"], {"rel_l2": 1e-2})["rel_l2"]
                for t, a in zip(out_specs, gout))
            entry["cuda_graph"] = "ok" if same else "mismatch"
            ok = ok and same
        # A shape inside a region may still go to the fallback when the candidate's constraints fail there;
        # a shape outside every region must never go to the candidate, and every valid shape has an implementation.
        dispatch_ok = sel in (0, 1) and (expected_candidate or sel == 0)
        entry["dispatch_expected"] = "candidate-or-fallback" if expected_candidate else "fallback"
        entry["ok"] = ok and dispatch_ok
        failures += 0 if entry["ok"] else 1
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        print(f"{'ok  ' if entry['ok'] else 'FAIL'} {label:32s} {entry['dispatch']:9s} " +
              " ".join(f"{o['name']}: rel_l2 {o['rel_l2']:.2e} max_err {o['max_err']:.2e}" for o in entry["outputs"]) +
              (f" graph {entry['cuda_graph']}" if "cuda_graph" in entry else ""))
        results["shapes"].append(entry)

    # Shapes just outside every region (and outside the validity range) must go to the fallback.
    order = [d["name"] for d in problem["dims"]]
    probes = []
    for r in regions:
        for d in order:
            lo, hi = r["ranges"][d]
            above = {e: r["ranges"][e][1] for e in order}
            above[d] = hi + 1
            below = {e: r["ranges"][e][0] for e in order}
            below[d] = lo - 1
            probes += [above, below]
    for d in problem["dims"]:
        s = {e["name"]: e["max"] for e in problem["dims"]}
        s[d["name"]] = d["max"] + 1
        probes.append(s)
    for p in probes:
        if any(v < 0 for v in p.values()) or any(in_region(r, p) for r in regions):
            continue
        sel = ops.select([p[d] for d in order])
        good = sel != 1
        failures += 0 if good else 1
        results["dispatch_checks"].append({"dims": p, "selected": sel, "ok": good})
    n_ok = sum(1 for c in results["dispatch_checks"] if c["ok"])
    print(f"dispatch outside the verified-and-faster regions: {n_ok}/{len(results['dispatch_checks'])} went to the fallback")
    results["failures"] = failures
    results["passed"] = failures == 0 and len(results["shapes"]) > 0
    print("TORCH CHECK PASSED" if results["passed"] else "TORCH CHECK FAILED")
    if args.out:
        json.dump(results, open(args.out, "w"), indent=2)
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
