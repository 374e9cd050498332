#!/usr/bin/env python3
"""Issue 19's stage problems: per tuning shape the baseline's and the template's median time (kloop eval, timed
interleaved), the best kernel of a kloop run where one ran, and each one's TFLOP/s and share of the copy bandwidth
from the problem's flops/bytes formulas, against the issue's targets (sparse MLA >= 300 TFLOP/s at B 64..128,
indexer >= 85% of its memory roofline)."""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tuner"))
from quality_table import label, load_session  # noqa: E402  (one reader of session directories)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "attention"))
from peaks import BF16_TFLOPS, tflops_text  # noqa: E402

FUNCTIONS = {"min": min, "max": max, "sqrt": math.sqrt, "ceil_div": lambda a, b: -(-a // b)}
TARGETS = {"sparse_mla_decode": "300 TFLOP/s (B 64..128)", "dsa_indexer": "85% of the copy bandwidth"}


def evaluate(expr, dims):
    # problem.json formulas are this repository's own: + - * / and the functions above over dims.
    return eval(expr, {"__builtins__": {}}, {**FUNCTIONS, **dims})


def rates(problem, dims, us, copy_bps):
    if not us:
        return "-", "-"
    bw = evaluate(problem["bytes"], dims) / (us * 1e-6)
    return tflops_text(evaluate(problem["flops"], dims), us), f"{100 * bw / copy_bps:.0f}%"


def timed_shapes(evaluation):
    return [s for s in evaluation.get("shapes", []) if not s.get("held_out") and s.get("timing")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--names", nargs="+", required=True)
    ap.add_argument("--copy-tbps", type=float, default=float(os.environ.get("KL_COPY_TBPS", "4.17")),
                    help="the device's copy bandwidth (the harness measures 4.17 TB/s on the H200)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    copy_bps = args.copy_tbps * 1e12
    lines = ["# Issue 19 stage problems on the GPU", "",
             f"Times in microseconds (medians, kloop eval: the template at its defaults timed interleaved with the "
             f"baseline). TFLOP/s and bandwidth share from problem.json's flops and bytes over a copy bandwidth of "
             f"{args.copy_tbps:.2f} TB/s; the TFLOP/s share is of the bf16 peak ({BF16_TFLOPS:.0f} TFLOP/s, cuBLAS). "
             "On sm_90a sparse_mla_decode's template is its wgmma one (template_sm90.cu), on sm_100 the mma.sync one "
             "(template_mma_sync.cu).", "",
             "| problem | shape | baseline | template | template TFLOP/s (% peak) | template % copy | tuned best "
             "| best TFLOP/s (% peak) | best % copy | target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    rc = 0
    for name in args.names:
        with open(os.path.join(args.problems, name, "problem.json")) as f:
            problem = json.load(f)
        constants = problem.get("constants", {})
        path = os.path.join(args.results, f"{name}-template.json")
        try:
            with open(path) as f:
                template = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            lines.append(f"| {name} | (no evaluation: {e}) | | | | | | | | |")
            rc = 1
            continue
        best = {}
        session = os.path.join(args.results, "sessions", name)
        if os.path.exists(os.path.join(session, "journal.jsonl")):
            s = load_session(session)
            if s["best"] is not None:
                best = {label(sh["shape"]["dims"]): sh["timing"]["median_us"]
                        for sh in timed_shapes(s["evals"][s["best"]])}
        # pending-review: a throttled measurement (the machine's, not the kernel's); the times still stand.
        if template.get("verdict") not in ("correct", "accepted", "pending-review"):
            lines.append(f"| {name} | verdict {template.get('verdict')}: see {name}-template.json | | | | | | | | |")
            rc = 1
        for sh in timed_shapes(template):
            dims = {**constants, **sh["shape"]["dims"]}
            lab = label(sh["shape"]["dims"])
            free = label({k: v for k, v in sh["shape"]["dims"].items() if k not in constants})
            t = sh["timing"]["median_us"]
            base = (sh.get("baseline_timing") or {}).get("median_us")
            tf, tb = rates(problem, dims, t, copy_bps)
            b = best.get(lab)
            bf, bb = rates(problem, dims, b, copy_bps)
            lines.append(f"| {name} | {free} | {base if base is None else f'{base:.1f}'} | {t:.1f} | {tf} | {tb} | "
                         f"{'-' if b is None else f'{b:.1f}'} | {bf} | {bb} | {TARGETS.get(name, '')} |")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
