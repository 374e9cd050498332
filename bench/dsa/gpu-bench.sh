#!/usr/bin/env bash
# Issue 19's stage problems on the GPU; scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
# kloop eval of each problem's template at its defaults (verified, then timed interleaved with the baseline), and
# with KL_DSA_MINUTES > 0 (default 0) a kloop run with tuner:bayes of that long per problem; then the table of
# TFLOP/s and share of the copy bandwidth per tuning shape against the issue's targets (dsa_table.py).
# On a compute capability 9.0 card the indexer's target table follows (indexer-sm90.sh into OUTDIR/indexer-sm90:
# the sm_90a template at several points against the copy bandwidth and a read of each shape's own bytes, about
# 30 s on the H200); KL_DSA_INDEXER_SM90=0 skips it.
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
MIN=${KL_DSA_MINUTES:-0}
PROBLEMS=${KL_DSA_PROBLEMS:-sparse_mla_decode dsa_indexer dsa_topk add_rmsnorm rotary_embedding}
mkdir -p "$OUT/sessions"
rc=0
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
for p in $PROBLEMS; do
    echo "== kloop eval $p (template at its defaults)"
    "$BUILD/cli/kloop" eval "$p" --seconds 1 --json >"$OUT/$p-template.json" 2>"$OUT/$p-template.err" || rc=1
    tail -n 3 "$OUT/$p-template.err"
    if [[ "$MIN" != 0 ]]; then
        echo "== kloop run --problem $p --agent tuner:bayes --minutes $MIN"
        "$BUILD/cli/kloop" run --problem "$p" --agent tuner:bayes --minutes "$MIN" --session "$OUT/sessions/$p" \
            --json >"$OUT/$p-events.jsonl" 2>"$OUT/$p-run.err" || rc=1
        tail -n 3 "$OUT/$p-run.err"
    fi
done
python3 "$ROOT/bench/dsa/dsa_table.py" --problems "$ROOT/kernels/problems" --results "$OUT" --names $PROBLEMS \
    --out "$OUT/summary.md" || rc=1
cat "$OUT/summary.md"
if [[ " $PROBLEMS " == *" dsa_indexer "* && "${KL_DSA_INDEXER_SM90:-1}" != 0 ]] \
    && [[ $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) == 9.0 ]]; then
    echo "== the indexer's target table (indexer-sm90.sh)"
    BUILD_DIR=$BUILD "$ROOT/bench/dsa/indexer-sm90.sh" "$OUT/indexer-sm90" >"$OUT/indexer-sm90.log" 2>&1 || rc=1
    tail -n 12 "$OUT/indexer-sm90.log"
fi
exit $rc
