#!/usr/bin/env python3
"""Issue 19's indexer target per tuning shape: each kloop eval JSON's median time, its share of the copy bandwidth
(problem.json's bytes over the time, over the measured copy rate) against the 85% target, its gain over the first
evaluation named (the portable template), and the verdict. With --read-at-size (copy_at_size.py --json over the
sizes --sizes prints), also its share of the roofline at its own size: a cold read-only pass over the same bytes
takes read_us, so read_us / us is how close the indexer comes to what reading its bytes costs at that size.

  indexer_table.py --problem DIR --sizes                      NAME=BYTES per tuning shape, for copy_at_size.py
  indexer_table.py --problem DIR [--read-at-size FILE] NAME=EVAL.json ..."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsa_table import evaluate, label, timed_shapes  # noqa: E402  (one reader of problem formulas and eval JSON)

TARGET = 0.85


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", required=True, help="the dsa_indexer problem folder")
    ap.add_argument("--copy-tbps", type=float, default=4.24)
    ap.add_argument("--sizes", action="store_true", help="print each tuning shape's NAME=BYTES and stop")
    ap.add_argument("--read-at-size", help="copy_at_size.py --json output over the --sizes list")
    ap.add_argument("evals", nargs="*", help="NAME=FILE.json; the first is the reference for the gain column")
    args = ap.parse_args()
    with open(os.path.join(args.problem, "problem.json")) as f:
        problem = json.load(f)
    constants = problem.get("constants", {})
    shape_bytes = lambda dims: evaluate(problem["bytes"], {**constants, **dims})
    if args.sizes:
        for sh in problem["tuning_shapes"]:
            free = label({k: v for k, v in sh["dims"].items() if k not in constants})
            print(f"{free}={int(shape_bytes(sh['dims']))}")
        return 0
    if not args.evals:
        ap.error("name at least one NAME=FILE.json")
    read_at = {}
    if args.read_at_size:
        with open(args.read_at_size) as f:
            read_at = {k: v["read_us"] for k, v in json.load(f).items()}
    rows, reference, rc = [], {}, 0
    for i, item in enumerate(args.evals):
        name, path = item.split("=", 1)
        try:
            with open(path) as f:
                ev = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            rows.append(f"| {name} | (no evaluation: {e}) | | | | | | |")
            rc = 1
            continue
        verdict = ev.get("verdict", "?")
        shapes = timed_shapes(ev)
        if not shapes:
            rows.append(f"| {name} | (not timed) | | | | | | {verdict} |")
            rc = 1
        for sh in shapes:
            dims = sh["shape"]["dims"]
            free = label({k: v for k, v in dims.items() if k not in constants})
            us = sh["timing"]["median_us"]
            share = shape_bytes(dims) / (us * 1e-6) / (args.copy_tbps * 1e12)
            if i == 0:
                reference[free] = us
            gain = f"{reference[free] / us:.2f}x" if free in reference else "-"
            mark = "meets" if share >= TARGET else "below"
            read = read_at.get(free)
            at_size = f"{100 * read / us:.0f}%" if read else "-"
            rows.append(f"| {name} | {free} | {us:.1f} | {100 * share:.0f}% | {mark} | {at_size} | {gain} | {verdict} |")
    print(f"dsa_indexer: median us (kloop eval), share of {args.copy_tbps:.2f} TB/s, target {100 * TARGET:.0f}%; "
          "at size: a cold read-only pass over the same bytes (copy_at_size.py) over the indexer's time")
    print("| candidate | shape | us | % copy | target | % of a read at size | vs first | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return rc


if __name__ == "__main__":
    sys.exit(main())
