"""Side-by-side table of gpu-bench.sh's evaluations: per shape the best point's TFLOP/s against cuBLAS's."""
import json
import os
import sys

out, points = sys.argv[1], sys.argv[2].split(";")
rows = {}  # label -> (dims, best candidate us, point, cuBLAS us)
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
    for s in e.get("shapes", []):
        if s.get("held_out") or "timing" not in s or "baseline_timing" not in s or not s.get("correct"):
            continue
        d = s["shape"]["dims"]
        label = f"M={d['M']} N={d['N']} K={d['K']}"
        us, base = s["timing"]["median_us"], s["baseline_timing"]["median_us"]
        if label not in rows or us < rows[label][1]:
            rows[label] = (d, us, point, base)
print()
if not rows:
    sys.exit(1)
peak = max(2 * d["M"] * d["N"] * d["K"] / (b * 1e-6) / 1e12 for d, _, _, b in rows.values())
print(f"Measured bf16 peak used for %: {peak:.0f} TFLOP/s (the best cuBLAS rate in this run)\n")
print("| shape | candidate us | candidate TFLOP/s | cuBLAS us | cuBLAS TFLOP/s | ratio (cuBLAS time / ours) | % of peak | point |")
print("|---|---|---|---|---|---|---|---|")
for label, (d, us, point, base) in sorted(rows.items(), key=lambda kv: (kv[1][0]["M"] < 1000, kv[1][0]["M"], kv[1][0]["N"], kv[1][0]["K"])):
    flops = 2 * d["M"] * d["N"] * d["K"]
    t, tb = flops / (us * 1e-6) / 1e12, flops / (base * 1e-6) / 1e12
    print(f"| {label} | {us:.1f} | {t:.0f} | {base:.1f} | {tb:.0f} | {base / us:.3f} | {100 * t / peak:.0f}% | {point} |")
