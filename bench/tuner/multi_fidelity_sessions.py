#!/usr/bin/env python3
"""Multi-fidelity measured in real sessions (issue 20): device time until each session first holds a full-protocol
evaluation within the tolerance of the exhaustive sweep's best, each strategy alone vs under multi-fidelity search.

  multi_fidelity_sessions.py --db tuning.jsonl --sessions DIR [--tolerance 0.03] [--out FILE.md]

DIR holds one session per run, named STRATEGY-MODE-SEED (MODE: alone or halving), from multi-fidelity-sessions.sh.
A session's device time is the sum of its evaluations' device_ms in the order they finished, the root's and the
template's included; a session that never reaches the best counts at its whole device time and is reported.
"""
import argparse
import json
import os
import statistics
import sys


def sweep_best(db):
    """Best objective of the full-protocol space with the most records (the sweep)."""
    spaces = {}
    for line in open(db):
        r = json.loads(line)
        if r["key"].get("protocol", ""):
            continue
        k = json.dumps([r["key"]["problem"], r["key"]["source"], r["key"]["shapes"], r["key"]["device"]])
        spaces.setdefault(k, []).append(r["evaluation"])
    if not spaces:
        sys.exit(f"{db}: no full-protocol records")
    records = max(spaces.values(), key=len)
    return max(e.get("objective", 0) for e in records if e.get("verdict") in ("correct", "accepted")), len(records)


def session_reach(path, target):
    evals = []
    cands = os.path.join(path, "candidates")
    for c in sorted(os.listdir(cands)):
        f = os.path.join(cands, c, "evaluation.json")
        if os.path.exists(f):
            evals.append(json.load(open(f)))
    evals.sort(key=lambda e: e.get("finished_ms", 0))
    ms, n = 0.0, 0
    for e in evals:
        ms += e.get("device_ms", 0)
        n += 1
        full = not e.get("fidelity", {}).get("screen_samples", 0)
        correct = e.get("verdict") in ("correct", "accepted", "pending_review") or e.get("objective", 0) > 0
        if full and correct and e.get("objective", 0) >= target:
            return ms / 1e3, n, True
    return ms / 1e3, n, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--out")
    a = ap.parse_args()
    best, configs = sweep_best(a.db)
    target = best / (1 + a.tolerance)
    runs = {}
    for name in sorted(os.listdir(a.sessions)):
        parts = name.rsplit("-", 2)
        if len(parts) != 3 or parts[1] not in ("alone", "halving") or not parts[2].isdigit():
            continue
        runs.setdefault(parts[0], {}).setdefault(parts[1], []).append(session_reach(os.path.join(a.sessions, name), target))
    lines = [
        f"Real sessions (no tuning database): device time until a full-protocol evaluation within "
        f"{a.tolerance:.0%} of the exhaustive sweep's best objective ({best:.3f}, {configs} configurations), "
        f"median over seeds; a session that never got there counts at its whole device time.\n",
        "| strategy | alone: device s | evaluations | reached | multi-fidelity: device s | evaluations | reached | "
        "device time ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, modes in runs.items():
        al, ha = modes.get("alone", []), modes.get("halving", [])
        if not al or not ha:
            continue
        med = lambda xs, i: statistics.median(x[i] for x in xs)
        lines.append(
            f"| {s} | {med(al, 0):.3f} | {med(al, 1):.0f} | {sum(x[2] for x in al)}/{len(al)} | {med(ha, 0):.3f} | "
            f"{med(ha, 1):.0f} | {sum(x[2] for x in ha)}/{len(ha)} | {med(al, 0) / max(med(ha, 0), 1e-9):.2f}x less |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
