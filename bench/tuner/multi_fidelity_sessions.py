#!/usr/bin/env python3
"""Multi-fidelity measured in real sessions (issue 20): device time until each session first holds a full-protocol
evaluation within the tolerance of the exhaustive sweep's best, each strategy alone vs under multi-fidelity search.

  multi_fidelity_sessions.py --db tuning.jsonl --sessions DIR [--tolerance 0.03] [--out FILE.md] [--retarget EVAL.json ...]
  multi_fidelity_sessions.py --db tuning.jsonl --write-problem DEST --problems kernels/problems --shapes 'T=16,H=4096;...'
                             [--top 3]

The sweep's best may come from another card of the same model. --write-problem copies the sweep's problem to DEST with
the sessions' shapes as its tuning shapes and prints the sweep's TOP best configurations (K=V,... a line), for
`kloop eval DEST --params ...` on the sessions' card; --retarget takes those evaluations (kloop eval --json) and judges
against the best of them that verified, and the table names both targets.

DIR holds one session per run, named STRATEGY-MODE-SEED (MODE: alone or halving), from multi-fidelity-sessions.sh.
A session's device time is the sum of its evaluations' device_ms in the order they finished, the root's and the
template's included; a session that never reaches the best counts at its whole device time and is reported. A second
table compares whole sessions: all their device time, and the best full-protocol objective they ended with.
"""
import argparse
import json
import os
import shutil
import statistics
import sys


def sweep_records(db):
    """The full-protocol records of the space with the most records (the sweep), each with its key."""
    spaces = {}
    for line in open(db):
        r = json.loads(line)
        if r["key"].get("protocol", ""):
            continue
        k = json.dumps([r["key"]["problem"], r["key"]["source"], r["key"]["shapes"], r["key"]["device"]])
        spaces.setdefault(k, []).append(r)
    if not spaces:
        sys.exit(f"{db}: no full-protocol records")
    return max(spaces.values(), key=len)


def verified(e):
    return e.get("verdict") in ("correct", "accepted")


def sweep_best(db):
    """Best objective of the sweep, and its number of configurations."""
    records = sweep_records(db)
    return max(r["evaluation"].get("objective", 0) for r in records if verified(r["evaluation"])), len(records)


def write_problem(db, problems, shapes, dest, top):
    records = sweep_records(db)
    name = records[0]["key"]["problem"]
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(os.path.join(problems, name), dest)
    path = os.path.join(dest, "problem.json")
    p = json.load(open(path))
    p["tuning_shapes"] = [
        {"dims": {k: int(v) for k, v in (d.split("=") for d in shape.split(","))}, "weight": 1}
        for shape in shapes.split(";") if shape]
    json.dump(p, open(path, "w"), indent=1)
    best = sorted((r for r in records if verified(r["evaluation"])), key=lambda r: -r["evaluation"]["objective"])
    for r in best[:top]:
        print(",".join(f"{k}={v}" for k, v in sorted(r["key"]["params"].items())))


def retarget(files):
    """The best objective among the evaluations that verified; None when none did."""
    objs = []
    for f in files:
        try:
            e = json.load(open(f))
        except (OSError, ValueError):
            continue
        if verified(e) and e.get("objective", 0) > 0:
            objs.append(e["objective"])
    return max(objs) if objs else None


def session_evals(path):
    """A session's evaluations in the order they finished."""
    evals = []
    cands = os.path.join(path, "candidates")
    for c in sorted(os.listdir(cands)):
        f = os.path.join(cands, c, "evaluation.json")
        if os.path.exists(f):
            evals.append(json.load(open(f)))
    return sorted(evals, key=lambda e: e.get("finished_ms", 0))


def full_objective(e):
    """The objective of a full-protocol evaluation that verified; 0 for a screen or a failure."""
    full = not e.get("fidelity", {}).get("screen_samples", 0)
    correct = e.get("verdict") in ("correct", "accepted", "pending_review") or e.get("objective", 0) > 0
    return e.get("objective", 0) if full and correct else 0


