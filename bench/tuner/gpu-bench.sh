#!/usr/bin/env bash
# Tuner benchmarks on the GPU; scripts/gpu-check runs it as: gpu-bench.sh OUTDIR (BUILD_DIR set).
#  1. One exhaustive sweep of rmsnorm (918 valid configurations; 510 before PRELOAD_W) at KL_TUNER_SWEEP_SHAPES
#     (default a decode and a prefill shape) into a tuning database, with the full timing protocol
#     (KL_TUNER_SWEEP_PROTOCOL=quick: --quick).
#  2. A screen sweep per fidelity of KL_TUNER_SCREEN (samples x shapes, default "5x1 5x2"): every configuration
#     screened on the GPU into the same database, so the replay prices screens by what they cost and ranks by what
#     they measured. Then search efficiency replayed from that database (no further GPU time): evaluations to
#     within 3% of the exhaustive best, median over KL_TUNER_REPLAY_SEEDS (100) seeds, every strategy vs random
#     search; device time to that best, each strategy alone vs under multi-fidelity search.
#  3. Kernel quality: kloop run with tuner:bayes on rmsnorm, softmax and silu_and_mul for a few minutes each,
#     then the best kernel against the naive baseline (timed interleaved by the harness), PyTorch eager,
#     torch.compile and the measured copy bandwidth at the same shapes.
#     For rmsnorm, softmax and silu_and_mul a second session tunes the large (prefill) shapes only.
#     `kloop session regimes` on each session writes regimes-<problem>.txt: where its per-shape winners change.
#  4. Peers, in one run with one timer (torch_baselines.py --liger --bundles): each session's best exported
#     (`kloop export`), its PyTorch op timed beside eager, torch.compile and Liger-Kernel (requirements-peers.txt;
#     on a machine without PyPI carry the wheel in .whl/), graph-replayed at the decode shapes; peer_table.py
#     writes peers.md (ratio vs the fastest peer per tuning shape, each peer's version).
#  5. Learned regimes: where `kloop session regimes` finds a split in a session (one that gains
#     KL_TUNER_LEARNED_MIN_GAIN percent, default 2), the problem is copied with those regimes (--write-problem),
#     tuned afresh for KL_TUNER_LEARNED_MINUTES (default KL_TUNER_MINUTES; 0 skips), exported and timed beside the
#     same peers: peers-learned.md, to read against peers.md's dispatcher on the problem's own regimes.
# Budgets (device time is scarce): KL_TUNER_SWEEP_MINUTES (default 8; 0 skips the sweep and the replay),
# KL_TUNER_MINUTES per problem (1.5), KL_TUNER_LARGE_MINUTES per large-shape session (default: the same; 0 skips),
# KL_TUNER_PROBLEMS (default rmsnorm softmax silu_and_mul gemm_bf16; none: steps 1-2 only).
set -uo pipefail
OUT=${1:?usage: gpu-bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
SEARCH=$BUILD/bench/tuner/kl_bench_tuner_search
SWEEP_MIN=${KL_TUNER_SWEEP_MINUTES:-8}
SWEEP_SHAPES=${KL_TUNER_SWEEP_SHAPES:-T=16,H=4096;T=16384,H=8192}
SCREEN=${KL_TUNER_SCREEN:-5x1 5x2} # screen fidelities, each recorded by its own screen sweep and replayed
SWEEP_QUICK=()
[[ "${KL_TUNER_SWEEP_PROTOCOL:-full}" == quick ]] && SWEEP_QUICK=(--quick)
MIN=${KL_TUNER_MINUTES:-1.5}
PROBLEMS=${KL_TUNER_PROBLEMS:-rmsnorm softmax silu_and_mul gemm_bf16}
mkdir -p "$OUT/sessions"
DB=$OUT/tuning.jsonl
rc=0
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}

if [[ "$SWEEP_MIN" != 0 ]]; then
echo "== sweep: rmsnorm exhaustive at $SWEEP_SHAPES (at most $SWEEP_MIN min) ${SWEEP_QUICK[*]}"
"$KLOOP" run --problem rmsnorm --agent tuner:exhaustive --shapes "$SWEEP_SHAPES" --no-held-out "${SWEEP_QUICK[@]}" \
    --minutes "$SWEEP_MIN" --session "$OUT/sessions/sweep-rmsnorm" --tuning-db "$DB" --json \
    >"$OUT/sweep-rmsnorm.jsonl" 2>"$OUT/sweep-rmsnorm.err" || rc=1
tail -n 1 "$OUT/sweep-rmsnorm.jsonl"; tail -n 3 "$OUT/sweep-rmsnorm.err"

for screen in $SCREEN; do
echo "== screen sweep: every configuration screened at $screen (promotions are the full sweep's records)"
"$KLOOP" run --problem rmsnorm --agent "tuner:exhaustive:halving=$screen" --shapes "$SWEEP_SHAPES" --no-held-out \
    "${SWEEP_QUICK[@]}" --minutes "$SWEEP_MIN" --session "$OUT/sessions/screen-rmsnorm-$screen" --tuning-db "$DB" \
    --json >"$OUT/screen-rmsnorm-$screen.jsonl" 2>"$OUT/screen-rmsnorm-$screen.err" || rc=1
