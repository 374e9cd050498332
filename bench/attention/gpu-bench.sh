#!/usr/bin/env bash
# Attention decode benchmarks on the GPU; scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
# kloop run with tuner:bayes on decode_attention and mla_decode for KL_ATTENTION_MINUTES each (default 1.5), then
# the best kernels and the hand-written mla_decode candidates against the naive baselines, SDPA on contiguous data,
# the copy-bandwidth bound and the bf16 tensor-core peak.
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
MIN=${KL_ATTENTION_MINUTES:-1.5}
mkdir -p "$OUT/sessions"
rc=0
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
for p in decode_attention mla_decode; do
    echo "== kloop run --problem $p --agent tuner:bayes --minutes $MIN"
    "$BUILD/cli/kloop" run --problem "$p" --agent tuner:bayes --minutes "$MIN" --session "$OUT/sessions/$p" \
        --json >"$OUT/$p-events.jsonl" 2>"$OUT/$p.err" || rc=1
    tail -n 1 "$OUT/$p-events.jsonl"; tail -n 3 "$OUT/$p.err"
done
# The hand-written candidates (mla_hypothesis/: the engineer's shared-KV hypothesis) at their defaults, verified and
# timed interleaved with the baseline.
for c in "$ROOT"/bench/attention/mla_hypothesis/*.cu; do
    n=$(basename "$c" .cu)
    echo "== kloop eval mla_decode $c"
    "$BUILD/cli/kloop" eval mla_decode "$c" --seconds 1 --json >"$OUT/candidate-mla_decode-$n.json" \
        2>"$OUT/candidate-mla_decode-$n.err" || rc=1
    tail -n 3 "$OUT/candidate-mla_decode-$n.err"
done
python3 "$ROOT/bench/attention/attention_peers.py" --problems "$ROOT/kernels/problems" --out "$OUT/peers.json" \
    >"$OUT/peers.log" 2>&1 || rc=1
tail -n 3 "$OUT/peers.log"
python3 "$ROOT/bench/attention/attention_table.py" --sessions "$OUT/sessions" --peers "$OUT/peers.json" \
    --candidates "$OUT"/candidate-*.json --out "$OUT/summary.md" || rc=1
cat "$OUT/summary.md"
exit $rc
