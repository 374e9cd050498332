#!/usr/bin/env python3
"""PyTorch eager, torch.compile, Liger-Kernel (--liger), KernelLoop's exported op (--bundles DIR: DIR/<problem> is
a `kloop export` bundle) and copy bandwidth at every tuning shape of the given problems, all in one run with one
timer.

Timing follows bench/harness/torch_eager.py (CUDA events, rotated input sets > 2x L2, median; CUDA-graph replay
as a second figure without host launch overhead, its small inputs staying in L2; at decode shapes a third, graph
replay over sets > 2x L2, L2 cold as the harness times decode). Writes
{problem: {shape_label: {"eager_us", "eager_graph_us", "eager_cold_graph_us" (decode), "compile_...", "liger_...",
 "kernelloop_...", "bytes", "copy_us"}},
 "_meta": {..., "copy_bytes_per_s", "versions": {peer: version}}}. bench/tuner/peer_table.py makes the table.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "regimes"))
from check_regimes import condition_holds  # noqa: E402
from torch_eager import label, time_graph, time_op  # noqa: E402
from peer_table import is_decode  # noqa: E402


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


def liger_op(name, d, dev):
    """Liger-Kernel's forward for the problem (its own input layout where it takes one), or None."""
    if name == "rmsnorm":
        from liger_kernel.ops.rms_norm import rms_norm_forward
        T, H = d["T"], d["H"]
        mk = lambda: (torch.randn(T, H, device=dev, dtype=torch.bfloat16),
                      torch.randn(H, device=dev, dtype=torch.bfloat16))
        return mk, (lambda x, w: rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)[0])
    if name == "softmax":
        from liger_kernel.ops.softmax import _softmax_forward
        R, C = d["R"], d["C"]
        return (lambda: (torch.randn(R, C, device=dev, dtype=torch.float16) * 4,)), (lambda x: _softmax_forward(x))
    if name == "silu_and_mul":
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        T, I = d["T"], d["I"]  # Liger takes gate and up as two tensors: the same bytes as one [T, 2I]
        mk = lambda: (torch.randn(T, I, device=dev, dtype=torch.bfloat16),
                      torch.randn(T, I, device=dev, dtype=torch.bfloat16))
        return mk, LigerSiLUMulFunction.apply
    return None


LOADED = {}


def regime_of(bundle, manifest, d):
    """A regime dispatcher's bundle (kloop export of a session with regimes): (directory, manifest, "_<regime>") of
    the regime whose condition holds at dims d, as the bundle's C dispatcher picks it (the first that holds); a
    one-candidate bundle is its own regime. Raises where the shape falls to the fallback."""
    if manifest.get("kind") != "regime-dispatcher":
        return bundle, manifest, ""
    for r in manifest["regimes"]:
        if condition_holds(r["condition"], d):
            if not r.get("candidate"):
                raise RuntimeError(f"regime {r['name']} has no winner: the bundle's fallback runs this shape")
            sub = os.path.join(bundle, r["bundle"])
            with open(os.path.join(sub, "manifest.json")) as f:
                return sub, json.load(f), "_" + r["name"]
    raise RuntimeError("no regime of the bundle covers this shape: its fallback runs it")


def kernelloop_op(bundle, prob, d, dev, suffix=""):
    """The exported bundle's dispatcher (torch.ops.kl_<problem>[_<regime>].run) on the problem's inputs."""
    prefix = "kl_" + prob["name"].lower() + suffix
    if bundle not in LOADED:
        sys.path.insert(0, os.path.join(bundle, "torch"))
        LOADED[bundle] = __import__(prefix).load(library=None, build_directory=None)
    ops = LOADED[bundle]
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    inputs = [t for t in prob["tensors"] if t["role"] == "input"]
    scalars = [s["value"] for s in prob.get("scalars", [])]

    def mk():
        return tuple((torch.randn([int(eval(e, {"__builtins__": {}}, dict(d))) for e in t["shape"]], device=dev)
                      * t.get("scale", 1.0)).to(dtypes[t["dtype"]]) for t in inputs)
    return mk, (lambda *xs: ops.run(*xs, *scalars))


def timed(entry, key, mk, op, l2, decode=False):
    """Events over rotated inputs and graph replays with L2 warm; at decode shapes also graph replays with L2 cold."""
    try:
        entry[key + "_us"] = time_op(mk, op, l2)
        entry[key + "_graph_us"] = time_graph(mk, op, l2)
        if decode:
            entry[key + "_cold_graph_us"] = time_graph(mk, op, l2, cold=True)
    except Exception as e:  # a peer that cannot run here is reported, not fatal
        entry[key + "_error"] = str(e)[:300]


def version(dist):
    try:
        from importlib.metadata import version as v
        return v(dist)
    except Exception:
        return None


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
    ap.add_argument("--liger", action="store_true", help="time Liger-Kernel too (pinned in requirements-peers.txt)")
    ap.add_argument("--bundles", help="DIR/<problem>: kloop export bundles to time with the same timer")
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
    versions = {"eager": f"torch {torch.__version__}", "torch.compile": f"torch {torch.__version__}"
                + (f", triton {version('triton')}" if version("triton") else "")}
    if args.liger:
        versions["liger"] = f"liger-kernel {version('liger-kernel')}"
    out = {"_meta": {"torch": torch.__version__, "gpu": props.name, "cuda": torch.version.cuda,
                     "copy_bytes_per_s": bw, "versions": versions}}
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    for name in args.names:
        with open(os.path.join(args.problems, name, "problem.json")) as f:
            prob = json.load(f)
        res = out.setdefault(name, {})
        for shape in prob["tuning_shapes"]:
            d = shape["dims"]
            mk, op, opname = ops(name, d, dev)
            nbytes = float(eval(prob["bytes"], {"__builtins__": {}}, dict(d)))
            decode = is_decode(label(d))
            entry = {"op": opname, "bytes": nbytes, "copy_us": nbytes / bw * 1e6,
                     "flops": float(eval(prob["flops"], {"__builtins__": {}}, dict(d)))}
            timed(entry, "eager", mk, op, l2, decode)
            try:
                compiled = torch.compile(op, dynamic=False)
            except Exception as e:  # torch.compile needs Triton and a C compiler; report, do not fail
                entry["compile_error"] = str(e)[:300]
            else:
                timed(entry, "compile", mk, compiled, l2, decode)
            if args.liger:
                try:
                    lop = liger_op(name, d, dev)
                    if lop:
                        timed(entry, "liger", *lop, l2, decode)
                except Exception as e:
                    entry["liger_error"] = str(e)[:300]
            bundle = os.path.join(args.bundles, name) if args.bundles else None
            if bundle and os.path.exists(os.path.join(bundle, "manifest.json")):
                try:
                    with open(os.path.join(bundle, "manifest.json")) as f:
                        manifest = json.load(f)
                    chosen, manifest, suffix = regime_of(bundle, manifest, d)
                    entry["kernelloop_candidate"] = f"{manifest['candidate']['id']}{suffix.replace('_', ' ')}"
                    entry["kernelloop_params"] = manifest["candidate"].get("params", {})
                    versions.setdefault("kernelloop:" + name, f"session {manifest['session_id']}")
                    timed(entry, "kernelloop", *kernelloop_op(chosen, prob, d, dev, suffix), l2, decode)
                except Exception as e:
                    entry["kernelloop_error"] = str(e)[:300]
            res[label(d)] = entry
            print(f"{name} {label(d)} {entry}", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
