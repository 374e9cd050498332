#!/usr/bin/env bash
# Hopper GEMM against cuBLAS on the GPU; scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
#  1. gemm_bf16's sm_90a template (TMA + wgmma, kernels/problems/gemm_bf16/template_sm90.cu) at hand-picked
#     points, timed by the harness interleaved with cuBLAS at 4096^3, 8192^3 and the decode shapes M=16/128 with
#     N, K in {4096, 8192, 14336}: a copy of the problem with those shapes as its tuning shapes (issue_problem.py)
#     is evaluated; verification shapes are the problem's own.
#  2. kloop run --problem gemm_bf16 --agent tuner:bayes (the problem as shipped: its tuning shapes and its
#     decode_small, decode_large and prefill regimes) for KL_HOPPER_TUNER_MINUTES (default 10, the issue's budget;
#     0 skips): per tuning shape the best it reached, and the ratio of the regime winner an export would ship.
#  3. table.md: TFLOP/s of both, the ratio, and % of the best cuBLAS rate measured in the run (the bf16 peak
#     this card reaches in practice).
# KL_HOPPER_POINTS: ';'-separated --params lists (default below; a point sets both paths: BM .. REGSPLIT the
# persistent kernel at M > SKINNY_M, SBN and SKMAX the skinny one at M <= SKINNY_M), or "@FILE PARAMS" for another
# candidate file; KL_HOPPER_SECONDS: timing seconds per shape.
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
MIN=${KL_HOPPER_TUNER_MINUTES:-10}
SECONDS_PER_SHAPE=${KL_HOPPER_SECONDS:-0.3}
POINTS=${KL_HOPPER_POINTS:-"BM=128,BN=256,STAGES=4;BM=128,BN=128,STAGES=6,SBN=64;BM=128,BN=256,STAGES=4,CM=2,SBN=256;BM=128,BN=64,STAGES=8,SKMAX=2"}
mkdir -p "$OUT"
rc=0

issue=$OUT/gemm_bf16_issue
python3 "$ROOT/bench/hopper/issue_problem.py" "$ROOT" "$issue" || exit 1

i=0
IFS=';' read -ra points <<<"$POINTS"
for pt in "${points[@]}"; do
    # "@FILE PARAMS": another candidate file (a variant to compare in the same run) at PARAMS (may be empty)
    file=$issue/template_sm90.cu params=$pt
    if [[ "$pt" == @* ]]; then
        file=${pt%% *} params=""
        file=${file#@}
        [[ "$pt" == *" "* ]] && params=${pt#* }
    fi
    args=()
    [[ -n "$params" ]] && args=(--params "$params")
    echo "== kloop eval gemm_bf16 (issue shapes) $(basename "$file") ${args[*]}"
    "$KLOOP" eval "$issue" "$file" "${args[@]}" --seconds "$SECONDS_PER_SHAPE" --held-out 2 --json \
        >"$OUT/eval-$i.json" 2>"$OUT/eval-$i.err" || rc=1
    tail -n 3 "$OUT/eval-$i.err"
    i=$((i + 1))
done

if [[ "$MIN" != 0 ]]; then
    echo "== kloop run --problem gemm_bf16 --agent tuner:bayes --minutes $MIN"
    "$KLOOP" run --problem gemm_bf16 --agent tuner:bayes --minutes "$MIN" --session "$OUT/session-bayes" --json \
        >"$OUT/run-bayes.jsonl" 2>"$OUT/run-bayes.err" || rc=1
    tail -n 2 "$OUT/run-bayes.jsonl" | cut -c1-400
    tail -n 3 "$OUT/run-bayes.err"
    # What the tuner's export ships, at every issue shape: each regime winner's parameters evaluated on the issue
    # copy (the session tuned on the shipped problem's few tuning shapes), as one more column of the table.
    while read -r regime params; do
        echo "== kloop eval gemm_bf16 (issue shapes) the $regime winner: --params $params"
        args=()
        [[ "$params" != defaults ]] && args=(--params "$params")
        "$KLOOP" eval "$issue" "$issue/template_sm90.cu" "${args[@]}" --seconds "$SECONDS_PER_SHAPE" --held-out 2 \
            --json >"$OUT/eval-$i.json" 2>"$OUT/eval-$i.err" || rc=1
        POINTS+=";$regime winner: $params"
        i=$((i + 1))
    done < <("$KLOOP" session show "$OUT/session-bayes" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
params = {c["id"]: c.get("params", {}) for c in s.get("candidates", [])}
for r in s.get("regimes", []):
    w = r.get("winner")
    if w and w in params:
        print(r["regime"], ",".join(f"{k}={v}" for k, v in sorted(params[w].items())) or "defaults")')
fi

BUILD_DIR=$BUILD python3 "$ROOT/bench/hopper/table.py" "$OUT" "$POINTS" >"$OUT/table.md" || rc=1
cat "$OUT/table.md"
exit $rc
