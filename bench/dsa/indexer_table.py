#!/usr/bin/env python3
"""Issue 19's indexer target per tuning shape: each kloop eval JSON's median time, its share of the copy bandwidth
(problem.json's bytes over the time, over the measured copy rate) against the 85% target, its gain over the first
evaluation named (the portable template), and the verdict."""
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
    ap.add_argument("evals", nargs="+", help="NAME=FILE.json; the first is the reference for the gain column")
    args = ap.parse_args()
    with open(os.path.join(args.problem, "problem.json")) as f:
        problem = json.load(f)
    constants = problem.get("constants", {})
    rows, reference, rc = [], {}, 0
    for i, item in enumerate(args.evals):
        name, path = item.split("=", 1)
        try:
            with open(path) as f:
                ev = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            rows.append(f"| {name} | (no evaluation: {e}) | | | | | |")
            rc = 1
            continue
        verdict = ev.get("verdict", "?")
        shapes = timed_shapes(ev)
        if not shapes:
            rows.append(f"| {name} | (not timed) | | | | | {verdict} |")
            rc = 1
        for sh in shapes:
            dims = sh["shape"]["dims"]
            free = label({k: v for k, v in dims.items() if k not in constants})
            us = sh["timing"]["median_us"]
            share = evaluate(problem["bytes"], {**constants, **dims}) / (us * 1e-6) / (args.copy_tbps * 1e12)
            if i == 0:
                reference[free] = us
            gain = f"{reference[free] / us:.2f}x" if free in reference else "-"
            mark = "meets" if share >= TARGET else "below"
            rows.append(f"| {name} | {free} | {us:.1f} | {100 * share:.0f}% | {mark} | {gain} | {verdict} |")
    print(f"dsa_indexer: median us (kloop eval), share of {args.copy_tbps:.2f} TB/s, target {100 * TARGET:.0f}%")
    print("| candidate | shape | us | % copy | target | vs first | verdict |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return rc


if __name__ == "__main__":
    sys.exit(main())