def session_reach(evals, target):
    """Device seconds and evaluations until the first full evaluation at or above target, and whether it came."""
    ms = 0.0
    for n, e in enumerate(evals, 1):
        ms += e.get("device_ms", 0)
        if full_objective(e) >= target:
            return ms / 1e3, n, True
    return ms / 1e3, len(evals), False


def session_whole(evals):
    """The whole session: its device seconds, the final best full-protocol objective, its evaluations."""
    return (sum(e.get("device_ms", 0) for e in evals) / 1e3, max((full_objective(e) for e in evals), default=0),
            len(evals))


def med(runs, i):
    """The median of field i over runs."""
    return statistics.median(x[i] for x in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--sessions")
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--out")
    ap.add_argument("--retarget", nargs="*", default=[])
    ap.add_argument("--write-problem")
    ap.add_argument("--problems")
    ap.add_argument("--shapes")
    ap.add_argument("--top", type=int, default=3)
    a = ap.parse_args()
    if a.write_problem:
        if not a.problems or not a.shapes:
            sys.exit("--write-problem needs --problems and --shapes")
        write_problem(a.db, a.problems, a.shapes, a.write_problem, a.top)
        return
    if not a.sessions:
        sys.exit("--sessions DIR is required")
    best, configs = sweep_best(a.db)
    measured = retarget(a.retarget)
    target = (measured if measured else best) / (1 + a.tolerance)
    runs, wholes = {}, {}
    for name in sorted(os.listdir(a.sessions)):
        parts = name.rsplit("-", 2)
        if len(parts) != 3 or parts[1] not in ("alone", "halving") or not parts[2].isdigit():
            continue
        evals = session_evals(os.path.join(a.sessions, name))
        runs.setdefault(parts[0], {}).setdefault(parts[1], []).append(session_reach(evals, target))
        wholes.setdefault(parts[0], {}).setdefault(parts[1], []).append(session_whole(evals))
    lines = [
        f"Real sessions (no tuning database): device time until a full-protocol evaluation within "
        f"{a.tolerance:.0%} of the exhaustive sweep's best objective ({best:.3f}, {configs} configurations"
        + (f"; measured again on this card: {measured:.3f}, the target" if measured
           else "; its re-measurements on this card did not verify" if a.retarget else "")
        + "), median over seeds; a session that never got there counts at its whole device time.\n",
        "| strategy | alone: device s | evaluations | reached | multi-fidelity: device s | evaluations | reached | "
        "device time ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, modes in runs.items():
        al, ha = modes.get("alone", []), modes.get("halving", [])
        if not al or not ha:
            continue
        lines.append(
            f"| {s} | {med(al, 0):.3f} | {med(al, 1):.0f} | {sum(x[2] for x in al)}/{len(al)} | {med(ha, 0):.3f} | "
            f"{med(ha, 1):.0f} | {sum(x[2] for x in ha)}/{len(ha)} | {med(al, 0) / max(med(ha, 0), 1e-9):.2f}x less |")
    # The other reading of "device time per session for the same final best": whole sessions (each mode's budget of
    # evaluations, KL_MF_BUDGET and KL_MF_HALVING_BUDGET), their device time and where their best ended, against the
    # same target.
    lines += [
        "",
        "Whole sessions (every evaluation of the budget): device time, and the final best full-protocol objective "
        f"over the target's best (median), and how many ended within {a.tolerance:.0%} of it.\n",
        "| strategy | alone: evaluations | device s | final best | within | multi-fidelity: evaluations | device s | "
        "final best | within | device time ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference = target * (1 + a.tolerance)
    for s, modes in wholes.items():
        al, ha = modes.get("alone", []), modes.get("halving", [])
        if not al or not ha:
            continue
        within = lambda xs: sum(x[1] >= target for x in xs)
        lines.append(
            f"| {s} | {med(al, 2):.0f} | {med(al, 0):.3f} | {med(al, 1) / reference:.3f} | {within(al)}/{len(al)} | "
            f"{med(ha, 2):.0f} | {med(ha, 0):.3f} | {med(ha, 1) / reference:.3f} | {within(ha)}/{len(ha)} | "
            f"{med(al, 0) / max(med(ha, 0), 1e-9):.2f}x less |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