tail -n 1 "$OUT/screen-rmsnorm-$screen.jsonl"; tail -n 3 "$OUT/screen-rmsnorm-$screen.err"
suffix=$([[ "$screen" == "${SCREEN%% *}" ]] || echo "-$screen")
echo "== search efficiency (replay from $DB, screens of $screen)"
"$SEARCH" --db "$DB" --problem rmsnorm --seeds "${KL_TUNER_REPLAY_SEEDS:-100}" --tolerance 0.03 \
    --screen-samples "${screen%x*}" --screen-shapes "${screen#*x}" --out "$OUT/search-efficiency$suffix.md" \
    2>"$OUT/search-efficiency$suffix.err" || rc=1
cat "$OUT/search-efficiency$suffix.err"
done
fi
# KL_TUNER_PROBLEMS=none: the sweep and its replay alone (the database is what a CPU-side study of the strategies
# replays afterwards).
[[ "$PROBLEMS" == none ]] && exit $rc

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
    [[ -f "$OUT/sessions/$p/journal.jsonl" ]] && "$KLOOP" session regimes "$OUT/sessions/$p" >"$OUT/regimes-$p.txt" 2>&1
done

# SESSION BUNDLE LOG: the session's export; one the exporter refuses (its reason is in LOG) is exported with
# --force, as the peers are timed either way.
export_bundle() {
    "$KLOOP" export "$1" --out "$2" --overwrite >"$3" 2>&1 && return 0
    echo "export of $1 refused (see $3); exporting with --force"
    "$KLOOP" export "$1" --out "$2" --overwrite --force >>"$3" 2>&1 || { tail -n 5 "$3"; return 1; }
}
echo "== export each session's best for the peer comparison"
mkdir -p "$OUT/bundles"
for p in $PROBLEMS; do
    [[ -f "$OUT/sessions/$p/journal.jsonl" ]] || continue
    export_bundle "$OUT/sessions/$p" "$OUT/bundles/$p" "$OUT/export-$p.log" || rc=1
done
if [[ -d "$ROOT/.whl" ]] && ls "$ROOT"/.whl/liger_kernel-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-peers \
        "$ROOT"/.whl/liger_kernel-*.whl && export PYTHONPATH=/tmp/site-peers${PYTHONPATH:+:$PYTHONPATH}
elif ! python3 -c "import liger_kernel" 2>/dev/null; then
    python3 -m pip install -q -r "$ROOT/bench/tuner/requirements-peers.txt" >/dev/null 2>&1 || echo "no liger-kernel here"
fi

echo "== KernelLoop's export, PyTorch eager, torch.compile, Liger-Kernel, copy bandwidth at the same shapes"
python3 "$ROOT/bench/tuner/torch_baselines.py" --problems "$ROOT/kernels/problems" --out "$OUT/torch.json" \
    --liger --bundles "$OUT/bundles" $PROBLEMS >"$OUT/torch.log" 2>&1 || rc=1
tail -n 5 "$OUT/torch.log"
python3 "$ROOT/bench/tuner/peer_table.py" --torch "$OUT/torch.json" --out "$OUT/peers.md" \
    $(for p in $PROBLEMS; do [[ $p != gemm_bf16 ]] && echo "$p"; done) || rc=1

LEARNED_MIN=${KL_TUNER_LEARNED_MINUTES:-$MIN}
learned=()
if [[ "$LEARNED_MIN" != 0 ]]; then
    L=$OUT/learned
    mkdir -p "$L/problems"
    for p in $PROBLEMS; do
        [[ $p != gemm_bf16 && -f "$OUT/sessions/$p/journal.jsonl" ]] || continue
        rm -rf "${L:?}/problems/$p"
        "$KLOOP" session regimes "$OUT/sessions/$p" --write-problem "$L/problems/$p" \
            --min-gain "${KL_TUNER_LEARNED_MIN_GAIN:-2}" --json >"$L/regimes-$p.json" \
            2>"$L/regimes-$p.err" || { rc=1; tail -n 3 "$L/regimes-$p.err"; continue; }
        if [[ $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["cuts"])' "$L/regimes-$p.json") == 0 ]]; then
            echo "== $p: no learned split gains enough; its session keeps the problem's regimes"
            continue
        fi
        echo "== kloop run --problem $L/problems/$p (learned regimes) --minutes $LEARNED_MIN"
        "$KLOOP" run --problem "$L/problems/$p" --agent tuner:bayes --minutes "$LEARNED_MIN" --session "$L/sessions/$p" \
            --json >"$L/$p-events.jsonl" 2>"$L/$p.err" || rc=1
        tail -n 3 "$L/$p.err"
        export_bundle "$L/sessions/$p" "$L/bundles/$p" "$L/export-$p.log" || { rc=1; continue; }
        learned+=("$p")
    done
    if ((${#learned[@]})); then
        echo "== the learned-regime exports beside the same peers"
        python3 "$ROOT/bench/tuner/torch_baselines.py" --problems "$L/problems" --out "$L/torch.json" --liger \
            --bundles "$L/bundles" "${learned[@]}" >"$L/torch.log" 2>&1 || rc=1
        python3 "$ROOT/bench/tuner/peer_table.py" --torch "$L/torch.json" --out "$OUT/peers-learned.md" "${learned[@]}" \
            || rc=1
    fi
fi

python3 "$ROOT/bench/tuner/quality_table.py" --sessions "$OUT/sessions" --torch "$OUT/torch.json" \
    --search "$OUT/search-efficiency.md" --out "$OUT/summary.md" $PROBLEMS || rc=1
cat "$OUT/summary.md"
exit $rc
