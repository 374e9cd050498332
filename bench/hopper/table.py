"""Side-by-side table of gpu-bench.sh's evaluations: per shape the best point's TFLOP/s against cuBLAS's."""
import json
import os
import sys

out, points = sys.argv[1], sys.argv[2].split(";")
rows = {}  # label -> (dims, best candidate us, point, cuBLAS us)
ratios = {}  # label -> {point index: cuBLAS us / candidate us}
for i, point in enumerate(points):
    path = os.path.join(out, f"eval-{i}.json")
    try:
        e = json.load(open(path))
    except (OSError, ValueError) as err:
        print(f"eval-{i} ({point}): no result ({err})\n")
        continue
    print(f"eval-{i} ({point}): verdict {e.get('verdict')}, objective {e.get('objective', 0):.3f}")
    for r in e.get("reasons", []):
        print(f"  {r.get('rule')}: {r.get('message', '')[:300]}")
    wrong = [s for s in e.get("shapes", []) if not s.get("correct")]
    for s in wrong[:8]:
        d = s["shape"]["dims"]
        failed = [c for c in s.get("checks", []) if not c.get("passed")]
        c = failed[0] if failed else {}
        print(f"  wrong at M={d.get('M')} N={d.get('N')} K={d.get('K')}{' (held out)' if s.get('held_out') else ''}: "
              f"{len(failed)} of {len(s.get('checks', []))} checks failed, first: {c.get('distribution', '?')} "
              f"rel_l2 {c.get('rel_l2', 0):.3g} max {c.get('max_abs', 0):.3g} non_finite {c.get('non_finite')} "
              f"full_coverage {c.get('full_coverage')}")
    if len(wrong) > 8:
        print(f"  ... and {len(wrong) - 8} more wrong shapes")
    for s in e.get("shapes", []):
        if s.get("held_out") or "timing" not in s or "baseline_timing" not in s or not s.get("correct"):
            continue
        d = s["shape"]["dims"]
        label = f"M={d['M']} N={d['N']} K={d['K']}"
        us, base = s["timing"]["median_us"], s["baseline_timing"]["median_us"]
        ratios.setdefault(label, {})[i] = base / us
        if label not in rows or us < rows[label][1]:
            rows[label] = (d, us, point, base)
print()
if not rows:
    sys.exit(1)


def shape_order(kv):
    d = kv[1][0]
    return (d["M"] < 1000, d["M"], d["N"], d["K"])


if len(points) > 1:
    print("Ratio cuBLAS time / ours per point (columns: the points above, in order)\n")
    print("| shape | " + " | ".join(f"p{i}" for i in range(len(points))) + " |")
    print("|---|" + "---|" * len(points))
    for label, _ in sorted(rows.items(), key=shape_order):
        print(f"| {label} | " + " | ".join(f"{ratios[label][i]:.2f}" if i in ratios[label] else "-" for i in range(len(points))) + " |")
    print()
peak = max(2 * d["M"] * d["N"] * d["K"] / (b * 1e-6) / 1e12 for d, _, _, b in rows.values())
print(f"Measured bf16 peak used for %: {peak:.0f} TFLOP/s (the best cuBLAS rate in this run)\n")
print("| shape | candidate us | candidate TFLOP/s | cuBLAS us | cuBLAS TFLOP/s | ratio (cuBLAS time / ours) | % of peak | point |")
print("|---|---|---|---|---|---|---|---|")
for label, (d, us, point, base) in sorted(rows.items(), key=shape_order):
    flops = 2 * d["M"] * d["N"] * d["K"]
    t, tb = flops / (us * 1e-6) / 1e12, flops / (base * 1e-6) / 1e12
    print(f"| {label} | {us:.1f} | {t:.0f} | {base:.1f} | {tb:.0f} | {base / us:.3f} | {100 * t / peak:.0f}% | {point} |")

# The tuner's session (gpu-bench.sh step 2): per shape the fastest verified candidate it evaluated ("reached"),
# and what its exported dispatcher would serve there: the winner of the shape's regime (kloop session show).
session = os.path.join(out, "session-bayes")
cands = os.path.join(session, "candidates")
if not os.path.isdir(cands):
    sys.exit(0)
best = {}  # label -> (dims, us, cuBLAS us, candidate id)
by_candidate = {}  # candidate id -> {label: (us, cuBLAS us)}
evaluated = correct = 0
for cid in sorted(os.listdir(cands)):
    try:
        e = json.load(open(os.path.join(cands, cid, "evaluation.json")))
    except (OSError, ValueError):
        continue
    evaluated += 1
    if not all(s.get("correct") for s in e.get("shapes", [])) or not e.get("shapes"):
        continue
    correct += 1
    for s in e["shapes"]:
        if s.get("held_out") or "timing" not in s or "baseline_timing" not in s:
            continue
        d = s["shape"]["dims"]
        label = f"M={d['M']} N={d['N']} K={d['K']}"
        us, base = s["timing"]["median_us"], s["baseline_timing"]["median_us"]
        by_candidate.setdefault(cid, {})[label] = (us, base)
        if label not in best or base / us > best[label][2] / best[label][1]:
            best[label] = (d, us, base, cid)
winners = {}
try:
    import subprocess
    kloop = os.path.join(os.environ.get("BUILD_DIR", "build"), "cli", "kloop")
    shown = json.loads(subprocess.run([kloop, "session", "show", session, "--json"], capture_output=True, text=True).stdout)
    winners = {r["regime"]: r for r in shown.get("regimes", [])}
except (OSError, ValueError) as err:
    print(f"kloop session show: {err}")


def holds(condition, dims):
    """A problem.json regime condition (C operators over dims) at these dims."""
    py = condition.replace("&&", " and ").replace("||", " or ").replace("!=", "<>").replace("!", " not ").replace("<>", "!=")
    return bool(eval(py, {"__builtins__": {}}, dict(dims)))


def winner_text(regime, w):
    if not w.get("winner"):
        return f"{regime}: cuBLAS (the fallback: no candidate significantly faster there)"
    return f"{regime}: {w['winner']} (speedup {w.get('speedup', 0):.3f} over its tuning shapes)"


def params_of(cid):
    try:
        return ",".join(f"{k}={v}" for k, v in sorted(json.load(open(os.path.join(cands, cid, "candidate.json")))["params"].items()))
    except (OSError, ValueError, KeyError):
        return "?"


print(f"\n## kloop run --agent tuner:bayes on the same shapes: {evaluated} candidates evaluated, {correct} verified correct\n")
print("Regime winners (kloop session show): " + "; ".join(winner_text(r, w) for r, w in winners.items()) + "\n")
print("| shape | best reached us | cuBLAS us | ratio | TFLOP/s | % of peak | candidate | regime winner's ratio here |")
print("|---|---|---|---|---|---|---|---|")
for label, (d, us, base, cid) in sorted(best.items(), key=lambda kv: (kv[1][0]["M"] < 1000, kv[1][0]["M"], kv[1][0]["N"], kv[1][0]["K"])):
    flops = 2 * d["M"] * d["N"] * d["K"]
    t = flops / (us * 1e-6) / 1e12
    regime = next((r for r, w in winners.items() if holds(w.get("condition", "0"), d)), None)
    w = (winners.get(regime) or {}).get("winner")
    here = by_candidate.get(w, {}).get(label) if w else None
    wr = f"{here[1] / here[0]:.3f} ({w})" if here else "- (cuBLAS)"
    print(f"| {label} | {us:.1f} | {base:.1f} | {base / us:.3f} | {t:.0f} | {100 * t / peak:.0f}% | {cid} {params_of(cid)} | {wr} |")
