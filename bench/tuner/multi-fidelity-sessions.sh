#!/usr/bin/env bash
# Multi-fidelity in real sessions on the GPU (issue 20): multi-fidelity-sessions.sh OUTDIR DB, with BUILD_DIR holding
# kloop and kloop-worker and DB the tuning database of gpu-bench.sh's rmsnorm sweep (its best is the target, measured
# again on this card first).
# For every strategy and seed: one session alone and one under multi-fidelity search (tuner:S:halving=SCREEN),
# no tuning database (everything measured), the sweep's shapes, --budget evaluations each; then
# multi_fidelity_sessions.py: device time to a full evaluation within 3% of the sweep's best, alone vs halving.
# KL_MF_STRATEGIES (random anneal genetic bayes), KL_MF_SEEDS (5) from KL_MF_FIRST_SEED (1), KL_MF_BUDGET (60),
# KL_MF_HALVING_BUDGET (KL_MF_BUDGET: the multi-fidelity sessions' own, to find the budget at which they end as well),
# KL_MF_SCREEN (5x1), KL_MF_RETARGET (1; 0 keeps the sweep's figure), KL_MF_UNTIL (epoch seconds: no seed is started
# after it, so a device call ends with whole seeds). The table is made again from any set of such session folders by
# the .py alone.
set -uo pipefail
OUT=${1:?usage: multi-fidelity-sessions.sh OUTDIR DB}
DB=${2:?usage: multi-fidelity-sessions.sh OUTDIR DB}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
SHAPES=${KL_TUNER_SWEEP_SHAPES:-T=16,H=4096;T=16384,H=8192}
SCREEN=${KL_MF_SCREEN:-5x1}
export KL_WORKER=${KL_WORKER:-$BUILD/kernels/kloop-worker}
mkdir -p "$OUT/sessions"
# The target on this card: the sweep's best configurations evaluated again here, at the sessions' shapes
# (KL_MF_RETARGET=0: the sweep's own figure, which may come from another card of the same model).
retarget=()
if [[ "${KL_MF_RETARGET:-1}" != 0 ]]; then
    i=0
    while read -r params; do
        "$BUILD/cli/kloop" eval "$OUT/retarget-problem" --params "$params" --held-out 0 --json \
            >"$OUT/retarget-$i.json" 2>"$OUT/retarget-$i.err" \
            || echo "retarget $params: $(tail -n 1 "$OUT/retarget-$i.err")"
        retarget+=("$OUT/retarget-$i.json")
        i=$((i + 1))
    done < <(python3 "$ROOT/bench/tuner/multi_fidelity_sessions.py" --db "$DB" --write-problem "$OUT/retarget-problem" \
        --problems "$ROOT/kernels/problems" --shapes "$SHAPES" --top "${KL_MF_RETARGET_TOP:-3}")
fi
for seed in $(seq "${KL_MF_FIRST_SEED:-1}" $(( ${KL_MF_FIRST_SEED:-1} + ${KL_MF_SEEDS:-5} - 1 ))); do
    if [[ -n "${KL_MF_UNTIL:-}" ]] && (( $(date +%s) >= KL_MF_UNTIL )); then
        echo "KL_MF_UNTIL reached: seeds from $seed not run"
        break
    fi
    for s in ${KL_MF_STRATEGIES:-random anneal genetic bayes}; do
        for mode in alone halving; do
            agent="tuner:$s" budget=${KL_MF_BUDGET:-60}
            [[ $mode == halving ]] && agent="tuner:$s:halving=$SCREEN" budget=${KL_MF_HALVING_BUDGET:-$budget}
            "$BUILD/cli/kloop" run --problem rmsnorm --agent "$agent" --shapes "$SHAPES" --no-held-out --no-tuning-db \
                --seed "$seed" --budget "$budget" --session "$OUT/sessions/$s-$mode-$seed" --json \
                >"$OUT/sessions/$s-$mode-$seed.jsonl" 2>"$OUT/sessions/$s-$mode-$seed.err" \
                || echo "$s-$mode-$seed failed: $(tail -n 2 "$OUT/sessions/$s-$mode-$seed.err")"
        done
    done
done
python3 "$ROOT/bench/tuner/multi_fidelity_sessions.py" --db "$DB" --sessions "$OUT/sessions" --out "$OUT/sessions.md" \
    ${retarget[@]+--retarget "${retarget[@]}"}
