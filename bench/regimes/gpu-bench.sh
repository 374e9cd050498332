#!/usr/bin/env bash
# bench/regimes/gpu-bench.sh OUT_DIR -- shape regimes on a GPU box (run by scripts/gpu-check, BENCHES=regimes):
#  1. two sessions of one problem (rmsnorm unless REGIMES_PROBLEM), same agent and budget: `--regimes problem` (a best
#     per regime of problem.json) and `--regimes single` (one configuration for every shape);
#  2. `kloop export` of each: the regime dispatcher (one bundle per regime winner) and the single bundle;
#  3. the regime dispatcher's own CMake project: configure, build, ctest (its CPU regime-dispatch test, each regime
#     bundle's dispatch test and GPU self-test);
#  4. check_regimes.py: the dispatcher picks the regime's kernel, each pick matches torch, and the regime winners beat
#     the single-configuration export at the extreme shapes (CUDA-graph replay, medians, both in one process).
# Writes summary.md and results.json into OUT_DIR; exits 1 when a step or a check fails.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-${BENCH_OUT:-$ROOT/regimes-bench-out}}
BUILD=${BUILD_DIR:-$ROOT/build}
KLOOP=$BUILD/cli/kloop
PROBLEM=${REGIMES_PROBLEM:-rmsnorm}
AGENT=${REGIMES_AGENT:-tuner:random}
BUDGET=${REGIMES_BUDGET:-60}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
JOBS=${JOBS:-$(nproc)}
declare -A STATUS
log() { echo "[regimes-bench] $*"; }
step() { # name, command...: output to OUT/name.log, status recorded
    local name=$1; shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    STATUS[$name]="$([[ $rc == 0 ]] && echo ok || echo "FAIL($rc)") $((SECONDS - t0))s"
    log "$name: ${STATUS[$name]}"
    tail -n 8 "$OUT/$name.log" | sed "s/^/    /"
    return $rc
}

[[ -x "$KLOOP" ]] || cmake --build "$BUILD" -j "$JOBS" --target kloop kloop-worker >"$OUT/build-tools.log" 2>&1

for mode in problem single; do
    rm -rf "$OUT/session-$mode"
    step "run-$mode" "$KLOOP" run --problem "$PROBLEM" --agent "$AGENT" --budget "$BUDGET" --seed 1 --regimes "$mode" \
        --session "$OUT/session-$mode" --no-tuning-db
done
step show-problem "$KLOOP" session show "$OUT/session-problem"
rm -rf "$OUT/regimes" "$OUT/single"
step export-regimes "$KLOOP" export "$OUT/session-problem" --out "$OUT/regimes" --json
step export-single "$KLOOP" export "$OUT/session-single" --out "$OUT/single" --json
step regimes-configure cmake -S "$OUT/regimes" -B "$OUT/regimes/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
step regimes-build cmake --build "$OUT/regimes/build" -j "$JOBS"
step regimes-ctest ctest --test-dir "$OUT/regimes/build" --output-on-failure --timeout 600
export TORCH_EXTENSIONS_DIR=$OUT/torch-ext
step check python3 "$ROOT/bench/regimes/check_regimes.py" "$OUT/regimes" "$OUT/single" --out "$OUT/results.json"

{
    echo "# regimes bench $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "- problem $PROBLEM, agent $AGENT, budget $BUDGET evaluations per session"
    echo
    echo "| step | result |"
    echo "|---|---|"
    for k in run-problem run-single show-problem export-regimes export-single regimes-configure regimes-build \
        regimes-ctest check; do
        [[ -n "${STATUS[$k]:-}" ]] && echo "| $k | ${STATUS[$k]} |"
    done
    echo
    echo '```'
    sed -n '/^regimes (a best/,/^leaderboard/p' "$OUT/show-problem.log" | head -n 12
    echo '```'
    echo '```'
    cat "$OUT/check.log" 2>/dev/null | tail -n 40
    echo '```'
} >"$OUT/summary.md"
cat "$OUT/summary.md"
for k in regimes-build regimes-ctest check; do
    [[ "${STATUS[$k]:-FAIL}" == ok* ]] || exit 1
done
exit 0
