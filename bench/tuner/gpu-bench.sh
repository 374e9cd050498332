#!/usr/bin/env bash
# Tuner benchmarks on the GPU; scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
#  1. One exhaustive sweep of rmsnorm (510 valid configurations) at T=4096,H=8192 into a tuning database.
#  2. Search efficiency replayed from that database: evaluations to within 3% of the exhaustive best,
#     median over 10 seeds, every strategy vs random search (no further GPU time).
#  3. Kernel quality: kloop run with tuner:bayes on rmsnorm, softmax and silu_and_mul for a few minutes each,
#     then the best kernel against the naive baseline (timed interleaved by the harness), PyTorch eager,
#     torch.compile and the measured copy bandwidth at the same shapes.
#     For rmsnorm, softmax and silu_and_mul a second session tunes the large (prefill) shapes only.
# Budgets (device time is scarce): KL_TUNER_SWEEP_MINUTES (default 3; 0 skips the sweep and the replay),
# KL_TUNER_MINUTES per problem (1.5), KL_TUNER_LARGE_MINUTES per large-shape session (default: the same; 0 skips).
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
SEARCH=$BUILD/bench/tuner/kl_bench_tuner_search
SWEEP_MIN=${KL_TUNER_SWEEP_MINUTES:-3}
MIN=${KL_TUNER_MINUTES:-1.5}
PROBLEMS=${KL_TUNER_PROBLEMS:-rmsnorm softmax silu_and_mul gemm_bf16}
mkdir -p "$OUT/sessions"
DB=$OUT/tuning.jsonl
rc=0
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}

if [[ "$SWEEP_MIN" != 0 ]]; then
echo "== sweep: rmsnorm exhaustive at T=4096,H=8192 (at most $SWEEP_MIN min)"
"$KLOOP" run --problem rmsnorm --agent tuner:exhaustive --shapes "T=4096,H=8192" --no-held-out --quick \
    --minutes "$SWEEP_MIN" --session "$OUT/sessions/sweep-rmsnorm" --tuning-db "$DB" --json \
    >"$OUT/sweep-rmsnorm.jsonl" 2>"$OUT/sweep-rmsnorm.err" || rc=1
tail -n 1 "$OUT/sweep-rmsnorm.jsonl"; tail -n 3 "$OUT/sweep-rmsnorm.err"

echo "== search efficiency (replay from $DB)"
"$SEARCH" --db "$DB" --problem rmsnorm --seeds 10 --tolerance 0.03 --out "$OUT/search-efficiency.md" \
    2>"$OUT/search-efficiency.err" || rc=1
cat "$OUT/search-efficiency.err"
fi

# The prefill regime of each memory-bound problem: one kernel tuned for the large shapes only, which is what an
# exported dispatcher selects there (the all-shapes session's single configuration is a compromise with decode).
large_shapes() {
    case $1 in
    rmsnorm) echo "T=16384,H=8192;T=65536,H=4096" ;;
    softmax) echo "R=4096,C=32768;R=32768,C=4096;R=1024,C=131072" ;;
    silu_and_mul) echo "T=4096,I=14336;T=16384,I=14336" ;;
    esac
}
for p in $PROBLEMS; do
    echo "== kloop run --problem $p --agent tuner:bayes --minutes $MIN"
    "$KLOOP" run --problem "$p" --agent tuner:bayes --minutes "$MIN" --session "$OUT/sessions/$p" \
        --tuning-db "$DB" --json >"$OUT/$p-events.jsonl" 2>"$OUT/$p.err" || rc=1
    tail -n 1 "$OUT/$p-events.jsonl"; tail -n 3 "$OUT/$p.err"
    shapes=$(large_shapes "$p")
    if [[ -n "$shapes" && "${KL_TUNER_LARGE_MINUTES:-$MIN}" != 0 ]]; then
        echo "== kloop run --problem $p --shapes '$shapes' --minutes ${KL_TUNER_LARGE_MINUTES:-$MIN}"
        "$KLOOP" run --problem "$p" --agent tuner:bayes --minutes "${KL_TUNER_LARGE_MINUTES:-$MIN}" --shapes "$shapes" \
            --session "$OUT/sessions/$p-large" --tuning-db "$DB" --json >"$OUT/$p-large-events.jsonl" \
            2>"$OUT/$p-large.err" || rc=1
        tail -n 1 "$OUT/$p-large-events.jsonl"; tail -n 3 "$OUT/$p-large.err"
    fi
done

echo "== PyTorch eager, torch.compile, copy bandwidth at the same shapes"
python3 "$ROOT/bench/tuner/torch_baselines.py" --problems "$ROOT/kernels/problems" --out "$OUT/torch.json" \
    $PROBLEMS >"$OUT/torch.log" 2>&1 || rc=1
tail -n 5 "$OUT/torch.log"

python3 "$ROOT/bench/tuner/quality_table.py" --sessions "$OUT/sessions" --torch "$OUT/torch.json" \
    --search "$OUT/search-efficiency.md" --out "$OUT/summary.md" $PROBLEMS || rc=1
cat "$OUT/summary.md"
exit $rc
