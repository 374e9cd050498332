#!/usr/bin/env bash
# Hopper GEMM against cuBLAS on the GPU; scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
#  1. gemm_bf16's sm_90a template (TMA + wgmma, kernels/problems/gemm_bf16/template_sm90.cu) at hand-picked
#     points, timed by the harness interleaved with cuBLAS at 4096^3, 8192^3 and the decode shapes M=16/128 with
#     N, K in {4096, 8192, 14336}. The problem's dims stop at M=4096, K=8192, so a copy with wider dims (and those
#     shapes as its tuning shapes) is evaluated; verification shapes are the problem's own.
#  2. kloop run --problem gemm_bf16 --agent tuner:bayes (the problem as shipped: its tuning shapes, decode and
#     prefill regimes) for KL_HOPPER_TUNER_MINUTES (default 10, the issue's budget; 0 skips): per tuning shape the
#     best it reached, and the ratio of the regime winner an export would ship. (On the wide copy's 20 shapes one
#     evaluation takes ~25 s, its extremes are 8192 x 16384 x 16384: 18 evaluations in 7.5 minutes.)
#  3. table.md: TFLOP/s of both, the ratio, and % of the best cuBLAS rate measured in the run (the bf16 peak
#     this card reaches in practice).
# KL_HOPPER_POINTS: ';'-separated --params lists (default below); KL_HOPPER_SECONDS: timing seconds per shape.
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
MIN=${KL_HOPPER_TUNER_MINUTES:-10}
SECONDS_PER_SHAPE=${KL_HOPPER_SECONDS:-0.3}
POINTS=${KL_HOPPER_POINTS:-"BM=128,BN=256,STAGES=4;BM=128,BN=256,STAGES=4,CM=2;BM=128,BN=128,STAGES=6;BM=128,BN=64,STAGES=8;BM=128,BN=128,STAGES=6,SPLITK=2,REDUCE=1;BM=64,BN=64,STAGES=8;BM=64,BN=128,STAGES=8;BM=64,BN=256,STAGES=5,SPLITK=4,REDUCE=1;BM=64,BN=128,STAGES=6,SPLITK=2,REDUCE=1;BM=64,BN=128,STAGES=6,SPLITK=2"}
mkdir -p "$OUT"
rc=0

wide=$OUT/gemm_bf16_wide
rm -rf "$wide" && cp -r "$ROOT/kernels/problems/gemm_bf16" "$wide"
python3 - "$wide/problem.json" <<'PY'
import json, sys
path = sys.argv[1]
p = json.load(open(path))
for d in p["dims"]:
    d["max"] = {"M": 8192, "N": 16384, "K": 16384}[d["name"]]
shapes = [{"dims": {"M": 4096, "N": 4096, "K": 4096}, "weight": 1}, {"dims": {"M": 8192, "N": 8192, "K": 8192}, "weight": 1}]
for m in (16, 128):
    for n in (4096, 8192, 14336):
        for k in (4096, 8192, 14336):
            shapes.append({"dims": {"M": m, "N": n, "K": k}, "weight": 1})
p["tuning_shapes"] = shapes
json.dump(p, open(path, "w"), indent=1)
PY

i=0
IFS=';' read -ra points <<<"$POINTS"
for pt in "${points[@]}"; do
    echo "== kloop eval gemm_bf16 (wide dims) template_sm90.cu --params $pt"
    "$KLOOP" eval "$wide" "$wide/template_sm90.cu" --params "$pt" --seconds "$SECONDS_PER_SHAPE" --held-out 2 --json \
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
fi

BUILD_DIR=$BUILD python3 "$ROOT/bench/hopper/table.py" "$OUT" "$POINTS" >"$OUT/table.md" || rc=1
cat "$OUT/table.md"
exit $rc
