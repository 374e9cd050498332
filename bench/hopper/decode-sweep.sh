#!/usr/bin/env bash
# gemm_bf16's skinny path (M <= 128) against cuBLAS on the GPU, in one device call of about 3 minutes:
# decode-sweep.sh OUTDIR (BUILD_DIR: the build, default build/; it needs cli/kloop, kernels/kloop-worker and
# bench/hopper/skinny_check).
#  1. skinny_check (bench/hopper/skinny_check.cpp) at KL_SKINNY_POINTS over the 18 decode shapes and edge shapes:
#     correct or where it is wrong (token rows, column tiles), the launch geometry (splits, clusters the device holds
#     at once, ring stages) and ours vs cuBLAS from CUDA graphs; one file per point, a matrix of ratios here.
#  2. kloop eval of the template at KL_DECODE_POINTS on a copy of the problem whose tuning shapes are issue 15's
#     (issue_problem.py: the 18 decode shapes, 4096^3, 8192^3): the harness's verdict, and its timing interleaved
#     with cuBLAS.
#  3. kloop eval of the defaults on the problem as shipped, timed: what one evaluation of the tuner costs.
#  4. table.md (table.py) last: the harness's ratio cuBLAS time / ours per point and shape, then the best per shape.
set -uo pipefail
OUT=${1:?usage: decode-sweep.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
CHECK=$BUILD/bench/hopper/skinny_check
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
SKINNY_POINTS=${KL_SKINNY_POINTS:-"SBN=128;SBN=64;SBN=256;SKMAX=2;SKMAX=1"}
POINTS=${KL_DECODE_POINTS:-"SBN=128;SBN=64;SBN=256"}
SECONDS_PER_SHAPE=${KL_DECODE_SECONDS:-0.2}
mkdir -p "$OUT"
rc=0

hung=0
i=0
IFS=';' read -ra skinny <<<"$SKINNY_POINTS"
for pt in "${skinny[@]}"; do
    echo "== skinny_check --params $pt"
    timeout 90 "$CHECK" --params "$pt" >"$OUT/skinny-$i.txt" 2>&1
    code=$?
    # The compile report, and every wrong shape, fault, hang or cluster that does not fit at once, with its geometry.
    grep -E "^skinny_check|registers|WRONG|FAULT|HANG|WAVES|shapes wrong|failed" -A1 "$OUT/skinny-$i.txt" |
        grep -v "^--$" | head -n 40
    if [[ $code -ne 0 ]]; then
        rc=1
        echo "skinny_check exited $code (1 wrong, 2 usage or compile, 4 hang, 124 killed after 90 s)"
        # A hang at one point is likely a hang at every point: leave the device time to the harness's verdict.
        [[ $code -eq 4 || $code -eq 124 ]] && hung=1 && break
    fi
    i=$((i + 1))
done
python3 - "$OUT" "$SKINNY_POINTS" <<'PY'
import os, re, sys
out, points = sys.argv[1], sys.argv[2].split(";")
rows = {}
for i, _ in enumerate(points):
    try:
        text = open(os.path.join(out, f"skinny-{i}.txt")).read()
    except OSError:
        continue
    for m in re.finditer(r"^\| (M=\S+ N=\S+ K=\S+) \| (\w+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", text, re.M):
        rows.setdefault(m.group(1), {})[i] = (m.group(2), float(m.group(5)))
print("\nskinny_check: cuBLAS time / ours per point (" + "; ".join(f"p{i} {p}" for i, p in enumerate(points)) + ")\n")
print("| shape | " + " | ".join(f"p{i}" for i in range(len(points))) + " |")
print("|---|" + "---|" * len(points))
for label in sorted(rows, key=lambda l: [int(x.split("=")[1]) for x in l.split()]):
    cells = [rows[label].get(i) for i in range(len(points))]
    print(f"| {label} | " + " | ".join("-" if c is None else f"{c[1]:.2f}" + ("" if c[0] == "ok" else " WRONG") for c in cells) + " |")
PY

issue=$OUT/gemm_bf16_issue
python3 "$ROOT/bench/hopper/issue_problem.py" "$ROOT" "$issue" || exit 1
i=0
IFS=';' read -ra points <<<"$POINTS"
for pt in "${points[@]}"; do
    echo "== kloop eval gemm_bf16 (issue shapes) template_sm90.cu --params $pt"
    timeout 150 "$KLOOP" eval "$issue" "$issue/template_sm90.cu" --params "$pt" --seconds "$SECONDS_PER_SHAPE" \
        --held-out 1 --json >"$OUT/eval-$i.json" 2>"$OUT/eval-$i.err" || rc=1
    tail -n 3 "$OUT/eval-$i.err"
    i=$((i + 1))
    [[ $hung -eq 1 ]] && break
done

echo "== kloop eval gemm_bf16 (as shipped) at the defaults: one tuner evaluation"
start=$(date +%s.%N)
# The sm_90a template, which an H200 session seeds from (kloop eval without a file takes the portable template.cu).
[[ $hung -eq 0 ]] && { timeout 150 "$KLOOP" eval "$ROOT/kernels/problems/gemm_bf16" \
    "$ROOT/kernels/problems/gemm_bf16/template_sm90.cu" --json >"$OUT/eval-shipped.json" 2>"$OUT/eval-shipped.err" || rc=1; }
python3 - "$OUT/eval-shipped.json" "$start" "$(date +%s.%N)" <<'PY'
import json, sys
start, end = float(sys.argv[2]), float(sys.argv[3])
try:
    e = json.load(open(sys.argv[1]))
except (OSError, ValueError) as err:
    print(f"no result ({err})")
    sys.exit(0)
timed = [s for s in e.get("shapes", []) if "timing" in s]
print(f"verdict {e.get('verdict')}, {end - start:.1f} s wall, device {e.get('device_ms', 0) / 1000:.1f} s, "
      f"{len(e.get('shapes', []))} shapes verified, {len(timed)} timed")
for s in timed:
    d = s["shape"]["dims"]
    if "baseline_timing" in s:
        print(f"  M={d['M']} N={d['N']} K={d['K']}{' (held out)' if s.get('held_out') else ''}: "
              f"{s['timing']['median_us']:.1f} us, cuBLAS {s['baseline_timing']['median_us']:.1f} us")
PY

BUILD_DIR=$BUILD python3 "$ROOT/bench/hopper/table.py" "$OUT" "$POINTS" >"$OUT/table.md" || rc=1
cat "$OUT/table.md"
exit $rc
